"""Rotary position embedding (RoFormer, Su et al. 2021)."""

import math

import keras
import numpy as np
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.validation import check_positive_number


def positions_from(start_index, length):
    """Absolute positions `(1 or batch, length)` starting at `start_index`.

    `start_index` is an int, a scalar tensor, or a `(batch,)` tensor (one
    offset per sequence, for batched incremental decoding).
    """
    start = ops.reshape(ops.cast(start_index, "int32"), (-1, 1))  # (1|B, 1)
    steps = ops.reshape(ops.arange(length, dtype="int32"), (1, -1))  # (1, L)
    return start + steps  # (1|B, L)


LLAMA3_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)


def check_frequency_scaling(scaling, name="frequency_scaling"):
    """`scaling` (None, or Llama 3.1's rotary scaling as Hugging Face's
    config.json writes it) as a dict of floats; ValueError naming what is
    wrong otherwise."""
    if scaling is None:
        return None
    if not isinstance(scaling, dict) or scaling.get("rope_type") != "llama3":
        raise InputError(
            f'{name} must be None or a dict with rope_type "llama3". '
            f"Received: {name}={scaling!r}"
        )
    missing = [key for key in LLAMA3_KEYS if key not in scaling]
    unknown = sorted(set(scaling) - {"rope_type", *LLAMA3_KEYS})
    if missing or unknown:
        raise InputError(
            f"{name} of rope_type llama3 takes exactly {', '.join(LLAMA3_KEYS)}. "
            f"Received: missing {missing}, unknown {unknown}"
        )
    values = {}
    for key in LLAMA3_KEYS:
        value = scaling[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InputError(
                f"{name}['{key}'] must be a positive number. Received: {value!r}"
            )
        values[key] = float(value)
    if values["high_freq_factor"] <= values["low_freq_factor"]:
        raise InputError(
            f"{name}: high_freq_factor must exceed low_freq_factor. Received: "
            f"{values['high_freq_factor']} and {values['low_freq_factor']}"
        )
    return {"rope_type": "llama3", **values}


def llama3_frequency_multipliers(scaling, max_wavelength, dim):
    """What Llama 3.1's rotary scaling multiplies each of the `dim / 2`
    inverse frequencies by (as `transformers`' `_compute_llama3_parameters`
    and keras-hub's `LlamaRotaryEmbedding`): 1 for wavelengths shorter than
    `original / high_freq_factor`, 1 / factor for those longer than
    `original / low_freq_factor`, and between them a linear blend in
    `original / wavelength`."""
    inverse_freq = float(max_wavelength) ** -(np.arange(0, dim, 2) / dim)
    wavelength = 2 * math.pi / inverse_freq
    original = scaling["original_max_position_embeddings"]
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    smooth = (original / wavelength - low) / (high - low)
    multipliers = np.where(
        wavelength > original / low,
        1.0 / factor,
        np.where(wavelength < original / high, 1.0, (1 - smooth) / factor + smooth),
    )
    return multipliers.astype("float32")


@keras.saving.register_keras_serializable(package="tfformer")
class RotaryEmbedding(keras.layers.Layer):
    """Rotates feature pairs by an angle proportional to the position.

    For position `m` and pair index `i < d/2`, with theta_i =
    max_wavelength^(-2i/d) / scaling_factor, the pair (x_i, x_{i+d/2}) becomes

        (x_i cos(m theta_i) - x_{i+d/2} sin(m theta_i),
         x_{i+d/2} cos(m theta_i) + x_i sin(m theta_i)).

    Pairs are formed as "rotate half" (first half with second half), the layout
    of GPT-NeoX, Llama and keras-hub, so weights trained there line up. The dot
    product of a rotated query at position m and key at position n depends only
    on m - n.

    Args:
        max_wavelength: the base of the geometric frequency progression.
        scaling_factor: positions are divided by this (linear position
            interpolation for longer contexts); 1.0 is the paper.
        frequency_scaling: None, or Llama 3.1's per-frequency scaling as
            config.json's `rope_scaling` writes it: `{"rope_type": "llama3",
            "factor", "low_freq_factor", "high_freq_factor",
            "original_max_position_embeddings"}` (see
            `llama3_frequency_multipliers`).

    Call arguments:
        inputs: `(batch, length, dim)` or `(batch, length, heads, dim)`, with an
            even `dim`.
        start_index: position of the first element along `length`: an int, a
            scalar tensor or a `(batch,)` tensor.

    Returns:
        A tensor of the same shape and dtype as `inputs`.

    Example:
    >>> rope = RotaryEmbedding()
    >>> q = rope(keras.random.normal((2, 5, 4, 8)))
    """

    def __init__(
        self, max_wavelength=10000, scaling_factor=1.0, frequency_scaling=None, **kwargs
    ):
        check_positive_number("max_wavelength", max_wavelength)
        check_positive_number("scaling_factor", scaling_factor)
        frequency_scaling = check_frequency_scaling(frequency_scaling)
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength
        self.scaling_factor = scaling_factor
        self.frequency_scaling = frequency_scaling
        self.supports_masking = True

    def build(self, input_shape):
        if len(input_shape) not in (3, 4):
            raise InputError(
                "RotaryEmbedding expects inputs of rank 3 or 4. "
                f"Received: inputs with shape {input_shape}"
            )
        dim = input_shape[-1]
        if dim is None or dim % 2:
            raise InputError(
                "RotaryEmbedding needs an even, known last dimension. "
                f"Received: inputs with shape {input_shape}"
            )
        super().build(input_shape)

    def _cos_sin(self, length, dim, start_index, rank):
        half = dim // 2
        exponent = ops.arange(half, dtype="float32") * (2.0 / dim)
        inverse_freq = ops.power(float(self.max_wavelength), -exponent)  # (d/2,)
        if self.frequency_scaling is not None:
            inverse_freq = inverse_freq * llama3_frequency_multipliers(
                self.frequency_scaling, self.max_wavelength, dim
            )
        positions = ops.cast(positions_from(start_index, length), "float32")
        positions = positions / self.scaling_factor
        angles = ops.expand_dims(positions, -1) * inverse_freq  # (1|B, L, d/2)
        if rank == 4:
            angles = ops.expand_dims(angles, 2)  # (1|B, L, 1, d/2)
        angles = ops.concatenate([angles, angles], axis=-1)  # (..., d)
        return ops.cos(angles), ops.sin(angles)

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        cos, sin = self._cos_sin(shape[1], inputs.shape[-1], start_index, inputs.ndim)
        first, second = ops.split(inputs, 2, axis=-1)
        rotated = ops.concatenate([-second, first], axis=-1)
        cos = ops.cast(cos, inputs.dtype)
        sin = ops.cast(sin, inputs.dtype)
        return inputs * cos + rotated * sin

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_wavelength": self.max_wavelength,
                "scaling_factor": self.scaling_factor,
                "frequency_scaling": self.frequency_scaling,
            }
        )
        return config
