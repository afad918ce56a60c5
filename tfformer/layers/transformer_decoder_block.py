"""One decoder layer: masked self-attention, cross-attention and an FFN."""

import keras

from tfformer.errors import InputError
from tfformer.layers.padding import resolve_padding_mask
from tfformer.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable(package="tfformer")
class TransformerDecoderBlock(TransformerBlock):
    """Transformer decoder layer (paper section 3.1).

        x = LayerNorm(x + Dropout(MaskedSelfAttention(x)))
        x = LayerNorm(x + Dropout(CrossAttention(x, encoder_sequence)))
        x = LayerNorm(x + Dropout(FeedForward(x)))

    The cross-attention sublayer exists only if the block is first called
    (built) with an `encoder_sequence`; without it the same block serves
    decoder-only models (GPT). `normalize_first=True` gives the pre-norm form.

    Incremental decoding keeps every shape static: pass a self-attention cache
    of shape `(batch, 2, kv_heads, max_length, key_dim)` (see `init_cache`)
    and the index where the new tokens go; the block writes their keys/values
    there and returns the updated cache. The cross-attention keys/values of the
    encoder output are computed on the first cached call (or taken from
    `cross_attention_cache`) and returned, so later steps reuse them.

    Args:
        Those of `TransformerEncoderBlock`.

    Call arguments:
        decoder_sequence: `(batch, T, hidden_dim)`.
        encoder_sequence: `(batch, S, encoder_dim)`, or None.
        decoder_padding_mask: `(batch, T)`, `True` at real tokens; with a cache,
            `(batch, max_length)` over the cache slots. Defaults to the Keras
            mask of `decoder_sequence`.
        decoder_attention_mask: `(batch, T, T)` (or `(batch, T, max_length)`).
        encoder_padding_mask: `(batch, S)`; defaults to the Keras mask of
            `encoder_sequence`.
        encoder_attention_mask: `(batch, T, S)`.
        use_causal_mask: mask future positions in self-attention (default).
        self_attention_cache: the cache described above, or None.
        self_attention_cache_update_index: int or scalar tensor.
        cross_attention_cache: `(batch, 2, kv_heads, S, key_dim)` from a
            previous cached call, or None.
        training: whether dropout is active.
        return_attention_scores: also return the attention weights (without
            caches only), for inspection and attention maps.

    Returns:
        `(batch, T, hidden_dim)`; with `self_attention_cache`, the tuple
        `(outputs, self_attention_cache)`, plus `cross_attention_cache` when the
        block has cross-attention. With `return_attention_scores`, the tuple
        `(outputs, {"self_attention": (batch, heads, T, T),
        "cross_attention": (batch, heads, T, S) or None})`.

    Example:
    >>> block = TransformerDecoderBlock(num_heads=4, intermediate_dim=256)
    >>> y = block(keras.random.normal((2, 7, 64)), keras.random.normal((2, 9, 64)))
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = self._hidden_dim(decoder_sequence_shape, "decoder_sequence")
        self.self_attention = self._make_attention(
            hidden_dim, "self_attention", self_attention=True
        )
        self.self_attention.build(decoder_sequence_shape)
        self.self_attention_norm = self._make_norm(hidden_dim, "self_attention_norm")
        self.self_attention_dropout = self._make_dropout("self_attention_dropout")
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            if len(encoder_sequence_shape) != 3:
                raise InputError(
                    "encoder_sequence must have shape (batch, length, features). "
                    f"Received: encoder_sequence with shape {encoder_sequence_shape}"
                )
            self.cross_attention = self._make_attention(
                hidden_dim, "cross_attention", self_attention=False
            )
            self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
            self.cross_attention_norm = self._make_norm(
                hidden_dim, "cross_attention_norm"
            )
            self.cross_attention_dropout = self._make_dropout("cross_attention_dropout")
        self._build_feed_forward(hidden_dim)
        self.built = True

    def init_cache(self, batch_size, max_length):
        """A zero self-attention cache for `max_length` positions."""
        return self.self_attention.init_cache(batch_size, max_length)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        *,
        decoder_padding_mask=None,
        decoder_attention_mask=None,
        encoder_padding_mask=None,
        encoder_attention_mask=None,
        use_causal_mask=True,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        training=None,
        return_attention_scores=False,
    ):
        has_cache = self_attention_cache is not None
        if return_attention_scores and (has_cache or cross_attention_cache is not None):
            raise InputError(
                "return_attention_scores works without caches only. Received: "
                "return_attention_scores=True with a cache."
            )
        if has_cache and self_attention_cache_update_index is None:
            raise InputError(
                "self_attention_cache needs self_attention_cache_update_index. "
                "Received: self_attention_cache_update_index=None"
            )
        if has_cache:
            # The mask covers the cache slots, not the T new tokens.
            key_mask = decoder_padding_mask
            query_mask = None
        else:
            key_mask = resolve_padding_mask(
                decoder_sequence, decoder_padding_mask, "decoder_padding_mask"
            )
            query_mask = key_mask
        x, *caches = self._residual(
            decoder_sequence,
            lambda h: self.self_attention(
                h,
                query_mask=query_mask,
                value_mask=key_mask,
                attention_mask=decoder_attention_mask,
                use_causal_mask=use_causal_mask,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
                training=training,
                return_attention_scores=return_attention_scores,
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )

        cross_scores = None
        if self.cross_attention is not None:
            x, cross_attention_cache, cross_scores = self._cross_attend(
                x,
                encoder_sequence,
                query_mask,
                encoder_padding_mask,
                encoder_attention_mask,
                cross_attention_cache,
                has_cache,
                training,
                return_attention_scores,
            )
        elif encoder_sequence is not None or cross_attention_cache is not None:
            raise InputError(
                "This block was built without cross-attention (no "
                "encoder_sequence at build time). Received: an encoder_sequence "
                "or cross_attention_cache"
            )

        x = self._feed_forward(x, training)
        if return_attention_scores:
            return x, {"self_attention": caches[0], "cross_attention": cross_scores}
        if not has_cache:
            return x
        if self.cross_attention is None:
            return x, caches[0]
        return x, caches[0], cross_attention_cache

    def _cross_attend(
        self,
        x,
        encoder_sequence,
        query_mask,
        encoder_padding_mask,
        encoder_attention_mask,
        cross_attention_cache,
        has_cache,
        training,
        return_attention_scores=False,
    ):
        if encoder_sequence is None and cross_attention_cache is None:
            raise InputError(
                "This block has cross-attention, so it needs encoder_sequence "
                "or cross_attention_cache. Received neither."
            )
        if encoder_sequence is not None:
            encoder_padding_mask = resolve_padding_mask(
                encoder_sequence, encoder_padding_mask, "encoder_padding_mask"
            )
            if has_cache and cross_attention_cache is None:
                cross_attention_cache = self.cross_attention.compute_key_value_cache(
                    encoder_sequence
                )
        value = encoder_sequence if cross_attention_cache is None else None
        # With a cache, attention also returns that (unchanged) cache.
        x, *extras = self._residual(
            x,
            lambda h: self.cross_attention(
                h,
                value if value is not None else h,
                query_mask=query_mask,
                value_mask=encoder_padding_mask,
                attention_mask=encoder_attention_mask,
                # A given cross-attention cache is read with or without a
                # self-attention cache (without it, `value` is no source).
                cache=cross_attention_cache,
                training=training,
                return_attention_scores=return_attention_scores,
            ),
            self.cross_attention_norm,
            self.cross_attention_dropout,
            training,
        )
        scores = extras[0] if return_attention_scores else None
        return x, cross_attention_cache, scores

    def compute_mask(self, decoder_sequence, mask=None):
        return mask

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape
