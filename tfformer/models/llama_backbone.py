"""The Llama decoder (Touvron et al. 2023), without its output projection."""

import keras

from tfformer.layers.rotary_embedding import check_frequency_scaling
from tfformer.layers.validation import check_positive_int
from tfformer.models.gpt_backbone import GPTBackbone


@keras.saving.register_keras_serializable(package="tfformer")
class LlamaBackbone(GPTBackbone):
    """Llama's decoder: `GPTBackbone` with rotary positions, RMSNorm before
    every sublayer and at the end, a SwiGLU feed-forward network, no
    biases and grouped-query attention.

    `{"token_ids": (batch, T)}` in, `(batch, T, hidden_dim)` out; id 0 is
    padding. `CausalLM` adds the output projection (usually its own matrix:
    `tie_embeddings=False`). The arguments are the ones a Llama
    `config.json` sets; the handles are `GPTBackbone`'s.

    Args:
        vocabulary_size: vocabulary size.
        num_layers, hidden_dim, num_heads, intermediate_dim: sizes.
        num_key_value_heads: key/value heads (grouped-query attention);
            None: `num_heads`.
        max_sequence_length: the context the caches are sized for.
        rope_max_wavelength: base of the rotary frequencies (`rope_theta`).
        rope_scaling: None, or Llama 3.1's scaling of those frequencies as
            config.json writes it (`{"rope_type": "llama3", "factor",
            "low_freq_factor", "high_freq_factor",
            "original_max_position_embeddings"}`).
        layer_norm_epsilon: epsilon of the RMS norms (`rms_norm_eps`).
        qkv_bias: biases in the query, key and value projections (Qwen2's
            decoder is Llama's with these).
        head_dim: features per attention head (`head_dim`); None:
            `hidden_dim / num_heads`.
        qk_norm: RMS-normalize each query and key head before the rotation,
            with `layer_norm_epsilon` (Qwen3's `q_norm` and `k_norm`).
        tie_embeddings: share the token embedding with the output projection.
        dropout, activation_dropout: dropout rates (Llama has none).
        padding_logit: the constant logit of id 0 when a conversion shifts
            the checkpoint's ids by one (see `TokenAndPositionEmbedding`).
        dtype: dtype policy of every layer (None: the global policy).
    """

    presets = {}
    # What this family fixes (a subclass such as `GemmaBackbone` changes them).
    activation_name = "silu"
    embedding_scale = False

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers,
        hidden_dim,
        num_heads,
        intermediate_dim,
        num_key_value_heads=None,
        max_sequence_length=2048,
        rope_max_wavelength=10000,
        rope_scaling=None,
        layer_norm_epsilon=1e-5,
        qkv_bias=False,
        head_dim=None,
        qk_norm=False,
        tie_embeddings=False,
        dropout=0.0,
        activation_dropout=None,
        padding_logit=None,
        dtype=None,
        **kwargs,
    ):
        # Under this class's names (the decoder's are rotary_scaling, key_dim).
        check_frequency_scaling(rope_scaling, "rope_scaling")
        check_positive_int("head_dim", head_dim, allow_none=True)
        super().__init__(
            vocabulary_size,
            num_layers=num_layers,
            hidden_dim=hidden_dim,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            activation_dropout=activation_dropout,
            max_sequence_length=max_sequence_length,
            position="rotary",
            normalize_first=True,
            activation=self.activation_name,
            layer_norm_epsilon=layer_norm_epsilon,
            tie_embeddings=tie_embeddings,
            num_key_value_heads=num_key_value_heads,
            rotary_max_wavelength=rope_max_wavelength,
            rotary_scaling=rope_scaling,
            normalization="rms",
            gated_ffn=True,
            use_bias=False,
            qkv_bias=qkv_bias,
            key_dim=head_dim,
            qk_norm_epsilon=layer_norm_epsilon if qk_norm else None,
            padding_logit=padding_logit,
            scale_embeddings=self.embedding_scale,
            dtype=dtype,
            **kwargs,
        )
        self.rope_max_wavelength = rope_max_wavelength
        self.rope_scaling = self.rotary_scaling  # checked by the attention
        self.head_dim = head_dim
        self.qk_norm = bool(qk_norm)

    def get_config(self):
        config = super().get_config()
        # The decoder options Llama fixes are not arguments of this class.
        for fixed in (
            "position",
            "normalize_first",
            "activation",
            "rotary_max_wavelength",
            "rotary_scaling",
            "normalization",
            "gated_ffn",
            "use_bias",
            "key_dim",
            "qk_norm_epsilon",
            "scale_embeddings",
        ):
            del config[fixed]
        config["rope_max_wavelength"] = self.rope_max_wavelength
        config["rope_scaling"] = self.rope_scaling
        config["head_dim"] = self.head_dim
        config["qk_norm"] = self.qk_norm
        return config
