"""Pieces the backbones share: the block stacks and the final norm of a
pre-norm stack, each returning the layers it made so a backbone can keep
typed handles to them.

Each layer is created right before it is first called, so the initial
weights are drawn in graph order: a backbone built with a seed has the
weights tfformer's models always had with that seed.
"""

from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.rms_normalization import RMSNormalization
from tfformer.layers.transformer_decoder_block import TransformerDecoderBlock
from tfformer.layers.transformer_encoder_block import TransformerEncoderBlock

NORMALIZATIONS = {"layer": LayerNormalization, "rms": RMSNormalization}


def apply_final_norm(x, normalize_first, epsilon, name, dtype, normalization="layer"):
    """`(x, norm)`: a pre-norm stack ends with a norm; a post-norm one
    already did (`norm` is None and `x` unchanged)."""
    if not normalize_first:
        return x, None
    norm = NORMALIZATIONS[normalization](epsilon=epsilon, name=name, dtype=dtype)
    return norm(x), norm


def encoder_stack(x, num_layers, dtype, padding_mask=None, **block_kwargs):
    """`(x, blocks)`: `x` through `num_layers` encoder blocks named
    `encoder_block_{i}`."""
    blocks = []
    for i in range(num_layers):
        block = TransformerEncoderBlock(
            name=f"encoder_block_{i}", dtype=dtype, **block_kwargs
        )
        x = block(x) if padding_mask is None else block(x, padding_mask=padding_mask)
        blocks.append(block)
    return x, blocks


def decoder_stack(x, num_layers, dtype, encoder_outputs=None, **block_kwargs):
    """`(x, blocks)`: `x` through `num_layers` decoder blocks named
    `decoder_block_{i}` (attending to `encoder_outputs` when given)."""
    blocks = []
    for i in range(num_layers):
        block = TransformerDecoderBlock(
            name=f"decoder_block_{i}", dtype=dtype, **block_kwargs
        )
        x = block(x) if encoder_outputs is None else block(x, encoder_outputs)
        blocks.append(block)
    return x, blocks
