"""What is left of issue 21's decoding targets: tfformer's cached greedy
decoding with one part of its attention changed at a time, against the
weight-streaming floor (XLA) and keras-hub's cache (plain graph).

bench/decoding_speed/decode.py's model and sizes (3+3 layers, d_model 256, 8 heads, FFN
1024, vocabulary 8,000, source length 32, 64 new tokens, caches of 65
slots). Variants of `tfformer.layers.MultiHeadAttention`, patched while each
contender traces (same weights, same `Generator`):

- shipped: the library as it is: one `(batch, 2, kv_heads, slots, d)` cache
  per layer, split into K and V at every step.
- pair caches: K and V kept as two tensors, `(batch, kv_heads, slots, d)`
  each, written with two slice updates (no split, no stack).
- multiply-sum: at one query, scores as `sum(q * k)` and the context as
  `sum(weights * v)` instead of the two batched matmuls.
- cut cache (bound, not a decoder): attention reads only the first 16 of
  the 65 slots (its tokens are wrong and not checked). It shows what
  reading less of the cache could gain at most, e.g. attention over only
  the written prefix.

Each runs XLA-compiled and as a plain graph. The weight floor
(bench/decoding_speed/decode.py's, XLA) and keras-hub's cached decoder (plain graph, its
faster mode) are references. Contenders alternate within each repeat
(reversed every other one); medians with min and max. The script fails if
a variant other than the cut cache generates other tokens or scores
(beyond 1e-4) than shipped's, if the cut cache's scores are shipped's (a
sign its patch did not run), or if a patched method did not run while its
variant traced.

Usage: `python -m bench.decoding_speed.decode_variants [--repeats 9] [--batches 1,32]
[--output bench/results/decode_variants.json]`.
"""

import contextlib
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from bench import common
from bench.decoding_speed.decode import (
    START,
    build_tfformer,
    default_sizes,
    measure,
    weight_floor_decoder,
)
from bench.peers import seq2seq_for_sizes
from tfformer.decoding import Generator
from tfformer.layers import multi_head_attention as mha

CUT_SLOTS = 16
SHIPPED = {
    name: getattr(mha.MultiHeadAttention, name)
    for name in (
        "init_cache",
        "compute_key_value_cache",
        "_resolve_inputs",
        "_write_cache",
        "_read_cache",
        "_attend",
    )
}


def _pair_init_cache(self, batch_size, max_length):
    zeros = ops.zeros(
        (batch_size, self._kv_heads, max_length, self.key_dim), self.compute_dtype
    )
    return (zeros, zeros)


def _pair_key_value_cache(self, value, key=None):
    return tuple(
        ops.unstack(SHIPPED["compute_key_value_cache"](self, value, key), 2, axis=1)
    )


def _pair_resolve_inputs(self, query, value, key, *masks_and_cache):
    *masks, cache = masks_and_cache
    # The shipped checks, on a stacked stand-in (unused, so pruned).
    stacked = None if cache is None else ops.stack(cache, axis=1)
    return SHIPPED["_resolve_inputs"](self, query, value, key, *masks, stacked)


def _pair_write_cache(self, query, value, key, cache, cache_update_index):
    q, k, v = self._project_inputs(query, value, key, cache_update_index)
    zero = ops.zeros((), "int32")
    index = ops.cast(cache_update_index, "int32")
    start = [zero, zero, index, zero]
    k = ops.slice_update(cache[0], start, ops.cast(k, cache[0].dtype))
    v = ops.slice_update(cache[1], start, ops.cast(v, cache[1].dtype))
    slots = ops.arange(ops.shape(k)[2], dtype="int32")
    written = ops.less(slots, index + ops.shape(q)[2])
    return q, k, v, (k, v), ops.reshape(written, (1, -1))


def _pair_read_cache(self, query, cache):
    if self.rotary is not None or self.fused_qkv:
        raise NotImplementedError(
            "pair caches here cover bench/decoding_speed/decode.py's model"
        )
    q = self._split_heads(self.query_dense(query), self.num_heads, self.key_dim)
    return self._heads_first(q), cache[0], cache[1]


def _multiply_sum_attend(self, q, k, v, mask, training):
    if q.shape[2] != 1 or self.num_heads != self._kv_heads:
        return SHIPPED["_attend"](self, q, k, v, mask, training)
    q = q * ops.cast(self._inverse_sqrt_key_dim, q.dtype)
    scores = ops.sum(q * k, axis=-1)[:, :, None, :]  # (B, H, 1, S)
    if mask is not None:
        mask = ops.expand_dims(mask, 1)
        floor = ops.min(scores, axis=-1, keepdims=True) - mha.MASK_MARGIN
        scores = ops.where(mask, scores, floor)
    weights = ops.softmax(scores, axis=-1)
    if mask is not None:
        weights = ops.where(mask, weights, ops.zeros((), weights.dtype))
    context = ops.sum(ops.transpose(weights, (0, 1, 3, 2)) * v, axis=2)
    batch = ops.shape(q)[0]
    return ops.reshape(context, (batch, 1, self.num_heads * self._value_dim)), weights


def _cut_write_cache(self, query, value, key, cache, cache_update_index):
    q, k, v, cache, written = SHIPPED["_write_cache"](
        self, query, value, key, cache, cache_update_index
    )
    cut = slice(0, CUT_SLOTS)
    return q, k[:, :, cut], v[:, :, cut], cache, written[:, cut]


