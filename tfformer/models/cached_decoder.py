"""Step-by-step decoding of a built model with fixed-size key/value caches."""

from keras import ops

from tfformer.errors import InputError
from tfformer.models.backbone import Backbone
from tfformer.models.gpt_backbone import GPTBackbone
from tfformer.models.seq2seq_backbone import Seq2SeqBackbone


class CachedDecoder:
    """Runs the decoder of a `Seq2SeqLM` or `CausalLM` (or of their
    backbones) one step at a time, reusing cached keys and values instead of
    re-running the prefix.

    Shapes are static: the self-attention cache is a tuple with one
    `(batch, 2, kv_heads, max_length, key_dim)` tensor per layer, updated at
    `index` with `slice_update`, so a decoding loop around `step` compiles with
    XLA. (One tuple entry per layer rather than a stacked 6-D tensor: TFLite
    kernels such as STRIDED_SLICE stop at 5 dimensions.)
    For encoder-decoder models, `encode` runs the encoder once and `step`
    computes the cross-attention keys/values on the first call and returns them
    for reuse.

    Args:
        model: a `Seq2SeqLM`, `CausalLM`, `Seq2SeqBackbone` or
            `GPTBackbone` (its parts are the backbone's typed handles).

    Example:
    >>> decoder = CachedDecoder(model)
    >>> memory = decoder.encode(source_ids)      # seq2seq only
    >>> cache = decoder.init_cache(batch_size, max_length)
    >>> logits, cache, cross = decoder.step(tokens, cache, 0, memory)
    """

    def __init__(self, model):
        backbone = (
            model if isinstance(model, Backbone) else getattr(model, "backbone", None)
        )
        if not isinstance(backbone, Seq2SeqBackbone | GPTBackbone):
            raise InputError(
                "model must be a Seq2SeqLM or CausalLM (or their backbone). "
                f"Received: model={getattr(model, 'name', model)!r} "
                f"({type(model).__name__})"
            )
        self.model = model
        self.backbone = backbone
        self.is_seq2seq = isinstance(backbone, Seq2SeqBackbone)
        if self.is_seq2seq:
            self.embedding = backbone.decoder_embedding
            self.final_norm = backbone.decoder_norm
            self.encoder_embedding = backbone.encoder_embedding
            self.encoder_blocks = list(backbone.encoder_blocks)
            self.encoder_norm = backbone.encoder_norm
        else:
            self.embedding = backbone.token_embedding
            self.final_norm = backbone.final_norm
        self.blocks = list(backbone.decoder_blocks)

    def encode(self, encoder_token_ids):
        """Encoder output and its padding mask, computed once per source."""
        if not self.is_seq2seq:
            raise InputError("encode() needs an encoder-decoder model.")
        padding_mask = ops.not_equal(encoder_token_ids, 0)
        x = self.encoder_embedding(encoder_token_ids)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=padding_mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, padding_mask

    def init_cache(self, batch_size, max_length):
        """Zero self-attention caches, a tuple with one entry per layer."""
        return tuple(block.init_cache(batch_size, max_length) for block in self.blocks)

    def step(self, token_ids, cache, index, encoded=None, cross_caches=None):
        """Logits for `token_ids` `(batch, T)` placed at positions index..index+T-1.

        Args:
            token_ids: `(batch, T)` int tokens (T = 1 for one step, or a prompt).
            cache: the tuple of self-attention caches from `init_cache` or
                `step`.
            index: int or scalar tensor, position of `token_ids[:, 0]`.
            encoded: `(encoder_output, encoder_padding_mask)` from `encode`
                (encoder-decoder models only).
            cross_caches: the tuple of cross-attention caches from an earlier
                step, or None to compute them from `encoded`.

        Returns:
            `(logits, cache, cross_caches)`; `cross_caches` is None for
            decoder-only models. Logits are float32 `(batch, T, vocabulary)`.
        """
        if self.is_seq2seq and encoded is None:
            raise InputError("step() of an encoder-decoder model needs encoded.")
        x = self.embedding(token_ids, start_index=index)
        new_caches, new_cross = [], []
        for i, block in enumerate(self.blocks):
            if self.is_seq2seq:
                encoder_output, encoder_mask = encoded
                x, layer_cache, layer_cross = block(
                    x,
                    encoder_output,
                    encoder_padding_mask=encoder_mask,
                    self_attention_cache=cache[i],
                    self_attention_cache_update_index=index,
                    cross_attention_cache=(
                        None if cross_caches is None else cross_caches[i]
                    ),
                )
                new_cross.append(layer_cross)
            else:
                x, layer_cache = block(
                    x,
                    self_attention_cache=cache[i],
                    self_attention_cache_update_index=index,
                )
            new_caches.append(layer_cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        logits = ops.cast(self.embedding(x, reverse=True), "float32")
        cross = tuple(new_cross) if new_cross else None
        return logits, tuple(new_caches), cross
