"""tfformer's `Generator` with each search, at batch 1 and 32: greedy,
sampling without filters, with top-k, with top-p, and beam search.

The model and settings are bench/decoding_speed/decode.py's (3+3 layers, d_model 256,
vocabulary 8,000 unless `--vocabulary`, source length 32, 64 new tokens;
the end token is outside the vocabulary, so every run makes all 64). Every
search runs as one `tf.function` (`Generator.compiled()`), XLA-compiled
unless `--modes` asks for graph mode too; the searches alternate within
each repeat (in reverse order every other repeat). Reported: median
milliseconds per decoding step (one new token for every row of the batch)
with min and max, and tokens/s.

The top-k and top-p rows run twice: with the filter algorithm the
`Generator` picks in that mode (bisection under XLA, one sort per row as a
plain graph) and with the other one, forced while the contender traces
(the "(other)" rows), so both alternate in one run; the script fails
(after writing its JSON) if the two give different tokens. With
`--modes xla,graph` every search also runs as a plain graph
(`jit_compile=False`: the SavedModel's default).

Usage: `python -m bench.decoding_speed.decode_search [--repeats 5] [--batches 1,32]
[--modes xla] [--vocabulary 8000] [--output bench/results/decode_search.json]`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import tfformer.decoding.sampling as sampling
from bench import common
from bench.decoding_speed.decode import START, build_tfformer, default_sizes
from tfformer.decoding import Generator

SEARCHES = {
    "greedy": dict(search="greedy"),
    "sample": dict(search="sample"),
    "sample top_k 50": dict(search="sample", top_k=50),
    "sample top_p 0.9": dict(search="sample", top_p=0.9),
    "sample top_k 50 (other)": dict(search="sample", top_k=50),
    "sample top_p 0.9 (other)": dict(search="sample", top_p=0.9),
    "beam 4": dict(search="beam", beam_width=4),
}


def trace(decoder, source, name, mode):
    """First call (the trace); an "(other)" contender traces with the filter
    algorithm that its mode does not pick (`in_xla_compilation` decides)."""
    if "(other)" not in name:
        return decoder(source)
    chosen = sampling.in_xla_compilation
    sampling.in_xla_compilation = lambda: mode != "xla"
    try:
        return decoder(source)
    finally:
        sampling.in_xla_compilation = chosen


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--modes", default="xla", help="xla, graph or xla,graph")
    parser.add_argument("--vocabulary", type=int, default=8000)
    parser.add_argument("--output", default="bench/results/decode_search.json")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if not set(modes) <= {"xla", "graph"}:
        parser.error(f"--modes takes xla and/or graph. Received: {args.modes!r}")
    sizes = default_sizes(args.vocabulary)
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
                tokens[name] = trace(decoders[name], source, name, mode)["token_ids"]
        # The two algorithms must make the same choices: same seed, same tokens.
        for name in tokens:
            if "(other)" in name:
                chosen = name.replace(" (other)", "")
                same = bool(np.array_equal(tokens[name], tokens[chosen]))
                identical[f"batch {batch}: {chosen}"] = same
                print(f"batch {batch}: {chosen}: same tokens with either: {same}")
        seconds = {name: [] for name in decoders}
        for _, names in common.rounds(decoders, args.repeats):
            for name in names:
                _, elapsed = common.timed(
                    lambda d=decoders[name], s=source: d(s)["token_ids"].numpy()
                )
                seconds[name].append(elapsed)
        for name, times in seconds.items():
            median, fastest, slowest = common.median_min_max(times)
            rows.append(
                dict(
                    search=name,
                    batch=batch,
                    ms_per_step=1e3 * median / steps,
                    ms_per_step_min=1e3 * fastest / steps,
                    ms_per_step_max=1e3 * slowest / steps,
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
    common.write_result(
        args.output,
        dict(
            sizes=sizes,
            repeats=args.repeats,
            rows=rows,
            same_tokens_either_algorithm=identical,
        ),
    )
    differ = [name for name, same in identical.items() if not same]
    if differ:
        raise SystemExit(f"the two filter algorithms chose other tokens: {differ}")


if __name__ == "__main__":
    main()
