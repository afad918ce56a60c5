"""The transform applied to hidden states at masked positions (BERT's MLM head)."""

import keras
from keras import ops

from tfformer.errors import InputError, InputTypeError
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.validation import check_positive_number


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedLMHead(keras.layers.Layer):
    """Gathers hidden states at masked positions and transforms them.

        h = LayerNorm(act(sequence[mask_positions] W + b))

    The vocabulary projection follows it as a separate, tied step
    (`TokenAndPositionEmbedding(..., reverse=True)`), as in BERT, so this layer
    holds no copy of the embedding matrix.

    Args:
        activation: activation of the transform ("gelu" in BERT).
        layer_norm_epsilon: epsilon of the layer norm.
        kernel_initializer: initializer of the transform.

    Call arguments:
        inputs: `(batch, length, hidden_dim)` encoder outputs.
        mask_positions: `(batch, num_masked)` integer positions to predict.

    Returns:
        `(batch, num_masked, hidden_dim)`.

    Example:
    >>> head = MaskedLMHead()
    >>> h = head(keras.random.normal((2, 10, 64)), mask_positions=[[1, 4], [0, 9]])
    """

    def __init__(
        self,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        super().__init__(**kwargs)
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape, mask_positions_shape=None):
        if len(inputs_shape) != 3 or inputs_shape[-1] is None:
            raise InputError(
                "MaskedLMHead expects inputs (batch, length, hidden_dim). "
                f"Received: inputs with shape {inputs_shape}"
            )
        hidden_dim = inputs_shape[-1]
        self.dense = keras.layers.Dense(
            hidden_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer.clone(),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.dense.build((None, None, hidden_dim))
        self.layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build((None, None, hidden_dim))
        self.built = True

    def call(self, inputs, mask_positions):
        dtype = keras.backend.standardize_dtype(
            getattr(mask_positions, "dtype", "int32")
        )
        if "int" not in dtype:
            raise InputTypeError(
                f"mask_positions must be integers. Received: mask_positions with "
                f"dtype {dtype}"
            )
        positions = ops.expand_dims(ops.cast(mask_positions, "int32"), -1)
        gathered = ops.take_along_axis(inputs, positions, axis=1)  # (B, P, hidden)
        return self.layer_norm(self.dense(gathered))

    def compute_output_shape(self, inputs_shape, mask_positions_shape):
        return (inputs_shape[0], mask_positions_shape[1], inputs_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
