"""The fixed sinusoidal position encoding of "Attention Is All You Need"."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.rotary_embedding import positions_from
from tfformer.layers.validation import check_positive_number


@keras.saving.register_keras_serializable(package="tfformer")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Sinusoidal position encoding (section 3.5 of the paper).

        PE(pos, 2i)   = sin(pos / max_wavelength^(2i / d))
        PE(pos, 2i+1) = cos(pos / max_wavelength^(2i / d))

    with max_wavelength = 10000 in the paper. It has no weights, so it works
    for any length.

    Args:
        max_wavelength: the base of the wavelengths' geometric progression.

    Call arguments:
        inputs: `(batch, length, dim)`; only its shape is used.
        start_index: position of the first step: an int, a scalar tensor or a
            `(batch,)` tensor, for incremental decoding.

    Returns:
        The encoding, `(batch, length, dim)`, in the layer's compute dtype.

    Example:
    >>> x = keras.ops.zeros((2, 10, 64))
    >>> x = x + SinusoidalPositionEncoding()(x)
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        check_positive_number("max_wavelength", max_wavelength)
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise InputError(
                "SinusoidalPositionEncoding expects (batch, length, dim) with a "
                f"known dim. Received: inputs with shape {input_shape}"
            )
        super().build(input_shape)

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        dim = inputs.shape[-1]
        feature = ops.arange(dim, dtype="int32")
        is_even = ops.equal(feature % 2, 0)
        # The exponent 2i/d with 2i = the even index at or below each feature.
        exponent = ops.cast(feature - feature % 2, "float32") / float(dim)
        inverse_wavelength = ops.power(float(self.max_wavelength), -exponent)  # (d,)
        positions = ops.cast(positions_from(start_index, shape[1]), "float32")
        angles = ops.expand_dims(positions, -1) * inverse_wavelength  # (1|B, L, d)
        encoding = ops.where(is_even, ops.sin(angles), ops.cos(angles))
        encoding = ops.broadcast_to(encoding, (shape[0], shape[1], dim))
        return ops.cast(encoding, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config
