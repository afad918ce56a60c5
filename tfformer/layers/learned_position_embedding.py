"""A trainable table of position vectors (BERT, GPT-2, ViT)."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.rotary_embedding import positions_from
from tfformer.layers.validation import check_positive_int, static_dim


@keras.saving.register_keras_serializable(package="tfformer")
class LearnedPositionEmbedding(keras.layers.Layer):
    """Looks up a learned vector for each position: output[b, t] = P[start + t].

    Args:
        sequence_length: rows of the table, the longest sequence it can encode.
        initializer: initializer of the table.

    Call arguments:
        inputs: `(batch, length, dim)`; only its shape is used.
        start_index: position of the first step: an int, a scalar tensor or a
            `(batch,)` tensor, for incremental decoding.

    Returns:
        `(batch, length, dim)` position vectors.

    A sequence longer than the table raises `ValueError` whenever its length
    is known when the layer is called (eagerly, or traced with a static
    shape). Inside a graph with an unknown length, the positions are clipped
    to the last row instead of reading out of bounds.

    Example:
    >>> x = keras.ops.zeros((2, 10, 64))
    >>> x = x + LearnedPositionEmbedding(sequence_length=128)(x)
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        check_positive_int("sequence_length", sequence_length)
        super().__init__(**kwargs)
        self.sequence_length = sequence_length
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise InputError(
                "LearnedPositionEmbedding expects (batch, length, dim) with a "
                f"known dim. Received: inputs with shape {input_shape}"
            )
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )
        super().build(input_shape)

    def call(self, inputs, start_index=0):
        length = static_dim(inputs.shape[1])
        if length is not None and isinstance(start_index, int):
            if start_index + length > self.sequence_length:
                raise InputError(
                    f"The sequence is longer than the position table "
                    f"(sequence_length={self.sequence_length}). Received: inputs "
                    f"of length {length} starting at position {start_index}"
                )
        shape = ops.shape(inputs)
        positions = positions_from(start_index, shape[1])  # (1|B, L)
        positions = ops.minimum(positions, self.sequence_length - 1)
        table = ops.cast(self.position_embeddings, self.compute_dtype)
        embedded = ops.take(table, positions, axis=0)  # (1|B, L, dim)
        return ops.broadcast_to(embedded, (shape[0], shape[1], inputs.shape[-1]))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
