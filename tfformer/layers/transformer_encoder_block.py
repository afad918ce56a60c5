"""One encoder layer: self-attention and a feed-forward network."""

import keras

from tfformer.layers.padding import resolve_padding_mask
from tfformer.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="tfformer")
class TransformerEncoderBlock(TransformerBlock):
    """Transformer encoder layer (paper section 3.1).

        x = LayerNorm(x + Dropout(MultiHeadSelfAttention(x)))
        x = LayerNorm(x + Dropout(FeedForward(x)))

    With `normalize_first=True` (pre-norm, as in GPT-2 and ViT) the norm moves
    inside each residual branch: x = x + Dropout(Sublayer(LayerNorm(x))); a
    stack of pre-norm blocks then needs one final LayerNorm.

    Args:
        num_heads: attention heads.
        intermediate_dim: feed-forward width (d_ff).
        key_dim: size per head; defaults to hidden_dim // num_heads.
        num_key_value_heads: grouped-query attention; defaults to num_heads.
        dropout: dropout on each sublayer output (and, by default, the FFN's
            hidden activations).
        attention_dropout: dropout on attention weights; defaults to `dropout`.
        activation_dropout: dropout on the FFN's hidden activations (fairseq's
            `activation_dropout`, tensor2tensor's `relu_dropout`); defaults
            to `dropout`. keras-hub's blocks, GPT-2 and BERT have none: 0.
        activation: FFN activation, "relu" (the paper) or "gelu".
        layer_norm_epsilon: epsilon of the layer norms.
        normalize_first: pre-norm instead of the paper's post-norm.
        fused_qkv: one matrix for the query, key and value projections.
        rotary_max_wavelength: apply rotary position embeddings in attention.
        rotary_scaling: their Llama 3.1 frequency scaling, or None.
        qk_norm_epsilon: RMS-normalize each query and key head (Qwen3).
        normalization: "layer" (LayerNorm) or "rms" (`RMSNormalization`).
        gated_ffn: a gated feed-forward network (SwiGLU with "silu").
        use_bias: biases in the attention and feed-forward projections.
        qkv_bias: biases in the query, key and value projections; None:
            `use_bias`.
        kernel_initializer, bias_initializer: initializers of every projection.

    Call arguments:
        inputs: `(batch, length, hidden_dim)`.
        padding_mask: `(batch, length)`, `True` at real tokens. Defaults to the
            Keras mask attached to `inputs`; both give identical results.
        attention_mask: `(batch, length, length)`, `True` where attention is
            allowed.
        training: whether dropout is active.
        return_attention_scores: also return the self-attention weights
            `(batch, num_heads, length, length)` (attention rollout, maps).

    Returns:
        `(batch, length, hidden_dim)`, carrying the padding mask; with
        `return_attention_scores`, a tuple of it and the weights.

    Example:
    >>> block = TransformerEncoderBlock(num_heads=4, intermediate_dim=256)
    >>> y = block(keras.random.normal((2, 10, 64)))
    """

    def build(self, inputs_shape):
        hidden_dim = self._hidden_dim(inputs_shape, "inputs")
        self.self_attention = self._make_attention(
            hidden_dim, "self_attention", self_attention=True
        )
        self.self_attention.build(inputs_shape)
        self.self_attention_norm = self._make_norm(hidden_dim, "self_attention_norm")
        self.self_attention_dropout = self._make_dropout("self_attention_dropout")
        self._build_feed_forward(hidden_dim)
        self.built = True

    def call(
        self,
        inputs,
        *,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        padding_mask = resolve_padding_mask(inputs, padding_mask, "padding_mask")
        x, *scores = self._residual(
            inputs,
            lambda h: self.self_attention(
                h,
                query_mask=padding_mask,
                value_mask=padding_mask,
                attention_mask=attention_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )
        x = self._feed_forward(x, training)
        return (x, scores[0]) if return_attention_scores else x

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
