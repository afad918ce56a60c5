"""A decoder-only causal language model (GPT)."""

import keras

from tfformer.layers.dropout import Dropout
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.common import (
    decoder_stack,
    final_norm,
    float32_logits,
)

POSITIONS = ("learned", "sinusoidal", "rotary")


def gpt_decoder(
    vocabulary_size,
    *,
    num_layers=12,
    hidden_dim=768,
    num_heads=12,
    intermediate_dim=3072,
    dropout=0.1,
    activation_dropout=None,
    max_sequence_length=1024,
    position="learned",
    normalize_first=True,
    activation="gelu",
    layer_norm_epsilon=1e-5,
    tie_embeddings=True,
    num_key_value_heads=None,
    rotary_max_wavelength=10000,
    normalization="layer",
    gated_ffn=False,
    use_bias=True,
    padding_logit=None,
    name="gpt_decoder",
):
    """Builds a causal language model as a functional `keras.Model`.

    `{"token_ids": (batch, T)}` in, `(batch, T, vocabulary_size)` float32
    next-token logits out; position t sees tokens 0..t only. Id 0 is padding.
    The defaults are GPT-2 small (12 layers, d 768, 12 heads, pre-norm, GELU,
    learned positions, tied output projection). Llama's decoder is
    `position="rotary", normalization="rms", gated_ffn=True,
    activation="silu", use_bias=False` (with `num_key_value_heads` for
    grouped-query attention and usually `tie_embeddings=False`).

    Args:
        vocabulary_size: vocabulary size.
        num_layers, hidden_dim, num_heads, intermediate_dim: sizes.
        dropout: dropout rate.
        activation_dropout: dropout on the FFN's hidden activations; None:
            `dropout`. keras-hub's blocks, GPT-2 and BERT have none (0.0).
        max_sequence_length: context length (rows of a learned position table).
        position: "learned", "sinusoidal", or "rotary" (positions applied to
            queries and keys inside attention; no additive embedding).
        normalize_first: pre-norm (GPT-2) or post-norm.
        activation: FFN activation.
        layer_norm_epsilon: epsilon of the layer norms.
        tie_embeddings: share the token embedding with the output projection.
        num_key_value_heads: grouped-/multi-query attention.
        rotary_max_wavelength: base of the rotary frequencies.
        normalization: "layer" (LayerNorm) or "rms" (`RMSNormalization`),
            for every norm including the final one.
        gated_ffn: a gated feed-forward network (SwiGLU with "silu").
        use_bias: biases in the attention and feed-forward projections.
        padding_logit: None, or the constant logit of id 0 (padding): a
            checkpoint converted with its ids shifted by one (GPT-2's id 0
            is "!") writes -1e4 there (see `TokenAndPositionEmbedding`).
        name: the model's name.

    Returns:
        A `keras.Model` with layers `decoder_embedding`, `decoder_block_{i}`,
        `decoder_norm` (pre-norm) and `logits`, for `CachedDecoder`.
    """
    check_positive_int("vocabulary_size", vocabulary_size)
    check_positive_int("num_layers", num_layers)
    if position not in POSITIONS:
        raise ValueError(
            f"position must be one of {POSITIONS}. Received: position={position!r}"
        )
    embedding = TokenAndPositionEmbedding(
        vocabulary_size,
        hidden_dim,
        sequence_length=max_sequence_length,
        position="none" if position == "rotary" else position,
        scale_embeddings=False,
        tie_weights=tie_embeddings,
        mask_zero=True,
        padding_logit=padding_logit,
        name="decoder_embedding",
    )
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    x = embedding(token_ids)
    x = Dropout(dropout, name="decoder_embedding_dropout")(x)
    x = decoder_stack(
        x,
        num_layers,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        num_key_value_heads=num_key_value_heads,
        dropout=dropout,
        activation_dropout=activation_dropout,
        activation=activation,
        layer_norm_epsilon=layer_norm_epsilon,
        normalize_first=normalize_first,
        rotary_max_wavelength=rotary_max_wavelength if position == "rotary" else None,
        normalization=normalization,
        gated_ffn=gated_ffn,
        use_bias=use_bias,
    )
    x = final_norm(
        x, normalize_first, layer_norm_epsilon, "decoder_norm", normalization
    )
    logits = float32_logits(embedding(x, reverse=True))
    return keras.Model({"token_ids": token_ids}, logits, name=name)
