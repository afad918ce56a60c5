"""A decoder-only Transformer (GPT), without its output projection."""

import keras

from tfformer.errors import InputError
from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import get_activation
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.backbone import Backbone
from tfformer.models.common import NORMALIZATIONS, apply_final_norm, decoder_stack

POSITIONS = ("learned", "sinusoidal", "rotary")


@keras.saving.register_keras_serializable(package="tfformer")
class GPTBackbone(Backbone):
    """A causal (decoder-only) Transformer up to its last hidden states: the
    one decoder builder every decoder family configures (GPT-2 by its
    defaults; `LlamaBackbone` with rotary positions, RMSNorm and SwiGLU).

    `{"token_ids": (batch, T)}` in, `(batch, T, hidden_dim)` out; position t
    sees tokens 0..t only. Id 0 is padding. `CausalLM` adds the output
    projection (the token embedding, reversed: tied, or its own matrix).

    The defaults are GPT-2 small (12 layers, d 768, 12 heads, pre-norm,
    GELU, learned positions, tied output projection).

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
        rotary_scaling: None, or Llama 3.1's scaling of those frequencies
            (`RotaryEmbedding`'s `frequency_scaling`); rotary positions only.
        key_dim: features per attention head; None: `hidden_dim /
            num_heads` (Qwen3 and Gemma set their own `head_dim`).
        qk_norm_epsilon: RMS-normalize each query and key head with this
            epsilon before the rotation (Qwen3); None: no norm.
        normalization: "layer" (LayerNorm) or "rms" (`RMSNormalization`),
            for every norm including the final one.
        gated_ffn: a gated feed-forward network (SwiGLU with "silu").
        use_bias: biases in the attention and feed-forward projections.
        qkv_bias: biases in the query, key and value projections (Qwen2's);
            None: `use_bias`.
        padding_logit: None, or the constant logit of id 0 (padding): a
            checkpoint converted with its ids shifted by one (GPT-2's id 0
            is "!") writes -1e4 there (see `TokenAndPositionEmbedding`).
        scale_embeddings: multiply the token embeddings by sqrt(hidden_dim)
            on the way in (Gemma's; not the output projection's).
        dtype: dtype policy of every layer (None: the global policy).

    Attributes:
        token_embedding: the `TokenAndPositionEmbedding` (positions inside
            it unless rotary); `decoder_blocks`: the
            `TransformerDecoderBlock`s; `final_norm`: the last norm (None
            for post-norm).
    """

    presets = {
        # nanoGPT's tinyshakespeare character model: 6 layers, 384 wide, 6 heads.
        "gpt_tiny": dict(
            num_layers=6,
            hidden_dim=384,
            num_heads=6,
            intermediate_dim=1536,
            dropout=0.2,
            max_sequence_length=256,
        ),
        "gpt2_small": dict(
            num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072
        ),
    }

    def __init__(
        self,
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
        rotary_scaling=None,
        key_dim=None,
        qk_norm_epsilon=None,
        normalization="layer",
        gated_ffn=False,
        use_bias=True,
        qkv_bias=None,
        padding_logit=None,
        scale_embeddings=False,
        dtype=None,
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("num_layers", num_layers)
        if position not in POSITIONS:
            raise InputError(
                f"position must be one of {POSITIONS}. Received: position={position!r}"
            )
        if rotary_scaling is not None and position != "rotary":
            raise InputError(
                'rotary_scaling needs position="rotary". Received: '
                f"position={position!r}, rotary_scaling={rotary_scaling!r}"
            )
        if normalization not in NORMALIZATIONS:
            raise InputError(
                f"normalization must be one of {tuple(NORMALIZATIONS)}. "
                f"Received: normalization={normalization!r}"
            )
        policy = self.resolve_dtype(dtype)

        # === Layers, each created right before its first call ===
        token_embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            hidden_dim,
            sequence_length=max_sequence_length,
            position="none" if position == "rotary" else position,
            scale_embeddings=bool(scale_embeddings),
            tie_weights=tie_embeddings,
            mask_zero=True,
            padding_logit=padding_logit,
            dtype=policy,
            name="decoder_embedding",
        )

        # === Functional model ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        x = token_embedding(token_ids)
        x = Dropout(dropout, dtype=policy, name="decoder_embedding_dropout")(x)
        x, blocks = decoder_stack(
            x,
            num_layers,
            policy,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            num_key_value_heads=num_key_value_heads,
            dropout=dropout,
            activation_dropout=activation_dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            rotary_max_wavelength=(
                rotary_max_wavelength if position == "rotary" else None
            ),
            rotary_scaling=rotary_scaling if position == "rotary" else None,
            key_dim=key_dim,
            qk_norm_epsilon=qk_norm_epsilon,
            normalization=normalization,
            gated_ffn=gated_ffn,
            use_bias=use_bias,
            qkv_bias=qkv_bias,
        )
        x, final_norm = apply_final_norm(
            x,
            normalize_first,
            layer_norm_epsilon,
            "decoder_norm",
            policy,
            normalization,
        )
        super().__init__(
            inputs={"token_ids": token_ids}, outputs=x, dtype=policy, **kwargs
        )

        # === Handles and config ===
        self.token_embedding = token_embedding
        self.decoder_blocks = blocks
        self.final_norm = final_norm
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation_dropout = activation_dropout
        self.max_sequence_length = max_sequence_length
        self.position = position
        self.normalize_first = normalize_first
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.tie_embeddings = tie_embeddings
        self.num_key_value_heads = num_key_value_heads
        self.rotary_max_wavelength = rotary_max_wavelength
        self.rotary_scaling = rotary_scaling
        self.key_dim = key_dim
        self.qk_norm_epsilon = qk_norm_epsilon
        self.normalization = normalization
        self.gated_ffn = gated_ffn
        self.use_bias = use_bias
        self.qkv_bias = qkv_bias
        self.padding_logit = padding_logit
        self.scale_embeddings = bool(scale_embeddings)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation_dropout": self.activation_dropout,
                "max_sequence_length": self.max_sequence_length,
                "position": self.position,
                "normalize_first": self.normalize_first,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "tie_embeddings": self.tie_embeddings,
                "num_key_value_heads": self.num_key_value_heads,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "rotary_scaling": self.rotary_scaling,
                "key_dim": self.key_dim,
                "qk_norm_epsilon": self.qk_norm_epsilon,
                "normalization": self.normalization,
                "gated_ffn": self.gated_ffn,
                "use_bias": self.use_bias,
                "qkv_bias": self.qkv_bias,
                "padding_logit": self.padding_logit,
                "scale_embeddings": self.scale_embeddings,
            }
        )
        return config
