"""The encoder-decoder Transformer of "Attention Is All You Need"."""

import keras

from tfformer.layers.dropout import Dropout
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.common import (
    decoder_stack,
    encoder_stack,
    final_norm,
    float32_logits,
)

TIE_CHOICES = ("none", "decoder", "all")


def transformer_seq2seq(
    encoder_vocabulary_size,
    decoder_vocabulary_size,
    *,
    num_encoder_layers=6,
    num_decoder_layers=6,
    hidden_dim=512,
    num_heads=8,
    intermediate_dim=2048,
    dropout=0.1,
    activation_dropout=None,
    max_sequence_length=256,
    position="sinusoidal",
    scale_embeddings=True,
    tie_embeddings="decoder",
    normalize_first=False,
    activation="relu",
    layer_norm_epsilon=1e-6,
    num_key_value_heads=None,
    fused_qkv=False,
    name="transformer_seq2seq",
):
    """Builds the encoder-decoder Transformer as a functional `keras.Model`.

    Teacher-forced: `{"encoder_token_ids": (batch, S), "decoder_token_ids":
    (batch, T)}` (the target shifted right behind a start id) in,
    `(batch, T, decoder_vocabulary_size)` float32 logits out. Id 0 is padding
    in both inputs and is masked everywhere.

    The defaults are the paper's base model (6+6 layers, d_model 512, 8 heads,
    d_ff 2048, dropout 0.1, post-norm, sinusoidal positions, embeddings scaled
    by sqrt(d_model)). See `tfformer.models.PRESETS` for ready-made sizes.

    Args:
        encoder_vocabulary_size, decoder_vocabulary_size: vocabulary sizes.
        num_encoder_layers, num_decoder_layers: blocks in each stack.
        hidden_dim: d_model.
        num_heads: attention heads.
        intermediate_dim: feed-forward width d_ff.
        dropout: P_drop, on embeddings, sublayer outputs and attention
            (and, unless `activation_dropout` says otherwise, on the FFN's
            hidden activations, which the paper does not mention).
        activation_dropout: dropout on the FFN's hidden activations; None:
            `dropout`. The paper's section 5.4 and keras-hub's blocks: 0.0.
        max_sequence_length: longest sequence (learned positions need it).
        position: "sinusoidal" or "learned".
        scale_embeddings: multiply token embeddings by sqrt(d_model) (the
            paper). keras-hub's TokenAndPositionEmbedding does not.
        tie_embeddings: "decoder" shares the decoder's embedding and output
            projection (the paper); "all" also shares it with the encoder
            (needs one joint vocabulary); "none" shares nothing.
        normalize_first: pre-norm blocks (adds a final LayerNorm per stack).
        activation: FFN activation.
        layer_norm_epsilon: epsilon of every layer norm.
        num_key_value_heads: grouped-query attention in every block.
        fused_qkv: one query/key/value matrix in every self-attention
            (cross-attention keeps its separate query and key/value ones).
        name: the model's name.

    Returns:
        A `keras.Model`. Its layers are named for cached decoding
        (`tfformer.models.CachedDecoder`): `encoder_embedding`,
        `encoder_block_{i}`, `decoder_embedding`, `decoder_block_{i}`, `logits`.
    """
    check_positive_int("encoder_vocabulary_size", encoder_vocabulary_size)
    check_positive_int("decoder_vocabulary_size", decoder_vocabulary_size)
    check_positive_int("num_encoder_layers", num_encoder_layers)
    check_positive_int("num_decoder_layers", num_decoder_layers)
    if tie_embeddings not in TIE_CHOICES:
        raise ValueError(
            f"tie_embeddings must be one of {TIE_CHOICES}. "
            f"Received: tie_embeddings={tie_embeddings!r}"
        )
    if tie_embeddings == "all" and encoder_vocabulary_size != decoder_vocabulary_size:
        raise ValueError(
            "tie_embeddings='all' needs one shared vocabulary. Received: "
            f"encoder_vocabulary_size={encoder_vocabulary_size}, "
            f"decoder_vocabulary_size={decoder_vocabulary_size}"
        )
    if position not in ("sinusoidal", "learned"):
        raise ValueError(
            "position must be 'sinusoidal' or 'learned'. "
            f"Received: position={position!r}"
        )

    def embedding(vocabulary_size, tie_weights, layer_name):
        return TokenAndPositionEmbedding(
            vocabulary_size,
            hidden_dim,
            sequence_length=max_sequence_length,
            position=position,
            scale_embeddings=scale_embeddings,
            tie_weights=tie_weights,
            mask_zero=True,
            name=layer_name,
        )

    decoder_embedding = embedding(
        decoder_vocabulary_size, tie_embeddings != "none", "decoder_embedding"
    )
    if tie_embeddings == "all":
        encoder_embedding = decoder_embedding
    else:
        encoder_embedding = embedding(
            encoder_vocabulary_size, True, "encoder_embedding"
        )

    block_kwargs = dict(
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        num_key_value_heads=num_key_value_heads,
        dropout=dropout,
        activation_dropout=activation_dropout,
        activation=activation,
        layer_norm_epsilon=layer_norm_epsilon,
        normalize_first=normalize_first,
        fused_qkv=fused_qkv,
    )
    encoder_token_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
    decoder_token_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")

    x = encoder_embedding(encoder_token_ids)
    x = Dropout(dropout, name="encoder_embedding_dropout")(x)
    x = encoder_stack(x, num_encoder_layers, **block_kwargs)
    encoder_outputs = final_norm(x, normalize_first, layer_norm_epsilon, "encoder_norm")

    y = decoder_embedding(decoder_token_ids)
    y = Dropout(dropout, name="decoder_embedding_dropout")(y)
    y = decoder_stack(y, num_decoder_layers, encoder_outputs, **block_kwargs)
    y = final_norm(y, normalize_first, layer_norm_epsilon, "decoder_norm")
    logits = float32_logits(decoder_embedding(y, reverse=True))
    return keras.Model(
        {
            "encoder_token_ids": encoder_token_ids,
            "decoder_token_ids": decoder_token_ids,
        },
        logits,
        name=name,
    )
