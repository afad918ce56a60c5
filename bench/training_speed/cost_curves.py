"""Cost curves: tokens/s and peak memory of training and of cached decoding
as the sequence length and the batch grow, tfformer against keras-hub.

The model is translate_de_en.json's `transformer_small` size (3+3 layers,
d_model 256, 8 heads, FFN 1024) with a vocabulary of 8,000, built by each
library: tfformer's `transformer_seq2seq` and keras-hub's
TransformerEncoder/Decoder (`bench/peers.py`). Inputs are random
ids with no padding, so every token counts.

- Training: `model.fit` under XLA, float32, dropout 0.1, Adam, sparse
  cross-entropy on the logits, source and target both `L` long. The length
  curve keeps the tokens per batch fixed (`--tokens`, batch = tokens / L),
  so tokens/s falls only where the per-token cost grows: the attention term,
  quadratic in L per sequence, against the linear projections and FFN. The
  batch curve holds L = 64. Per-step seconds of `--steps` steps after the
  compiling one; median and (min-max).
- Decoding: greedy, `L - 1` new tokens after the start token, source length
  min(L, 32); each library's faster mode in bench/decoding_speed/decode.py (tfformer's
  `Generator` XLA-compiled, keras-hub's cached loop as a plain graph).
  Median of `--repeats` calls after a compiling one.

Every point runs in its own process, so its peak resident memory
(`ru_maxrss` from `wait4`, what `/usr/bin/time -v` reports) is that point's
alone; the table also gives it above the floor of a process that only
imports TensorFlow, Keras, keras-hub and tfformer. The two libraries
alternate at each point (in reverse order every other point).

Usage: `python -m bench.training_speed.cost_curves [--lengths 16,32,64,128,256,512,1024]
[--batches 1,4,16,64,256] [--decode-lengths 16,64,256,1024]
[--decode-batches 1,4,16,64] [--output bench/results/cost_curves.json]`;
writes the JSON and a PNG next to it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common

VOCABULARY = 8000
SIZES = dict(layers=3, hidden_dim=256, heads=8, intermediate_dim=1024)
LIBRARIES = ("tfformer", "keras_hub")


def build(library, length, dropout):
    import keras

    from bench.peers import seq2seq_for_sizes
    from tfformer.models import transformer_seq2seq

    keras.utils.set_random_seed(0)
    if library == "tfformer":
        return transformer_seq2seq(
            VOCABULARY,
            VOCABULARY,
            num_encoder_layers=SIZES["layers"],
            num_decoder_layers=SIZES["layers"],
            hidden_dim=SIZES["hidden_dim"],
            num_heads=SIZES["heads"],
            intermediate_dim=SIZES["intermediate_dim"],
            dropout=dropout,
            max_sequence_length=length,
        )
    return seq2seq_for_sizes(
        dict(SIZES, vocabulary=VOCABULARY, max_length=length), dropout
    )


def train_point(library, length, batch, steps):
    """Per-step seconds of `steps` training steps after the compiling one."""
    import keras
    import numpy as np
    import tensorflow as tf

    from bench.callbacks import BatchClock
    from bench.training_speed.train import NO_AUTOTUNE

    model = build(library, length, 0.1)
    if library != "tfformer":
        model = model.training_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    rng = np.random.default_rng(0)

    def ids():
        return rng.integers(4, VOCABULARY, (batch, length)).astype("int32")

    features = {"encoder_token_ids": ids(), "decoder_token_ids": ids()}
    data = tf.data.Dataset.from_tensors((features, ids())).repeat(steps + 1)
    clock = BatchClock()
    model.fit(data.with_options(NO_AUTOTUNE), verbose=0, callbacks=[clock])
    return list(np.diff(clock.ends)), batch * length


def decode_point(library, length, batch, repeats):
    """Seconds of `repeats` greedy decoding calls after the compiling one."""
    import numpy as np
    import tensorflow as tf

    from tfformer.decoding import Generator

    model = build(library, length, 0.0)
    source_length = min(length, 32)
    source = np.random.default_rng(0).integers(4, VOCABULARY, (batch, source_length))
    source = tf.constant(source, tf.int32)
    if library == "tfformer":
        generator = Generator(model, max_length=length, end_id=VOCABULARY)
        compiled = generator.compiled(jit_compile=True)

        def decode(source):
            return compiled(source)["token_ids"]
    else:
        decode = model.decoder(length, jit_compile=False, mask_source=False)
    decode(source).numpy()
    seconds = common.call_seconds(lambda: decode(source).numpy(), repeats)
    return seconds, batch * (length - 1)


def worker(point):
    """Runs one point in this process and prints its JSON on the last line."""
    if point["kind"] == "imports":
        import keras  # noqa: F401
        import keras_hub  # noqa: F401
        import tensorflow  # noqa: F401

        import tfformer.models  # noqa: F401

        seconds, tokens = [1.0], 0
    elif point["kind"] == "train":
        seconds, tokens = train_point(
            point["library"], point["length"], point["batch"], point["steps"]
        )
    else:
        seconds, tokens = decode_point(
            point["library"], point["length"], point["batch"], point["repeats"]
        )
    print(json.dumps(dict(seconds=[float(s) for s in seconds], tokens=tokens)))


def run_point(point):
    """The point in a fresh process: its row, with the peak resident memory."""
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.training_speed.cost_curves",
                "--point",
                json.dumps(point),
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        out = process.stdout.read()
        # wait4's rusage is the child's own (what /usr/bin/time -v reports).
        _, status, usage = os.wait4(process.pid, 0)
        log.seek(0)
        err = log.read()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        # Recorded and skipped (say, out of memory at a large size), so
        # one point does not lose the others.
        sys.stderr.write(err[-2000:])
        print(f"point {point} failed with exit {process.returncode}", flush=True)
        return dict(point, error=err[-2000:], peak_rss_mb=usage.ru_maxrss / 1024)
    result = json.loads(out.strip().splitlines()[-1])
    seconds = result["seconds"]
    median, fastest, slowest = common.median_min_max(seconds)
    row = dict(
        point,
        seconds=seconds,
        wall_seconds=round(time.perf_counter() - began, 1),
        peak_rss_mb=usage.ru_maxrss / 1024,
        tokens=result["tokens"],
    )
    if result["tokens"]:
        row["tokens_per_second"] = result["tokens"] / median
        row["tokens_per_second_min"] = result["tokens"] / slowest
        row["tokens_per_second_max"] = result["tokens"] / fastest
    return row


def grid(args):
    """The points, libraries alternating (reversed every other point)."""
    sweeps = []
    budget = args.tokens
    for length in args.lengths:
        sweeps.append(("train", "length", length, max(1, budget // length)))
    for batch in args.batches:
        sweeps.append(("train", "batch", 64, batch))
    for batch in (1, 32):
        for length in args.decode_lengths:
            sweeps.append(("decode", f"length_batch{batch}", length, batch))
    for batch in args.decode_batches:
        sweeps.append(("decode", "batch", 64, batch))
    points = []
    for n, (kind, sweep, length, batch) in enumerate(sweeps):
        libraries = LIBRARIES if n % 2 == 0 else LIBRARIES[::-1]
        for library in libraries:
            points.append(
                dict(
                    kind=kind,
                    sweep=sweep,
                    library=library,
                    length=length,
                    batch=batch,
                    steps=args.steps,
                    repeats=args.repeats,
                )
            )
    return points


def plot(rows, floor, path):
    plt = common.pyplot()
    panels = [
        ("train", "length", "length", "training, tokens per batch fixed"),
        ("train", "batch", "batch", "training, length 64"),
        ("decode", "length_batch1", "length", "greedy decoding, batch 1"),
        ("decode", "length_batch32", "length", "greedy decoding, batch 32"),
        ("decode", "batch", "batch", "greedy decoding, length 64"),
    ]
    fig, axes = plt.subplots(2, len(panels), figsize=(4.2 * len(panels), 7.5))
    colors = {"tfformer": "tab:blue", "keras_hub": "tab:orange"}
    for column, (kind, sweep, axis, title) in enumerate(panels):
        for library in LIBRARIES:
            points = sorted(
                (
                    r
                    for r in rows
                    if (r["kind"], r["sweep"], r["library"]) == (kind, sweep, library)
                ),
                key=lambda r: r[axis],
            )
            if not points:
                continue
            x = [r[axis] for r in points]
            speed = axes[0, column]
            speed.plot(
                x,
                [r["tokens_per_second"] for r in points],
                "o-",
                color=colors[library],
                label=library,
            )
            speed.fill_between(
                x,
                [r["tokens_per_second_min"] for r in points],
                [r["tokens_per_second_max"] for r in points],
                color=colors[library],
                alpha=0.2,
            )
            memory = axes[1, column]
            memory.plot(
                x,
                [r["peak_rss_mb"] - floor for r in points],
                "o-",
                color=colors[library],
                label=library,
            )
        for row in (0, 1):
            axes[row, column].set_xscale("log", base=2)
            axes[row, column].set_xlabel(axis)
        axes[0, column].set_yscale("log")
        axes[0, column].set_title(title, fontsize=10)
    axes[0, 0].set_ylabel("tokens/s (median, min-max band)")
    axes[1, 0].set_ylabel(f"peak RSS above the import floor ({floor:.0f} MB), MB")
    axes[0, 0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"Wrote {path}")


def integers(text):
    return [int(v) for v in text.split(",") if v]


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--point", help=argparse.SUPPRESS)
    parser.add_argument("--lengths", type=integers, default="16,32,64,128,256,512,1024")
    parser.add_argument("--batches", type=integers, default="1,4,16,64,256")
    parser.add_argument("--decode-lengths", type=integers, default="16,64,256,1024")
    parser.add_argument("--decode-batches", type=integers, default="1,4,16,64")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="bench/results/cost_curves.json")
    args = parser.parse_args()
    if args.point:
        return worker(json.loads(args.point))
    bad = [v for v in args.lengths + args.decode_lengths if v < 2]
    bad += [v for v in args.batches + args.decode_batches if v < 1]
    if bad or args.steps < 2 or args.repeats < 1 or args.tokens < 1:
        parser.error(
            "lengths must be >= 2, batches, --tokens and --repeats >= 1, "
            f"--steps >= 2. Received: {bad or (args.steps, args.repeats, args.tokens)}"
        )
    floor = run_point(dict(kind="imports", sweep="", library="", length=0, batch=0))
    print(f"import floor: {floor['peak_rss_mb']:.0f} MB", flush=True)
    rows, points = [], grid(args)
    for n, point in enumerate(points):
        row = run_point(point)
        rows.append(row)
        if "error" in row:
            continue
        print(
            f"[{n + 1}/{len(points)}] {point['kind']} {point['sweep']} "
            f"{point['library']} L={point['length']} batch={point['batch']}: "
            f"{row['tokens_per_second']:.0f} tok/s "
            f"({row['tokens_per_second_min']:.0f}-{row['tokens_per_second_max']:.0f}), "
            f"peak {row['peak_rss_mb']:.0f} MB, {row['wall_seconds']:.0f} s",
            flush=True,
        )
    result = dict(
        sizes=dict(SIZES, vocabulary=VOCABULARY),
        tokens_per_batch=args.tokens,
        import_floor_mb=floor["peak_rss_mb"],
        rows=rows,
    )
    common.write_result(args.output, result)
    measured = [r for r in rows if "error" not in r]
    plot(measured, floor["peak_rss_mb"], os.path.splitext(args.output)[0] + ".png")
    by = {
        (r["kind"], r["sweep"], r["length"], r["batch"], r["library"]): r
        for r in measured
    }
    print(
        f"\n{'kind':<7}{'sweep':<16}{'L':>6}{'batch':>6}"
        f"{'tfformer tok/s':>16}{'keras-hub tok/s':>17}{'ratio':>7}"
        f"{'MB tf':>8}{'MB hub':>8}"
    )
    for key in dict.fromkeys(k[:4] for k in by):
        ours, theirs = by.get((*key, "tfformer")), by.get((*key, "keras_hub"))
        if not (ours and theirs):
            continue
        print(
            f"{key[0]:<7}{key[1]:<16}{key[2]:>6}{key[3]:>6}"
            f"{ours['tokens_per_second']:>16.0f}{theirs['tokens_per_second']:>17.0f}"
            f"{ours['tokens_per_second'] / theirs['tokens_per_second']:>6.2f}x"
            f"{ours['peak_rss_mb']:>8.0f}{theirs['peak_rss_mb']:>8.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
