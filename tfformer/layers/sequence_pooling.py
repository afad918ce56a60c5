"""Pooling a sequence of token vectors into one vector per sequence."""

import keras
from keras import ops

from tfformer.errors import InputError, InputTypeError

MODES = ("mean", "cls", "max")


@keras.saving.register_keras_serializable(package="tfformer")
class SequencePooling(keras.layers.Layer):
    """`(batch, length, dim)` token vectors to `(batch, dim)`, ignoring padding.

    Modes (those of sentence-transformers' `Pooling` module):
    - "mean": the average of the real tokens' vectors (padding excluded;
      a row without real tokens gives zeros).
    - "cls": the first token's vector.
    - "max": the element-wise maximum over real tokens (zeros for a row
      without any).

    With `normalize`, each vector is then divided by its L2 norm (as
    sentence-transformers' `Normalize` module; a zero vector stays zero).

    Call arguments:
        sequence: `(batch, length, dim)` float tensor.
        padding_mask: `(batch, length)` boolean, True for real tokens.

    Args:
        mode: one of `MODES`.
        normalize: L2-normalize the pooled vectors.
    """

    def __init__(self, mode="mean", normalize=False, **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise InputError(f"mode must be one of {MODES}. Received: mode={mode!r}")
        if not isinstance(normalize, bool):
            raise InputTypeError(f"normalize must be a bool. Received: {normalize!r}")
        self.mode = mode
        self.normalize = normalize
        self.supports_masking = True

    def call(self, sequence, padding_mask):
        if self.mode == "cls":
            pooled = sequence[:, 0, :]
        else:
            real = ops.cast(padding_mask, sequence.dtype)[:, :, None]
            if self.mode == "mean":
                total = ops.sum(sequence * real, axis=1)
                count = ops.maximum(ops.sum(real, axis=1), 1.0)
                pooled = total / count
            else:
                lowest = ops.cast(ops.min(sequence), sequence.dtype) - 1.0
                masked = ops.where(real > 0, sequence, lowest)
                any_real = ops.any(padding_mask, axis=1)[:, None]
                pooled = ops.where(any_real, ops.max(masked, axis=1), 0.0)
        if self.normalize:
            squared = ops.sum(ops.square(pooled), axis=-1, keepdims=True)
            pooled = pooled * ops.where(squared > 0, ops.rsqrt(squared), 0.0)
        return pooled

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, sequence_shape, padding_mask_shape=None):
        return (sequence_shape[0], sequence_shape[2])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "normalize": self.normalize}
