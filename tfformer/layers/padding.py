"""Padding masks: the Keras-attached one, or an explicit argument."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.validation import static_dim

# Keras 3 (through 3.15) exports no reader for the mask that
# `Embedding(mask_zero=True)` attaches to its output: it exists only as
# `keras.src.backend.get_keras_mask`. Reading the `_keras_mask` attribute
# instead would be just as private and would miss masks on tensors that refuse
# attributes (JAX arrays and tracers), which Keras keeps in a table of its own,
# so padding would be silently ignored there; keras-hub reads masks through the
# same private function for that reason. It is imported here and nowhere else,
# and `keras_mask` fails with the Keras version if it goes.
try:
    from keras.src.backend import get_keras_mask as _get_keras_mask
except ImportError:
    _get_keras_mask = None


def keras_mask(x):
    """The mask Keras attached to `x` (e.g. by `mask_zero=True`), or None."""
    if _get_keras_mask is None:
        raise RuntimeError(
            "tfformer reads the masks Keras attaches to tensors (e.g. "
            "Embedding(mask_zero=True)) with keras.src.backend.get_keras_mask, "
            f"which Keras {keras.version()} does not have. Install the Keras "
            "version tfformer supports (setup.cfg: keras>=3.15,<4) or update "
            "tfformer.layers.padding.keras_mask."
        )
    return _get_keras_mask(x)


def resolve_padding_mask(inputs, padding_mask, name):
    """The `(batch, length)` boolean padding mask for `inputs`, or None.

    An explicit `padding_mask` wins; otherwise the Keras mask attached to
    `inputs` (from `mask_zero=True` embeddings) is used, so both ways of
    passing padding give the same result.
    """
    mask = keras_mask(inputs) if padding_mask is None else padding_mask
    if mask is None:
        return None
    if len(mask.shape) != 2:
        raise InputError(
            f"{name} must have shape (batch, length). Received: {name} with "
            f"shape {mask.shape}"
        )
    length, mask_length = static_dim(inputs.shape[1]), static_dim(mask.shape[1])
    if None not in (length, mask_length) and length != mask_length:
        raise InputError(
            f"{name} must cover every position of the sequence (length "
            f"{inputs.shape[1]}). Received: {name} with shape {mask.shape}"
        )
    return ops.cast(mask, "bool")