VARIANTS = {
    "shipped": {},
    "pair caches": dict(
        init_cache=_pair_init_cache,
        compute_key_value_cache=_pair_key_value_cache,
        _resolve_inputs=_pair_resolve_inputs,
        _write_cache=_pair_write_cache,
        _read_cache=_pair_read_cache,
    ),
    "multiply-sum": dict(_attend=_multiply_sum_attend),
    "cut cache (bound)": dict(_write_cache=_cut_write_cache),
}


@contextlib.contextmanager
def patched(variant):
    """The variant's methods in place while the block runs; yields a dict
    that counts the calls of each (all must run while the variant traces)."""
    calls = dict.fromkeys(VARIANTS[variant], 0)

    def counted(name, method):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)

        return wrapper

    for name, method in VARIANTS[variant].items():
        setattr(mha.MultiHeadAttention, name, counted(name, method))
    try:
        yield calls
    finally:
        for name, method in SHIPPED.items():
            setattr(mha.MultiHeadAttention, name, method)


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--output", default="bench/results/decode_variants.json")
    args = parser.parse_args()
    sizes = default_sizes()
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    hub = seq2seq_for_sizes(sizes)
    rng = np.random.default_rng(0)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        source = rng.integers(4, sizes["vocabulary"], (batch, sizes["source_length"]))
        source = tf.constant(source, tf.int32)
        contenders = {
            ("weight_floor", "xla"): weight_floor_decoder(model, sizes, True),
            ("keras_hub_cached", "graph"): hub.decoder(
                sizes["new_tokens"] + 1, False, mask_source=False
            ),
        }
        outputs = {}
        for variant in VARIANTS:
            for mode, jit in (("xla", True), ("graph", False)):
                # decode.py's tfformer contender: always 64 new tokens.
                compiled = Generator(
                    model,
                    max_length=sizes["new_tokens"] + 1,
                    start_id=START,
                    end_id=sizes["vocabulary"],
                ).compiled(jit_compile=jit)
                with patched(variant) as calls:  # traced here, with its code
                    out = compiled(source)
                ids, scores = out["token_ids"].numpy(), out["scores"].numpy()
                outputs[variant, mode] = ids, scores
                idle = [name for name, count in calls.items() if not count]
                if idle:
                    sys.exit(f"{variant} ({mode}): {idle} never ran while tracing")
                contenders[(variant, mode)] = lambda s, c=compiled: c(s)["token_ids"]
        for (variant, mode), (ids, scores) in outputs.items():
            shipped_ids, shipped_scores = outputs["shipped", mode]
            same = np.array_equal(ids, shipped_ids) and np.allclose(
                scores, shipped_scores, rtol=1e-4, atol=1e-4
            )
            if variant == "cut cache (bound)" and same:
                sys.exit(f"the cut cache ({mode}) scored as shipped: did it run?")
            if variant != "cut cache (bound)" and not same:
                sys.exit(f"{variant} ({mode}): other tokens or scores than shipped")
        times = measure(contenders, source, args.repeats)
        for (name, mode), seconds in times.items():
            median, fastest, slowest = common.median_min_max(seconds)
            rows.append(
                dict(
                    contender=name,
                    mode=mode,
                    batch=batch,
                    ms_per_step=1000 * median / sizes["new_tokens"],
                    min_ms_per_step=1000 * fastest / sizes["new_tokens"],
                    max_ms_per_step=1000 * slowest / sizes["new_tokens"],
                    tokens_per_second=batch * sizes["new_tokens"] / median,
                    seconds=seconds,
                )
            )
    by = {(r["contender"], r["mode"], r["batch"]): r for r in rows}
    print(
        f"\n{'variant':<20}{'mode':<7}{'batch':>6}{'ms/step (min-max)':>24}"
        f"{'vs shipped':>12}{'reference':>22}"
    )
    for r in rows:
        spread = common.spread_text(
            r["ms_per_step"], r["min_ms_per_step"], r["max_ms_per_step"], digits=3
        )
        line = f"{r['contender']:<20}{r['mode']:<7}{r['batch']:>6}{spread:>24}"
        if r["contender"] in VARIANTS:
            shipped = by["shipped", r["mode"], r["batch"]]
            r["speed_vs_shipped"] = shipped["ms_per_step"] / r["ms_per_step"]
            if r["mode"] == "xla":
                floor = by["weight_floor", "xla", r["batch"]]
                r["share_of_floor"] = floor["ms_per_step"] / r["ms_per_step"]
                reference = f"{r['share_of_floor']:.0%} of floor"
            else:
                hub_row = by["keras_hub_cached", "graph", r["batch"]]
                r["vs_keras_hub_graph"] = hub_row["ms_per_step"] / r["ms_per_step"]
                reference = f"{r['vs_keras_hub_graph']:.2f}x keras-hub"
            line += f"{r['speed_vs_shipped']:>11.2f}x{reference:>22}"
        print(line)
    common.write_result(
        args.output,
        dict(sizes=sizes, cut_slots=CUT_SLOTS, repeats=args.repeats, rows=rows),
    )


if __name__ == "__main__":
    main()
