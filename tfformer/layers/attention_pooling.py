"""Sequence pooling by learned attention weights (CCT's SeqPool, Hassani et
al. 2021)."""

import keras
from keras import ops

from tfformer.errors import InputError


@keras.saving.register_keras_serializable(package="tfformer")
class AttentionPooling(keras.layers.Layer):
    """`(batch, tokens, dim)` to `(batch, dim)`: a weighted mean of the
    tokens whose weights a linear map scores,

        w = softmax_over_tokens(x g + b),    z = w^T x

    with `g` a `(dim, 1)` kernel and `b` a bias. It replaces the class
    token: every token's output feeds the head, in the share the model
    learns. `weights_of` returns `w` (the attention rollout of a model
    without a class token weighs its rows with it).

    The softmax is computed in float32 whatever the layer's dtype policy.
    """

    def build(self, sequence_shape):
        if len(sequence_shape) != 3 or sequence_shape[-1] is None:
            raise InputError(
                "AttentionPooling expects (batch, tokens, dim) with a known "
                f"dim. Received: sequence with shape {sequence_shape}"
            )
        self.score = keras.layers.Dense(1, dtype=self.dtype_policy, name="score")
        self.score.build(sequence_shape)
        self.built = True

    def weights_of(self, sequence):
        """`(batch, tokens)` float32 pooling weights (rows sum to 1)."""
        scores = ops.cast(self.score(sequence)[..., 0], "float32")
        return ops.softmax(scores, axis=-1)

    def call(self, sequence):
        weights = ops.cast(self.weights_of(sequence), sequence.dtype)
        return ops.sum(sequence * weights[:, :, None], axis=1)

    def compute_output_shape(self, sequence_shape):
        return (sequence_shape[0], sequence_shape[2])
