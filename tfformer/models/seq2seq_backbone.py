"""The encoder-decoder Transformer of "Attention Is All You Need", without
its output projection."""

import keras

from tfformer.errors import InputError
from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import get_activation
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.backbone import Backbone
from tfformer.models.common import apply_final_norm, decoder_stack, encoder_stack

TIE_CHOICES = ("none", "decoder", "all")
POSITIONS = ("sinusoidal", "learned")


@keras.saving.register_keras_serializable(package="tfformer")
class Seq2SeqBackbone(Backbone):
    """The encoder-decoder Transformer (Vaswani et al. 2017), up to the
    decoder's last hidden states.

    `{"encoder_token_ids": (batch, S), "decoder_token_ids": (batch, T)}` (the
    target shifted right behind a start id) in; `{"encoder_sequence_output":
    (batch, S, hidden_dim), "decoder_sequence_output": (batch, T,
    hidden_dim)}` out. Id 0 is padding in both inputs and is masked
    everywhere. `Seq2SeqLM` adds the output projection (the decoder
    embedding, reversed).

    The defaults are the paper's base model (6+6 layers, d_model 512, 8
    heads, d_ff 2048, dropout 0.1, post-norm, sinusoidal positions,
    embeddings scaled by sqrt(d_model)).

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
        dtype: dtype policy of every layer (None: the global policy).

    Attributes:
        encoder_embedding, decoder_embedding: `TokenAndPositionEmbedding`s
            (one object with `tie_embeddings="all"`); `token_embedding` is
            the decoder's.
        encoder_blocks, decoder_blocks: lists of `TransformerEncoderBlock` /
            `TransformerDecoderBlock`.
        encoder_norm, decoder_norm: the final norms (None for post-norm).

    Example:
    >>> backbone = Seq2SeqBackbone(8000, 8000, num_encoder_layers=2,
    ...     num_decoder_layers=2, hidden_dim=128, num_heads=4,
    ...     intermediate_dim=512)
    >>> model = tfformer.models.Seq2SeqLM(backbone)
    """

    presets = {
        # Trains in minutes on a laptop CPU (the default task of tfformer-train).
        "transformer_tiny": dict(
            num_encoder_layers=2,
            num_decoder_layers=2,
            hidden_dim=128,
            num_heads=4,
            intermediate_dim=512,
            dropout=0.1,
        ),
        # Multi30k-sized: 3+3 layers, d_model 256.
        "transformer_small": dict(
            num_encoder_layers=3,
            num_decoder_layers=3,
            hidden_dim=256,
            num_heads=8,
            intermediate_dim=1024,
            dropout=0.1,
        ),
        # The paper's base model (Table 3): N=6, d_model=512, d_ff=2048, h=8.
        "transformer_base": dict(
            num_encoder_layers=6,
            num_decoder_layers=6,
            hidden_dim=512,
            num_heads=8,
            intermediate_dim=2048,
            dropout=0.1,
        ),
        # The paper's big model: d_model=1024, d_ff=4096, h=16, P_drop=0.3.
        "transformer_big": dict(
            num_encoder_layers=6,
            num_decoder_layers=6,
            hidden_dim=1024,
            num_heads=16,
            intermediate_dim=4096,
            dropout=0.3,
        ),
    }

    def __init__(
        self,
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
        dtype=None,
        **kwargs,
    ):
        check_positive_int("encoder_vocabulary_size", encoder_vocabulary_size)
        check_positive_int("decoder_vocabulary_size", decoder_vocabulary_size)
        check_positive_int("num_encoder_layers", num_encoder_layers)
        check_positive_int("num_decoder_layers", num_decoder_layers)
        if tie_embeddings not in TIE_CHOICES:
            raise InputError(
                f"tie_embeddings must be one of {TIE_CHOICES}. "
                f"Received: tie_embeddings={tie_embeddings!r}"
            )
        if (
            tie_embeddings == "all"
            and encoder_vocabulary_size != decoder_vocabulary_size
        ):
            raise InputError(
                "tie_embeddings='all' needs one shared vocabulary. Received: "
                f"encoder_vocabulary_size={encoder_vocabulary_size}, "
                f"decoder_vocabulary_size={decoder_vocabulary_size}"
            )
        if position not in POSITIONS:
            raise InputError(
                f"position must be one of {POSITIONS}. Received: position={position!r}"
            )
        policy = self.resolve_dtype(dtype)

        # === Layers, each created right before its first call ===
        def embedding(vocabulary_size, tie_weights, name):
            return TokenAndPositionEmbedding(
                vocabulary_size,
                hidden_dim,
                sequence_length=max_sequence_length,
                position=position,
                scale_embeddings=scale_embeddings,
                tie_weights=tie_weights,
                mask_zero=True,
                dtype=policy,
                name=name,
            )

        decoder_embedding = embedding(
            decoder_vocabulary_size, tie_embeddings != "none", "decoder_embedding"
        )
        encoder_embedding = (
            decoder_embedding
            if tie_embeddings == "all"
            else embedding(encoder_vocabulary_size, True, "encoder_embedding")
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

        # === Functional model ===
        encoder_token_ids = keras.Input(
            (None,), dtype="int32", name="encoder_token_ids"
        )
        decoder_token_ids = keras.Input(
            (None,), dtype="int32", name="decoder_token_ids"
        )
        x = encoder_embedding(encoder_token_ids)
        x = Dropout(dropout, dtype=policy, name="encoder_embedding_dropout")(x)
        x, encoder_blocks = encoder_stack(x, num_encoder_layers, policy, **block_kwargs)
        encoder_output, encoder_norm = apply_final_norm(
            x, normalize_first, layer_norm_epsilon, "encoder_norm", policy
        )
        y = decoder_embedding(decoder_token_ids)
        y = Dropout(dropout, dtype=policy, name="decoder_embedding_dropout")(y)
        y, decoder_blocks = decoder_stack(
            y, num_decoder_layers, policy, encoder_output, **block_kwargs
        )
        decoder_output, decoder_norm = apply_final_norm(
            y, normalize_first, layer_norm_epsilon, "decoder_norm", policy
        )
        super().__init__(
            inputs={
                "encoder_token_ids": encoder_token_ids,
                "decoder_token_ids": decoder_token_ids,
            },
            outputs={
                "encoder_sequence_output": encoder_output,
                "decoder_sequence_output": decoder_output,
            },
            dtype=policy,
            **kwargs,
        )

        # === Handles and config ===
        self.encoder_embedding = encoder_embedding
        self.decoder_embedding = decoder_embedding
        self.token_embedding = decoder_embedding
        self.encoder_blocks = encoder_blocks
        self.decoder_blocks = decoder_blocks
        self.encoder_norm = encoder_norm
        self.decoder_norm = decoder_norm
        self.encoder_vocabulary_size = encoder_vocabulary_size
        self.decoder_vocabulary_size = decoder_vocabulary_size
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation_dropout = activation_dropout
        self.max_sequence_length = max_sequence_length
        self.position = position
        self.scale_embeddings = scale_embeddings
        self.tie_embeddings = tie_embeddings
        self.normalize_first = normalize_first
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.num_key_value_heads = num_key_value_heads
        self.fused_qkv = fused_qkv

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder_vocabulary_size": self.encoder_vocabulary_size,
                "decoder_vocabulary_size": self.decoder_vocabulary_size,
                "num_encoder_layers": self.num_encoder_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation_dropout": self.activation_dropout,
                "max_sequence_length": self.max_sequence_length,
                "position": self.position,
                "scale_embeddings": self.scale_embeddings,
                "tie_embeddings": self.tie_embeddings,
                "normalize_first": self.normalize_first,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "num_key_value_heads": self.num_key_value_heads,
                "fused_qkv": self.fused_qkv,
            }
        )
        return config
