"""Attention-mask helpers shared by the attention layer and the blocks.

Every mask here is boolean with `True` meaning "may attend". The causal mask
is built from `arange` and a comparison after `reshape`, never `x[:, None]` or
strided slices: those lower to a StridedSlice with `new_axis_mask`, which the
TFLite converter only accepts as a Flex (SELECT_TF_OPS) op.
"""

from keras import ops

from tfformer.errors import InputError
from tfformer.layers.validation import static_dim


def causal_mask(query_length, key_length, start_index=0):
    """Lower-triangular mask of shape `(1, query_length, key_length)`.

    Query row `t` sits at absolute position `start_index + t` and may attend to
    key positions `s <= start_index + t`. With `start_index=0` and equal lengths
    this is the usual lower triangle; with a key/value cache of length
    `key_length`, `start_index` is the cache index of the first new token.

    Args:
        query_length: int or scalar int tensor, T.
        key_length: int or scalar int tensor, S.
        start_index: int or scalar int tensor, absolute position of query 0;
            or a `(batch,)` tensor, one per row.

    Returns:
        Boolean tensor `(1, T, S)` (`(batch, T, S)` for one start per row).
    """
    start = ops.cast(start_index, "int32")
    if len(start.shape) == 1:
        start = ops.reshape(start, (-1, 1, 1))  # (B, 1, 1)
    rows = ops.reshape(ops.arange(query_length, dtype="int32"), (1, -1, 1)) + start
    cols = ops.arange(key_length, dtype="int32")
    cols = ops.reshape(cols, (1, 1, -1))  # (1, 1, S)
    return ops.greater_equal(rows, cols)  # (1, T, S)


def _check_mask(name, mask, rank, key_length):
    if len(mask.shape) != rank:
        raise InputError(
            f"{name} must have rank {rank}. Received: {name} with shape {mask.shape}"
        )
    mask_length = static_dim(mask.shape[-1])
    if None not in (key_length, mask_length) and mask_length != key_length:
        raise InputError(
            f"The last axis of {name} must match the key length {key_length}. "
            f"Received: {name} with shape {mask.shape}"
        )


def merge_attention_masks(
    *,
    key_length=None,
    query_mask=None,
    key_padding_masks=(),
    attention_mask=None,
    causal=None,
):
    """AND together every mask that is given into one `(batch, T, S)` mask.

    Args:
        key_length: static key length S (int or None) used to validate shapes.
        query_mask: `(batch, T)` mask of real query positions, or None.
        key_padding_masks: `(batch, S)` masks of real key positions.
        attention_mask: `(batch, T, S)` mask, or None.
        causal: `(1, T, S)` mask from `causal_mask`, or None.

    Returns:
        A boolean mask broadcastable to `(batch, T, S)`, or None when no mask
        was given.
    """
    merged = None

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if query_mask is not None:
        _check_mask("query_mask", query_mask, 2, None)
        merged = ops.expand_dims(ops.cast(query_mask, "bool"), -1)  # (B, T, 1)
    for name, mask in key_padding_masks:
        if mask is None:
            continue
        _check_mask(name, mask, 2, key_length)
        merged = _and(merged, ops.expand_dims(ops.cast(mask, "bool"), 1))  # (B,1,S)
    if attention_mask is not None:
        _check_mask("attention_mask", attention_mask, 3, key_length)
        merged = _and(merged, ops.cast(attention_mask, "bool"))
    if causal is not None:
        merged = _and(merged, causal)
    return merged
