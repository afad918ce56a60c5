"""Resolving a padding mask from an explicit argument or a Keras mask."""

from keras import ops
from keras.src.backend import get_keras_mask

from tfformer.layers.validation import static_dim


def resolve_padding_mask(inputs, padding_mask, name):
    """The `(batch, length)` boolean padding mask for `inputs`, or None.

    An explicit `padding_mask` wins; otherwise the Keras mask attached to
    `inputs` (from `mask_zero=True` embeddings) is used, so both ways of
    passing padding give the same result.
    """
    mask = get_keras_mask(inputs) if padding_mask is None else padding_mask
    if mask is None:
        return None
    if len(mask.shape) != 2:
        raise ValueError(
            f"{name} must have shape (batch, length). Received: {name} with "
            f"shape {mask.shape}"
        )
    length, mask_length = static_dim(inputs.shape[1]), static_dim(mask.shape[1])
    if None not in (length, mask_length) and length != mask_length:
        raise ValueError(
            f"{name} must cover every position of the sequence (length "
            f"{inputs.shape[1]}). Received: {name} with shape {mask.shape}"
        )
    return ops.cast(mask, "bool")
