"""What the encoder and decoder blocks share: arguments, sublayers, add & norm."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import FeedForward, get_activation
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.multi_head_attention import MultiHeadAttention
from tfformer.layers.rms_normalization import RMSNormalization
from tfformer.layers.rotary_embedding import check_frequency_scaling
from tfformer.layers.validation import (
    check_positive_int,
    check_positive_number,
    check_rate,
)

NORMALIZATIONS = ("layer", "rms")


class TransformerBlock(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock`.

    It validates the shared arguments, creates the attention, norm and
    feed-forward sublayers, and wraps each sublayer in a residual connection:

        post-norm (the paper):  x = LayerNorm(x + Dropout(Sublayer(x)))
        pre-norm:               x = x + Dropout(Sublayer(LayerNorm(x)))

    `normalization="rms"` uses `RMSNormalization` for every norm,
    `gated_ffn=True` a gated feed-forward network (SwiGLU with
    activation="silu") and `use_bias=False` drops every projection's bias:
    together with rotary positions and grouped-query attention, Llama's block.

    Not used directly; see the subclasses for the arguments.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        key_dim=None,
        num_key_value_heads=None,
        dropout=0.0,
        attention_dropout=None,
        activation_dropout=None,
        activation="relu",
        layer_norm_epsilon=1e-6,
        normalize_first=False,
        fused_qkv=False,
        rotary_max_wavelength=None,
        rotary_scaling=None,
        qk_norm_epsilon=None,
        normalization="layer",
        gated_ffn=False,
        use_bias=True,
        qkv_bias=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        check_positive_int("num_heads", num_heads)
        check_positive_int("intermediate_dim", intermediate_dim)
        check_positive_int("key_dim", key_dim, allow_none=True)
        # Checked here too, so a bad one fails at construction, not first call.
        check_frequency_scaling(rotary_scaling, "rotary_scaling")
        check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout, allow_none=True)
        check_rate("activation_dropout", activation_dropout, allow_none=True)
        check_positive_number("layer_norm_epsilon", layer_norm_epsilon)
        if normalization not in NORMALIZATIONS:
            raise InputError(
                f"normalization must be one of {NORMALIZATIONS}. Received: "
                f"normalization={normalization!r}"
            )
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.key_dim = key_dim
        self.num_key_value_heads = num_key_value_heads
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.fused_qkv = fused_qkv
        self.rotary_max_wavelength = rotary_max_wavelength
        self.rotary_scaling = rotary_scaling
        self.qk_norm_epsilon = qk_norm_epsilon
        self.normalization = normalization
        self.gated_ffn = gated_ffn
        self.use_bias = use_bias
        self.qkv_bias = qkv_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    # -------------------------------------------------------------- sublayers

    def _hidden_dim(self, inputs_shape, name):
        if len(inputs_shape) != 3 or inputs_shape[-1] is None:
            raise InputError(
                f"{name} must have shape (batch, length, hidden_dim) with a known "
                f"hidden_dim. Received: {name} with shape {inputs_shape}"
            )
        hidden_dim = inputs_shape[-1]
        if self.key_dim is None and hidden_dim % self.num_heads:
            raise InputError(
                "hidden_dim must be divisible by num_heads (or pass key_dim). "
                f"Received: hidden_dim={hidden_dim}, num_heads={self.num_heads}"
            )
        return hidden_dim

    def _make_attention(self, hidden_dim, name, self_attention):
        # Fused projections and rotary positions only apply to self-attention.
        return MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self.key_dim or hidden_dim // self.num_heads,
            num_key_value_heads=self.num_key_value_heads,
            dropout=(
                self.dropout
                if self.attention_dropout is None
                else self.attention_dropout
            ),
            output_dim=hidden_dim,
            use_bias=self.use_bias,
            qkv_bias=self.qkv_bias,
            fused_qkv=self.fused_qkv and self_attention,
            rotary_max_wavelength=(
                self.rotary_max_wavelength if self_attention else None
            ),
            rotary_scaling=self.rotary_scaling if self_attention else None,
            qk_norm_epsilon=self.qk_norm_epsilon,
            kernel_initializer=self.kernel_initializer.clone(),
            bias_initializer=self.bias_initializer.clone(),
            dtype=self.dtype_policy,
            name=name,
        )

    def _make_norm(self, hidden_dim, name):
        kind = RMSNormalization if self.normalization == "rms" else LayerNormalization
        norm = kind(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
        norm.build((None, None, hidden_dim))
        return norm

    def _make_dropout(self, name):
        return Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_feed_forward(self, hidden_dim):
        self.ffn = FeedForward(
            self.intermediate_dim,
            activation=self.activation,
            dropout=(
                self.dropout
                if self.activation_dropout is None
                else self.activation_dropout
            ),
            gated=self.gated_ffn,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer.clone(),
            bias_initializer=self.bias_initializer.clone(),
            dtype=self.dtype_policy,
            name="ffn",
        )
        self.ffn.build((None, None, hidden_dim))
        self.ffn_norm = self._make_norm(hidden_dim, "ffn_norm")
        self.ffn_dropout = self._make_dropout("ffn_dropout")

    # ---------------------------------------------------------- add and norm

    def _residual(self, x, sublayer, norm, dropout, training):
        """Applies `sublayer` with its residual connection and layer norm.

        `sublayer` maps the (possibly normalized) input to the sublayer output,
        or to a tuple whose first item is that output; the other items are
        returned unchanged after the new `x`.
        """
        result = sublayer(norm(x) if self.normalize_first else x)
        extras = ()
        if isinstance(result, tuple):
            result, extras = result[0], result[1:]
        x = ops.add(x, dropout(result, training=training))
        if not self.normalize_first:
            x = norm(x)
        return (x, *extras)

    def _feed_forward(self, x, training):
        (x,) = self._residual(
            x,
            lambda h: self.ffn(h, training=training),
            self.ffn_norm,
            self.ffn_dropout,
            training,
        )
        return x

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "key_dim": self.key_dim,
                "num_key_value_heads": self.num_key_value_heads,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation_dropout": self.activation_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "fused_qkv": self.fused_qkv,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "rotary_scaling": self.rotary_scaling,
                "qk_norm_epsilon": self.qk_norm_epsilon,
                "normalization": self.normalization,
                "gated_ffn": self.gated_ffn,
                "use_bias": self.use_bias,
                "qkv_bias": self.qkv_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
