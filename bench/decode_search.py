"""tfformer's `Generator` with each search, at batch 1 and 32: greedy,
sampling without filters, with top-k, with top-p, and beam search.

The top-k and top-p rows run twice: with tfformer's filter (thresholds by
bisection, no sort) and with the sorting filter it replaced (kept here as
`sorting_filter`, put into the generator while it traces), so both
implementations alternate in one run. With `--modes xla,graph` every search
also runs as a plain graph (`jit_compile=False`: the SavedModel's default,
where TensorFlow's own sort kernel runs instead of XLA's).

The model and settings are bench/decode.py's (3+3 layers, d_model 256,
vocabulary 8,000, source length 32, 64 new tokens; the end token is outside
the vocabulary, so every run makes all 64). Every search runs as one
XLA-compiled `tf.function` (`Generator.compiled()`); the searches alternate
within each repeat (in reverse order every other repeat). Reported: median
milliseconds per decoding step (one new token for every row of the batch)
with min and max, and tokens/s.

Usage: `python bench/decode_search.py [--repeats 5] [--batches 1,32]
[--modes xla] [--output bench/results/decode_search.json]`.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from decode import START, build_tfformer, default_sizes
from keras import ops
from train import machine, write_result

import tfformer.decoding.generator as generator_module
from tfformer.decoding import Generator
from tfformer.decoding.sampling import MIN_TEMPERATURE, NEG_INF

SEARCHES = {
    "greedy": dict(search="greedy"),
    "sample": dict(search="sample"),
    "sample top_k 50": dict(search="sample", top_k=50),
    "sample top_p 0.9": dict(search="sample", top_p=0.9),
    "sample top_k 50 (sorting filter)": dict(search="sample", top_k=50),
    "sample top_p 0.9 (sorting filter)": dict(search="sample", top_p=0.9),
    "beam 4": dict(search="beam", beam_width=4),
}


def sorting_filter(logits, *, temperature, top_k, top_p):
    """`filter_logits_per_row` as it was before the bisection (a1497be..
    this commit's parent): one sort of every row for both filters."""
    logits = ops.cast(logits, "float32")
    logits = logits - ops.max(logits, axis=-1, keepdims=True)
    temperature = ops.maximum(ops.cast(temperature, "float32"), MIN_TEMPERATURE)
    logits = ops.maximum(logits / temperature[:, None], NEG_INF)
    if top_k is None and top_p is None:
        return logits
    batch = ops.shape(logits)[0]
    if top_k is None:
        top_k = ops.zeros((batch,), "int32")
    if top_p is None:
        top_p = ops.ones((batch,), "float32")
    vocabulary = ops.shape(logits)[-1]
    sorted_logits = ops.flip(ops.sort(logits, axis=-1), axis=-1)
    top_k = ops.cast(top_k, "int32")
    kth_index = ops.clip(top_k - 1, 0, vocabulary - 1)
    kth = ops.take_along_axis(sorted_logits, kth_index[:, None], axis=-1)
    by_k = ops.logical_and(top_k[:, None] > 0, logits < kth)
    probabilities = ops.softmax(sorted_logits, axis=-1)
    before = ops.cumsum(probabilities, axis=-1) - probabilities
    top_p = ops.cast(top_p, "float32")[:, None]
    keep = ops.logical_or(before < top_p, top_p >= 1.0)
    threshold = ops.min(
        ops.where(keep, sorted_logits, -NEG_INF), axis=-1, keepdims=True
    )
    return ops.where(ops.logical_or(by_k, logits < threshold), NEG_INF, logits)


def trace(decoder, source, name):
    """First call (the trace), with the sorting filter for its rows."""
    if "sorting filter" not in name:
        return decoder(source)
    bisecting = generator_module.filter_logits_per_row
    generator_module.filter_logits_per_row = sorting_filter
    try:
        return decoder(source)
    finally:
        generator_module.filter_logits_per_row = bisecting


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--modes", default="xla", help="xla, graph or xla,graph")
    parser.add_argument("--output", default="bench/results/decode_search.json")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not set(modes) <= {"xla", "graph"}:
        parser.error(f"--modes takes xla and/or graph. Received: {args.modes!r}")
    sizes = default_sizes()
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    steps = sizes["new_tokens"]
    rows, identical = [], {}
    for batch in [int(b) for b in args.batches.split(",")]:
        source = np.random.default_rng(0).integers(
            4, sizes["vocabulary"], (batch, sizes["source_length"])
        )
        source = tf.constant(source, tf.int32)
        decoders, tokens = {}, {}
        for mode in modes:
            for search, settings in SEARCHES.items():
                generator = Generator(
                    model,
                    max_length=steps + 1,
                    start_id=START,
                    end_id=sizes["vocabulary"],
                    seed=0,
                    **settings,
                )
                name = search if mode == "xla" else f"{search} [graph]"
                decoders[name] = generator.compiled(jit_compile=mode == "xla")
                print(f"batch {batch}: compiling {name}", flush=True)
                tokens[name] = trace(decoders[name], source, name)["token_ids"]
        # The two filters must make the same choices: same seed, same tokens.
        for name in tokens:
            if "sorting filter" in name:
                bisected = name.replace(" (sorting filter)", "")
                same = bool(np.array_equal(tokens[name], tokens[bisected]))
                identical[f"batch {batch}: {bisected}"] = same
                print(f"batch {batch}: {bisected}: same tokens as sorting: {same}")
        seconds = {name: [] for name in decoders}
        for repeat in range(args.repeats):
            names = list(decoders) if repeat % 2 == 0 else list(decoders)[::-1]
            for name in names:
                began = time.perf_counter()
                decoders[name](source)["token_ids"].numpy()
                seconds[name].append(time.perf_counter() - began)
        for name, times in seconds.items():
            median = statistics.median(times)
            rows.append(
                dict(
                    search=name,
                    batch=batch,
                    ms_per_step=1e3 * median / steps,
                    ms_per_step_min=1e3 * min(times) / steps,
                    ms_per_step_max=1e3 * max(times) / steps,
                    tokens_per_second=batch * steps / median,
                    seconds=times,
                )
            )
            row = rows[-1]
            print(
                f"batch {batch:>3} {name:<42} {row['ms_per_step']:7.2f} ms/step "
                f"({row['ms_per_step_min']:.2f}-{row['ms_per_step_max']:.2f}), "
                f"{row['tokens_per_second']:.0f} tok/s",
                flush=True,
            )
    write_result(
        args.output,
        dict(
            machine=machine(),
            sizes=sizes,
            repeats=args.repeats,
            rows=rows,
            same_tokens_as_sorting=identical,
        ),
    )


if __name__ == "__main__":
    main()
