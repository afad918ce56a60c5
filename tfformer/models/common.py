"""Pieces the model builders share: argument checks and the block stacks."""

import keras

from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.rms_normalization import RMSNormalization
from tfformer.layers.transformer_decoder_block import TransformerDecoderBlock
from tfformer.layers.transformer_encoder_block import TransformerEncoderBlock


def float32_logits(x, name="logits"):
    """Logits in float32 whatever the dtype policy, for a stable softmax/loss."""
    return keras.layers.Activation("linear", dtype="float32", name=name)(x)


def final_norm(x, normalize_first, epsilon, name, normalization="layer"):
    """Pre-norm stacks end with a LayerNorm (or an RMSNorm); post-norm ones
    already did."""
    if not normalize_first:
        return x
    kind = RMSNormalization if normalization == "rms" else LayerNormalization
    return kind(epsilon=epsilon, name=name)(x)


def encoder_stack(x, num_layers, padding_mask=None, **block_kwargs):
    for i in range(num_layers):
        block = TransformerEncoderBlock(name=f"encoder_block_{i}", **block_kwargs)
        x = block(x) if padding_mask is None else block(x, padding_mask=padding_mask)
    return x


def decoder_stack(x, num_layers, encoder_outputs=None, **block_kwargs):
    for i in range(num_layers):
        block = TransformerDecoderBlock(name=f"decoder_block_{i}", **block_kwargs)
        x = block(x) if encoder_outputs is None else block(x, encoder_outputs)
    return x
