"""Keras 3 layers of the Transformer; backend-neutral (`keras.ops` only)."""

from tfformer.layers.attention_mask import causal_mask, merge_attention_masks
from tfformer.layers.attention_pooling import AttentionPooling
from tfformer.layers.convolutional_tokenizer import ConvolutionalTokenizer
from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import FeedForward
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.learned_position_embedding import LearnedPositionEmbedding
from tfformer.layers.masked_lm_head import MaskedLMHead
from tfformer.layers.multi_head_attention import MultiHeadAttention
from tfformer.layers.patch_embedding import PatchEmbedding
from tfformer.layers.rms_normalization import RMSNormalization
from tfformer.layers.rotary_embedding import RotaryEmbedding
from tfformer.layers.sequence_pooling import SequencePooling
from tfformer.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.transformer_decoder_block import TransformerDecoderBlock
from tfformer.layers.transformer_encoder_block import TransformerEncoderBlock

__all__ = [
    "AttentionPooling",
    "ConvolutionalTokenizer",
    "Dropout",
    "FeedForward",
    "LayerNormalization",
    "LearnedPositionEmbedding",
    "MaskedLMHead",
    "MultiHeadAttention",
    "PatchEmbedding",
    "RMSNormalization",
    "RotaryEmbedding",
    "SequencePooling",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "causal_mask",
    "merge_attention_masks",
]
