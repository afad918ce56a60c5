"""Multi-head scaled dot-product attention with a fixed-size key/value cache."""

import math

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.attention_mask import causal_mask, merge_attention_masks
from tfformer.layers.dropout import Dropout
from tfformer.layers.mha_from_keras import mha_from_keras
from tfformer.layers.padding import keras_mask
from tfformer.layers.per_head_initializer import PerHeadInitializer
from tfformer.layers.rms_normalization import RMSNormalization
from tfformer.layers.rotary_embedding import RotaryEmbedding, check_frequency_scaling
from tfformer.layers.validation import (
    check_positive_int,
    check_positive_number,
    check_rate,
    static_dim,
)


def _check_rank3(name, tensor):
    if len(tensor.shape) != 3:
        raise InputError(
            f"{name} must have shape (batch, length, features). "
            f"Received: {name} with shape {tensor.shape}"
        )


# How far below a row's lowest score masked scores are put (see `_attend`).
MASK_MARGIN = 30.0


@keras.saving.register_keras_serializable(package="tfformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention ("Attention Is All You Need", section 3.2).

    For each head h, with d = key_dim:

        Q_h = X W_h^Q + b^Q,  K_h = Y W_h^K + b^K,  V_h = Y W_h^V + b^V
        head_h = softmax(Q_h K_h^T / sqrt(d) + M) V_h
        output = concat(head_1, ..., head_H) W^O + b^O

    where M is 0 where attention is allowed and -inf elsewhere. Beyond the
    formula it offers grouped-query attention (`num_key_value_heads` < `num_heads`
    key/value heads, each shared by a group of query heads; 1 is multi-query
    attention), a fused query/key/value projection for self-attention, rotary
    position embeddings on queries and keys, and a fixed-size key/value cache for
    incremental decoding that keeps every shape static (XLA, TPU, TFLite).

    The softmax runs in float32 under mixed precision. A query row whose keys
    are all masked gets all-zero attention weights, as in Keras.

    Args:
        num_heads: number of query heads H.
        key_dim: size of each query/key head d.
        value_dim: size of each value head; defaults to `key_dim`.
        dropout: dropout rate on the attention weights.
        use_bias: whether the projections have biases.
        qkv_bias: whether the query, key and value projections have biases
            (Qwen2's have, its output projection not); None: `use_bias`.
        output_dim: size of the output features; defaults to the query's.
        num_key_value_heads: key/value heads; must divide `num_heads`.
            Defaults to `num_heads` (plain multi-head attention).
        fused_qkv: project query, key and value with one matrix. Only for
            self-attention (`value` omitted or the query itself).
        rotary_max_wavelength: if set, apply `RotaryEmbedding` with this base
            to queries and keys (positions offset by `cache_update_index`).
        rotary_scaling: the rotary embedding's `frequency_scaling` (Llama
            3.1's `rope_scaling`), or None.
        qk_norm_epsilon: if set, each query and key head is RMS-normalized
            over its `key_dim` features with this epsilon, before the rotary
            embedding (Qwen3's `q_norm` and `k_norm`; weights `query_norm`
            and `key_norm`, shared by the heads).
        kernel_initializer, bias_initializer: initializers of the projections.
            Kernels are drawn per head, `(features, heads, head_dim)`, so a
            fan-based initializer counts the fans of tf.keras 2's layer
            (see `PerHeadInitializer`).
        seed: seed of the attention dropout.

    Call arguments:
        query: `(batch, T, query_features)`.
        value: `(batch, S, value_features)`; omitted for self-attention.
        key: `(batch, S, key_features)`; defaults to `value`.
        query_mask: `(batch, T)`; `True` for real query positions. Filled in
            from a Keras mask on `query` (e.g. `Embedding(mask_zero=True)`).
        value_mask, key_mask: `(batch, S)`; `True` for real key positions.
            Filled in from Keras masks. In self-attention without a cache,
            `value_mask` defaults to `query_mask`; with a cache it covers the
            cache slots, `(batch, max_length)`.
        attention_mask: `(batch, T, S)`; `True` where attention is allowed.
        use_causal_mask: forbid query t to attend to keys after t.
        return_attention_scores: also return the `(batch, H, T, S)` weights.
        training: whether dropout is active.
        cache: key/value cache `(batch, 2, num_key_value_heads, max_length,
            key_dim)` (keys at `[:, 0]`, values at `[:, 1]`; head-major, see
            `init_cache`), or None. With a cache, S is `max_length`. With
            `cache_update_index`, the keys and values of the T query tokens are
            written at slots `cache_update_index` to `cache_update_index + T - 1`
            and attention runs over the whole cache; the slots after the last
            written one are always masked, with or without `use_causal_mask`.
            Without `cache_update_index` the cache holds precomputed keys and
            values (cross-attention, from `compute_key_value_cache`): every
            slot is attended unless a mask hides it, and `value`/`key` are
            ignored.
        cache_update_index: int or scalar int tensor, the cache position of
            the first query token; or a `(batch,)` int tensor, one position
            per row (batched decoding of sequences at different lengths:
            T must be 1, each row's token is written at its own slot and
            attends to the slots up to it).

    Returns:
        `(batch, T, output_dim)`, followed by the attention weights if
        `return_attention_scores`, followed by the cache if `cache` was given
        (updated when `cache_update_index` was given, unchanged otherwise).

    Example:
    >>> mha = MultiHeadAttention(num_heads=4, key_dim=16)
    >>> x = keras.random.normal((2, 10, 64))
    >>> y = mha(x, use_causal_mask=True)  # masked self-attention, (2, 10, 64)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        qkv_bias=None,
        output_dim=None,
        num_key_value_heads=None,
        fused_qkv=False,
        rotary_max_wavelength=None,
        rotary_scaling=None,
        qk_norm_epsilon=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        check_positive_int("num_heads", num_heads)
        check_positive_int("key_dim", key_dim)
        check_positive_int("value_dim", value_dim, allow_none=True)
        check_positive_int("output_dim", output_dim, allow_none=True)
        check_positive_int("num_key_value_heads", num_key_value_heads, allow_none=True)
        if num_key_value_heads is not None and num_heads % num_key_value_heads:
            raise InputError(
                "num_heads must be a multiple of num_key_value_heads. Received: "
                f"num_heads={num_heads}, num_key_value_heads={num_key_value_heads}"
            )
        check_rate("dropout", dropout)
        rotary_scaling = check_frequency_scaling(rotary_scaling, "rotary_scaling")
        if rotary_scaling is not None and rotary_max_wavelength is None:
            raise InputError(
                "rotary_scaling needs rotary_max_wavelength (rotary positions). "
                f"Received: rotary_scaling={rotary_scaling!r}"
            )
        if qk_norm_epsilon is not None:
            check_positive_number("qk_norm_epsilon", qk_norm_epsilon)
        if rotary_max_wavelength is not None and key_dim % 2:
            raise InputError(
                f"Rotary embeddings need an even key_dim. Received: key_dim={key_dim}"
            )
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.qkv_bias = None if qkv_bias is None else bool(qkv_bias)
        self.output_dim = output_dim
        self.num_key_value_heads = num_key_value_heads
        self.fused_qkv = bool(fused_qkv)
        self.rotary_max_wavelength = rotary_max_wavelength
        self.rotary_scaling = rotary_scaling
        self.qk_norm_epsilon = qk_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True

        self._value_dim = value_dim or key_dim
        self._kv_heads = num_key_value_heads or num_heads
        self._inverse_sqrt_key_dim = 1.0 / math.sqrt(key_dim)

    @property
    def kv_heads(self):
        """Heads of the keys and values: `num_key_value_heads`, or
        `num_heads` when it is None."""
        return self._kv_heads

    @property
    def value_head_dim(self):
        """Size of each value head: `value_dim`, or `key_dim` when it is None."""
        return self._value_dim

    def _dense(self, units, name, kernel_shapes, heads_first=False, use_bias=None):
        return keras.layers.Dense(
            units,
            use_bias=self.use_bias if use_bias is None else use_bias,
            kernel_initializer=PerHeadInitializer(
                self.kernel_initializer, kernel_shapes, heads_first
            ),
            bias_initializer=self.bias_initializer.clone(),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        if len(query_shape) != 3 or query_shape[-1] is None:
            raise InputError(
                "query must have shape (batch, length, features) with known "
                f"features. Received: query with shape {query_shape}"
            )
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        q_units = self.num_heads * self.key_dim
        k_units = self._kv_heads * self.key_dim
        v_units = self._kv_heads * self._value_dim
        # Kernels are drawn with head-split shapes ((features, heads,
        # head_dim) in, (heads, head_dim, features) out), so fan-based
        # initializers see tf.keras 2's fans (see PerHeadInitializer).
        q_shape = (query_shape[-1], self.num_heads, self.key_dim)
        k_shape = (key_shape[-1], self._kv_heads, self.key_dim)
        v_shape = (value_shape[-1], self._kv_heads, self._value_dim)
        qkv_bias = self.qkv_bias
        if self.fused_qkv:
            self.query_key_value_dense = self._dense(
                q_units + k_units + v_units,
                "query_key_value",
                (q_shape, k_shape, v_shape),
                use_bias=qkv_bias,
            )
            self.query_key_value_dense.build(query_shape)
        else:
            self.query_dense = self._dense(
                q_units, "query", (q_shape,), use_bias=qkv_bias
            )
            self.query_dense.build(query_shape)
            self.key_dense = self._dense(k_units, "key", (k_shape,), use_bias=qkv_bias)
            self.key_dense.build(key_shape)
            self.value_dense = self._dense(
                v_units, "value", (v_shape,), use_bias=qkv_bias
            )
            self.value_dense.build(value_shape)
        output_dim = self.output_dim or query_shape[-1]
        self.output_dense = self._dense(
            output_dim,
            "attention_output",
            ((self.num_heads, self._value_dim, output_dim),),
            heads_first=True,
        )
        self.output_dense.build((None, None, self.num_heads * self._value_dim))
        self.dropout_layer = Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy
        )
        self.rotary = None
        if self.rotary_max_wavelength is not None:
            self.rotary = RotaryEmbedding(
                self.rotary_max_wavelength,
                frequency_scaling=self.rotary_scaling,
                dtype=self.dtype_policy,
                name="rotary",
            )
            self.rotary.build((None, None, self.num_heads, self.key_dim))
        self.query_norm = self.key_norm = None
        if self.qk_norm_epsilon is not None:
            self.query_norm, self.key_norm = (
                RMSNormalization(
                    self.qk_norm_epsilon, dtype=self.dtype_policy, name=name
                )
                for name in ("query_norm", "key_norm")
            )
            self.query_norm.build((None, None, self.num_heads, self.key_dim))
            self.key_norm.build((None, None, self._kv_heads, self.key_dim))
        self.built = True

    # ------------------------------------------------------------------ cache

    def init_cache(self, batch_size, max_length):
        """A zero key/value cache `(batch, 2, kv_heads, max_length, key_dim)`.

        Head-major, so the attention matmuls read it in place: a
        `(batch, max_length, heads, ...)` cache would be transposed (copied
        whole) at every decoding step.
        """
        self._check_cacheable()
        return ops.zeros(
            (batch_size, 2, self._kv_heads, max_length, self.key_dim),
            dtype=self.compute_dtype,
        )

    def compute_key_value_cache(self, value, key=None):
        """Project `value` (and `key`) once into a cache for cross-attention.

        The result is passed as `cache` (without `cache_update_index`) at every
        decoding step, so the encoder output is projected once per source.
        """
        self._check_cacheable()
        if self.fused_qkv:
            raise InputError(
                "compute_key_value_cache needs separate projections; this layer "
                "was built with fused_qkv=True (self-attention only)."
            )
        key = value if key is None else key
        k = self._split_heads(self.key_dense(key), self._kv_heads, self.key_dim)
        v = self._split_heads(self.value_dense(value), self._kv_heads, self._value_dim)
        # At positions from 0, as the direct call rotates them (and as a
        # self-attention cache stores its keys, rotated).
        k = self._place(k, self.key_norm, 0)
        k, v = self._heads_first(k), self._heads_first(v)
        return ops.stack([k, v], axis=1)  # (B, 2, kv_heads, S, d)

    def _check_cacheable(self):
        if self._value_dim != self.key_dim:
            raise InputError(
                "A key/value cache needs value_dim == key_dim. Received: "
                f"key_dim={self.key_dim}, value_dim={self._value_dim}"
            )

    # ------------------------------------------------------------------- call

    @staticmethod
    def _split_heads(x, heads, dim):
        # (B, L, heads * dim) -> (B, L, heads, dim)
        return ops.reshape(x, (-1, ops.shape(x)[1], heads, dim))

    @staticmethod
    def _heads_first(x):
        # (B, L, heads, dim) -> (B, heads, L, dim): the layout of the
        # attention matmuls and of the caches.
        return ops.transpose(x, (0, 2, 1, 3))

    def _project(self, query, value, key):
        if self.fused_qkv:
            q_units = self.num_heads * self.key_dim
            k_units = self._kv_heads * self.key_dim
            qkv = self.query_key_value_dense(query)
            q, k, v = ops.split(qkv, [q_units, q_units + k_units], axis=-1)
        else:
            q = self.query_dense(query)
            k = self.key_dense(key)
            v = self.value_dense(value)
        q = self._split_heads(q, self.num_heads, self.key_dim)
        k = self._split_heads(k, self._kv_heads, self.key_dim)
        v = self._split_heads(v, self._kv_heads, self._value_dim)
        return q, k, v

    def _attend(self, q, k, v, mask, training):
        """softmax(q k^T / sqrt(d), masked) v over grouped heads.

        `q` is `(B, H, T, d)`, `k` and `v` are `(B, KV, S, d)`.
        """
        batch_size = ops.shape(q)[0]
        q_len, k_len = ops.shape(q)[2], ops.shape(k)[2]
        groups = self.num_heads // self._kv_heads
        q = q * ops.cast(self._inverse_sqrt_key_dim, q.dtype)
        if groups == 1:
            scores = ops.einsum("bhtd,bhsd->bhts", q, k)  # (B, H, T, S)
        else:
            # Query heads h = g_kv * groups + g share key/value head g_kv.
            q = ops.reshape(q, (-1, self._kv_heads, groups, q_len, self.key_dim))
            scores = ops.einsum("bkgtd,bksd->bkgts", q, k)  # (B, KV, G, T, S)
            scores = ops.reshape(scores, (-1, self.num_heads, q_len, k_len))
        scores = ops.cast(scores, "float32")
        if mask is not None:
            mask = ops.expand_dims(mask, 1)  # (B|1, 1, T, S)
            # Masked scores go MASK_MARGIN below the row's lowest score, not
            # to -1e9: their softmax weight is below e^-30 of the top one
            # (and is zeroed just after), while the tensor keeps a
            # data-sized range. Full-int8 TFLite calibrates that range; a
            # -1e9 fill made every real score round to the same int8 value.
            floor = ops.min(scores, axis=-1, keepdims=True) - MASK_MARGIN
            scores = ops.where(mask, scores, floor)
        weights = ops.softmax(scores, axis=-1)
        if mask is not None:
            # A row with every key masked attends to nothing (Keras semantics).
            # A scalar 0, not zeros_like: TFLite's quantizer leaves ZEROS_LIKE
            # (and so this SELECT_V2) in float, a constant it quantizes.
            weights = ops.where(mask, weights, ops.zeros((), weights.dtype))
        weights = ops.cast(weights, self.compute_dtype)
        dropped = self.dropout_layer(weights, training=training)
        if groups == 1:
            context = ops.einsum("bhts,bhsd->bthd", dropped, v)  # (B, T, H, dv)
        else:
            dropped = ops.reshape(dropped, (-1, self._kv_heads, groups, q_len, k_len))
            context = ops.einsum("bkgts,bksd->btkgd", dropped, v)  # (B,T,KV,G,dv)
        context = ops.reshape(
            context, (batch_size, q_len, self.num_heads * self._value_dim)
        )
        return context, weights

    def call(
        self,
        query,
        value=None,
        key=None,
        *,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_update_index=None,
    ):
        value, key, query_mask, value_mask, key_mask = self._resolve_inputs(
            query, value, key, query_mask, value_mask, key_mask, cache
        )
        start_index = 0 if cache_update_index is None else cache_update_index
        # The modes differ only in where the keys and values come from; each
        # helper returns q `(B, H, T, d)` and k, v `(B, KV, S, d)`.
        if cache is None:
            # Self-attention (value omitted: `_resolve_inputs` made it the
            # query) or cross-attention.
            q, k, v = self._project_inputs(query, value, key, start_index)
            written_mask = None
        elif cache_update_index is None:
            q, k, v = self._read_cache(query, cache)
            written_mask = None
        else:
            q, k, v, cache, written_mask = self._write_cache(
                query, value, key, cache, cache_update_index
            )

        mask = merge_attention_masks(
            key_length=static_dim(k.shape[2]),
            query_mask=query_mask,
            key_padding_masks=[
                ("value_mask", value_mask),
                ("key_mask", key_mask),
                ("cache slots", written_mask),
            ],
            attention_mask=attention_mask,
            causal=(
                causal_mask(ops.shape(q)[2], ops.shape(k)[2], start_index)
                if use_causal_mask
                else None
            ),
        )
        context, weights = self._attend(q, k, v, mask, training)
        output = self.output_dense(context)

        outputs = (output,)
        if return_attention_scores:
            outputs += (weights,)
        if cache is not None:
            outputs += (cache,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _resolve_inputs(
        self, query, value, key, query_mask, value_mask, key_mask, cache
    ):
        """Checks the inputs and fills in what was omitted.

        Returns `(value, key, query_mask, value_mask, key_mask)`: `value`
        defaults to the query (self-attention), `key` to `value`, and masks to
        the Keras masks attached to the tensors.
        """
        _check_rank3("query", query)
        # Keras fills `*_mask` from attached masks only when several tensors
        # are passed; read them here so `layer(x)` honours `mask_zero` too.
        if query_mask is None:
            query_mask = keras_mask(query)
        if value is not None and value_mask is None:
            value_mask = keras_mask(value)
        if key is not None and key_mask is None:
            key_mask = keras_mask(key)
        self_attention = value is None or value is query
        if value is None:
            value = query
            if value_mask is None and cache is None:
                # Self-attention: padded tokens are padded keys too. (With a
                # cache the keys are the cache slots, which T tokens cannot
                # describe.)
                value_mask = query_mask
        key = value if key is None else key
        _check_rank3("value", value)
        _check_rank3("key", key)
        if self.fused_qkv and not (self_attention and key is value):
            raise InputError(
                "fused_qkv=True projects the query into keys and values, so it "
                "only supports self-attention. Received a separate value/key."
            )
        if cache is not None:
            self._check_cacheable()
            # A cache in the length-major layout that this docstring once
            # described would otherwise fail deep inside a matmul, or, with
            # max_length == kv_heads, run on scrambled keys.
            expected = (2, self._kv_heads, None, self.key_dim)
            if len(cache.shape) != 5 or any(
                want is not None and static_dim(got) not in (None, want)
                for got, want in zip(cache.shape[1:], expected, strict=True)
            ):
                raise InputError(
                    "cache must have shape (batch, 2, num_key_value_heads, "
                    f"max_length, key_dim). Received: cache with shape "
                    f"{cache.shape}"
                )
        return value, key, query_mask, value_mask, key_mask

    def _project_inputs(self, query, value, key, start_index):
        """Self- or cross-attention: queries, keys and values projected from
        the inputs, rotated to positions from `start_index`, heads first."""
        q, k, v = self._project(query, value, key)
        q = self._place(q, self.query_norm, start_index)
        k = self._place(k, self.key_norm, start_index)
        return self._heads_first(q), self._heads_first(k), self._heads_first(v)

    def _place(self, x, norm, start_index):
        """Query or key heads `(B, T, heads, d)`: normalized (with `norm`,
        if any), then rotated to positions from `start_index` (if rotary)."""
        if norm is not None:
            x = norm(x)
        if self.rotary is not None:
            x = self.rotary(x, start_index=start_index)
        return x

    def _write_cache(self, query, value, key, cache, cache_update_index):
        """Decoding step: the T new keys/values are written into the cache at
        `cache_update_index`, and attention runs over the whole cache.

        Returns `(q, k, v, cache, written_mask)`: k and v are the updated
        cache's, `written_mask` `(1, max_length)` hides the slots after the
        last written one.
        """
        q, k, v = self._project_inputs(query, value, key, cache_update_index)
        new_kv = ops.cast(ops.stack([k, v], axis=1), cache.dtype)  # (B, 2, KV, T, d)
        index = ops.cast(cache_update_index, "int32")
        if len(index.shape) == 1:
            return self._write_rows(q, new_kv, cache, index)
        zero = ops.zeros((), "int32")
        cache = ops.slice_update(cache, [zero, zero, zero, index, zero], new_kv)
        k, v = ops.unstack(cache, 2, axis=1)  # (B, kv, max_length, d) each
        # Slots after the last written one hold zeros, never keys: hide
        # them even without `use_causal_mask`.
        written_mask = ops.less(
            ops.arange(ops.shape(k)[2], dtype="int32"),
            index + ops.shape(q)[2],
        )
        written_mask = ops.reshape(written_mask, (1, -1))  # (1, S)
        return q, k, v, cache, written_mask

    def _write_rows(self, q, new_kv, cache, index):
        """`_write_cache` with one position per row, `index` `(B,)`: each
        row's one new key/value goes to its own slot (an elementwise select,
        no scatter: builtin TFLite ops only), and each row sees the slots
        up to its position."""
        if static_dim(new_kv.shape[3]) != 1:
            raise InputError(
                "A cache_update_index of one position per row takes one token "
                f"per row (T = 1). Received: query with {new_kv.shape[3]} tokens"
            )
        slots = ops.reshape(ops.arange(ops.shape(cache)[3], dtype="int32"), (1, -1))
        rows = ops.reshape(index, (-1, 1))  # (B, 1)
        here = ops.reshape(ops.equal(slots, rows), (-1, 1, 1, ops.shape(cache)[3], 1))
        cache = ops.where(here, new_kv, cache)  # new_kv broadcasts over slots
        k, v = ops.unstack(cache, 2, axis=1)
        written_mask = ops.less_equal(slots, rows)  # (B, S)
        return q, k, v, cache, written_mask

    def _read_cache(self, query, cache):
        """Cross-attention over keys/values precomputed by
        `compute_key_value_cache`: only the query is projected."""
        if self.fused_qkv:
            raise InputError(
                "A precomputed (cross-attention) cache needs separate "
                "projections; this layer was built with fused_qkv=True."
            )
        q = self._split_heads(self.query_dense(query), self.num_heads, self.key_dim)
        # Without a cache_update_index the queries sit at positions from 0;
        # `compute_key_value_cache` rotated the keys from 0 too.
        q = self._place(q, self.query_norm, 0)
        k, v = ops.unstack(cache, 2, axis=1)  # (B, KV, S, d) each
        return self._heads_first(q), k, v

    # -------------------------------------------------------------- migration

    @classmethod
    def from_keras(cls, keras_mha):
        """Build an equivalent layer from a built `keras.layers.MultiHeadAttention`.

        Same outputs on the same inputs and masks; see `mha_from_keras`.
        """
        return mha_from_keras(cls, keras_mha)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "qkv_bias": self.qkv_bias,
                "output_dim": self.output_dim,
                "num_key_value_heads": self.num_key_value_heads,
                "fused_qkv": self.fused_qkv,
                "rotary_max_wavelength": self.rotary_max_wavelength,
                "rotary_scaling": self.rotary_scaling,
                "qk_norm_epsilon": self.qk_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "seed": self.seed,
            }
        )
        return config
