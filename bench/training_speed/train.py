"""Training speed: real (non-padding) target tokens per second of `model.fit`,
tfformer against keras-hub at the same sizes, data and batch size.

The data is a fixed pool of Multi30k De->En training pairs (the
`translate_de_en` config, its vocabulary read from `--run` or learned), and
the model is that config's `transformer_small` (3+3 layers, d_model 256,
8 heads, FFN 1024). Every contender trains with the same optimizer, schedule,
label-smoothed masked loss and batch size, under XLA (`jit_compile=True`):

- tfformer / bucketed: tfformer's model and pipeline (`training_stream`:
  batches of `train.batch_size` sentences of similar lengths, padded to the
  smallest of the config's buckets).
- tfformer / tokens: the same with token-budget batches (`--batch-tokens`,
  default the config's `train.batch_tokens`, else 2048): a batch of bucket
  length L holds batch_tokens // L sentences.
- keras-hub / fixed: `keras_hub.layers` TransformerEncoder/Decoder, every
  sequence padded to the fixed `max_length`, as in the keras.io keras-hub
  translation example.
- keras-hub / bucketed, keras-hub / tokens and tfformer / fixed: each model
  on the other's pipelines, to tell the model's share of the speed-up from
  the pipeline's.

Same dropout: keras-hub's TransformerEncoder/Decoder drop the sublayer
outputs and the attention weights, not the feed-forward network's hidden
activations; tfformer's blocks drop those too unless
`model.activation_dropout=0.0`. Every "tfformer" row runs with
`model.activation_dropout=0.0`, and every keras-hub row drops its
embeddings at `dropout` as tfformer's model does (a Dropout layer after
each `TokenAndPositionEmbedding`; the keras.io example has none), so both
libraries draw the same dropout. The row "tfformer_ffn_dropout / bucketed"
(float32) is the config as `translate_de_en` trains it, hidden dropout
included.

Each contender first compiles by training one pass over the pool; then the
contenders alternate, each training one pass (`model.fit`, the batches
cached in memory) per repeat, timed from the end of its first batch to the
end of its last (the whole `fit` call is recorded too). Reported: medians
and (min-max) of real target tokens per second, and model FLOPs utilisation
(MFU): the useful training FLOPs of the real tokens (3x the forward matmul
FLOPs of the unpadded sequences) per second, divided by the float32 (or
bfloat16) matmul peak measured in the same run (before and after the
contenders; the higher of the two). `--precision
mixed_bfloat16` repeats it under Keras's mixed_bfloat16 policy.

The headline line compares the two libraries on the product's pipeline:
token batches when the config sets `train.batch_tokens`, else sentence
batches; the other pipeline's ratio is printed under it.

Usage: `python -m bench.training_speed.train [--run DIR] [--sentences 1920]
[--repeats 3] [--batch-tokens N] [--pipelines bucketed,fixed,tokens]
[--precision float32,mixed_bfloat16]
[--output bench/results/train.json]`
"""

import dataclasses
import os
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bench import common
from bench.callbacks import BatchClock
from bench.peers import padded_dataset, seq2seq_for_config
from tfformer.training import pipeline
from tfformer.training.config import load_config
from tfformer.training.pipeline import Examples
from tfformer.training.tasks import get_task
from tfformer.training.trainer import (
    build_dataset,
    build_model,
    compile_model,
    dtype_policy,
)

CONFIG = os.path.join("training", "configs", "translate_de_en.json")


def matmul_peak(dtype, n=1024, repeats=20, jit_compile=True):
    """Median FLOP/s of an n x n x n matmul in `dtype`, XLA-compiled (or in
    graph mode with `jit_compile=False`)."""
    a = tf.random.normal([n, n], dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)
    matmul = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=jit_compile)
    matmul(a, b).numpy()
    times = common.call_seconds(lambda: matmul(a, b).numpy(), repeats)
    return 2 * n**3 / statistics.median(times)


def training_flops(source_lengths, target_lengths, sizes, target_vocabulary):
    """Useful training FLOPs of the unpadded examples: 3x forward, forward =
    2x the multiply-adds of every matmul (attention scores and values
    included, full rather than causal, as PaLM's MFU counts them)."""
    s = np.asarray(source_lengths, np.float64)
    t = np.asarray(target_lengths, np.float64)
    d, ff = sizes["hidden_dim"], sizes["intermediate_dim"]
    encoder = sizes["num_encoder_layers"] * (
        s * (4 * d * d + 2 * d * ff) + 2 * s * s * d
    )
    decoder = sizes["num_decoder_layers"] * (
        t * (4 * d * d + 2 * t * d)  # self-attention
        + t * 2 * d * d
        + s * 2 * d * d
        + 2 * t * s * d  # cross-attention
        + t * 2 * d * ff
    )
    logits = t * d * target_vocabulary
    return float(np.sum(3 * 2 * (encoder + decoder + logits)))


NO_AUTOTUNE = tf.data.Options()
NO_AUTOTUNE.autotune.enabled = False


def subset(examples, count):
    return Examples(
        {k: v[:count] for k, v in examples.features.items()},
        examples.labels[:count],
        examples.lengths[:count],
    )


def cached(dataset, steps):
    """The first `steps` batches, held in memory, as a function that makes a
    fresh finite dataset of them for each `fit`; and the real (non-padding)
    source and target lengths of their rows, per batch."""
    batches = list(dataset.take(steps))
    if len(batches) < 2:
        raise ValueError(
            f"--sentences gives {len(batches)} batch(es); timing needs at least 2."
        )
    source = [np.sum(b[0]["encoder_token_ids"].numpy() != 0, axis=1) for b in batches]
    target = [np.sum(b[1].numpy() != 0, axis=1) for b in batches]

    def make(autotune=False):
        return batches_dataset(batches, autotune)

    return make, source, target


def batches_dataset(batches, autotune=False):
    """A finite dataset of batches held in memory. Without autotuning:
    tf.data's autotune thread made ending a fit (deleting its iterator) wait
    3-41 s (see `fit_seconds`); batches already in memory have nothing to
    tune."""
    out = tf.data.Dataset.from_tensors(batches[0])
    for batch in batches[1:]:
        out = out.concatenate(tf.data.Dataset.from_tensors(batch))
    return out if autotune else out.with_options(NO_AUTOTUNE)


def bucketed(pool, data, batch_size):
    """`batch_size`: sentences, or one count per bucket (token batches)."""
    steps = pipeline.batches_per_epoch(pool.lengths, data.bucket_lengths, batch_size)
    stream = pipeline.training_stream(
        pool,
        batch_size=batch_size,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=steps,
        seed=0,
    )
    return (stream, steps)


def fixed(pool, length, batch_size):
    steps = len(pool) // batch_size
    return (padded_dataset(pool, length, batch_size, shuffle=False), steps)


# All four in float32; the two that matter under mixed_bfloat16 (this CPU has
# no native bfloat16, so that run only shows what the policy costs here).
CONTENDERS = {
    "float32": (
        ("tfformer", "bucketed"),
        ("keras_hub", "fixed"),
        ("keras_hub", "bucketed"),
        ("tfformer_ffn_dropout", "bucketed"),
        ("tfformer", "fixed"),
        ("tfformer", "tokens"),
        ("keras_hub", "tokens"),
    ),
    "mixed_bfloat16": (("tfformer", "bucketed"), ("keras_hub", "fixed")),
}


def contenders(config, data, pool, precision, batch_tokens, pipes=None):
    t = config.train
    sizes = get_task(config.task).model_sizes(config.model)
    vocabulary = data.tokenizers["target"].vocabulary_size
    token_sizes = pipeline.token_batch_sizes(data.bucket_lengths, batch_tokens)
    pipelines = {
        "bucketed": bucketed(pool, data, t.batch_size),
        "fixed": fixed(pool, config.data.max_length, t.batch_size),
        "tokens": bucketed(pool, data, token_sizes),
    }
    # keras-hub's dropout placement (no hidden dropout in the FFN).
    same_dropout = dataclasses.replace(
        config, model=dataclasses.replace(config.model, activation_dropout=0.0)
    )
    out = {}
    for library, pipe in CONTENDERS[precision]:
        if pipes is not None and pipe not in pipes:
            continue
        keras.utils.set_random_seed(0)
        with dtype_policy(precision):
            if library == "tfformer":
                model = build_model(same_dropout, data)
            elif library == "tfformer_ffn_dropout":
                model = build_model(config, data)
            else:
                # tfformer's dropout on the embeddings, as a keras-hub user
                # adds it (keras.io's example has none).
                model = seq2seq_for_config(
                    config, data, embedding_dropout=sizes["dropout"]
                ).training_model()
            model = compile_model(model, config)
        dataset, steps = pipelines[pipe]
        dataset, source, target = cached(dataset, steps)
        # The clock runs from the end of the first batch to the end of the
        # last, so the counts leave the first batch out.
        source, target = np.concatenate(source[1:]), np.concatenate(target[1:])
        out[(library, pipe)] = dict(
            model=model,
            dataset=dataset,
            steps=steps,
            tokens=int(target.sum()),
            flops=training_flops(source, target, sizes, vocabulary),
        )
    return out


def fit_seconds(entry):
    """Seconds of batches 2..N of one pass, timed inside `fit`; and of the
    whole `fit` call. With tf.data's autotuning on, about half of the `fit`
    calls took 3-41 s more than their batches: deleting the iterator at the
    end of `fit` waited for autotuning's background thread, whose wake-ups
    come at 10.23 s, 20.47 s and 40.95 s after the iterator started (a
    period doubling from 10 ms): such a `fit` lasted exactly 10.24 s or
    41 s. The cached datasets turn autotuning off (`cached`), which removed
    the wait in every call measured; the figures still come from the
    batches."""
    clock = BatchClock()
    _, whole = common.timed(
        lambda: entry["model"].fit(
            entry["dataset"](), epochs=1, verbose=0, callbacks=[clock]
        )
    )
    return clock.seconds(), whole


def measure(entries, repeats, progress=print):
    """Compiles each contender (one pass), then times `repeats` passes of
    each, alternating: repeat r runs the contenders in order, r + 1 in
    reverse, so none always follows the same one."""
    for (library, pipe), e in entries.items():
        progress(f"  compiled {library}/{pipe} in {fit_seconds(e)[1]:.0f} s")
        e["seconds"], e["fit_seconds"] = [], []
    for r, order in common.rounds(entries, repeats):
        for library, pipe in order:
            e = entries[library, pipe]
            batches, whole = fit_seconds(e)
            e["seconds"].append(batches)
            e["fit_seconds"].append(whole)
            progress(
                f"  repeat {r + 1}/{repeats} {library}/{pipe}: "
                f"{e['tokens'] / batches:.0f} real tokens/s "
                f"(batches {batches:.2f} s, whole fit {whole:.2f} s)"
            )


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--run", help="a translate_de_en run directory (its vocabulary)")
    p.add_argument("--sentences", type=int, default=1920)
    p.add_argument(
        "--batch-tokens",
        type=int,
        help="token budget of the tokens pipeline (default: the config's, else 2048)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--pipelines",
        default="bucketed,fixed,tokens",
        help="the pipelines whose contenders run (default: all)",
    )
    p.add_argument("--bf16-repeats", type=int, default=2)
    p.add_argument("--precision", default="float32,mixed_bfloat16")
    p.add_argument("--output", default="bench/results/train.json")
    args = p.parse_args()
    if args.sentences < 64 or min(args.repeats, args.bf16_repeats) < 1:
        p.error("--sentences must be at least 64 and the repeats at least 1.")
    pipes = args.pipelines.split(",")
    if set(pipes) - {"bucketed", "fixed", "tokens"}:
        p.error(f"--pipelines takes bucketed, fixed, tokens. Received: {pipes}")
    unknown = set(args.precision.split(",")) - set(CONTENDERS)
    if unknown:
        p.error(f"--precision takes {sorted(CONTENDERS)}. Received: {sorted(unknown)}")
    # Weight averaging is an optimizer option that costs both libraries the
    # same; it is left out so that the figures compare models and pipelines.
    config = load_config(CONFIG, overrides=["train.ema_momentum=null"])
    batch_tokens = args.batch_tokens or config.train.batch_tokens or 2048
    product = "tokens" if config.train.batch_tokens else "bucketed"
    if not os.path.exists(config.data.source_path.format(split="train")):
        print(f"Multi30k not found ({config.data.source_path}); nothing to measure.")
        return 0
    directory = args.run or tempfile.mkdtemp(prefix="bench-train-")
    data = build_dataset(config, directory)
    pool = subset(data.examples["train"], args.sentences)
    # The peak is measured before and after the contenders, and MFU divides
    # by the higher of the two: a peak measured while the machine was slow
    # (one run gave 98 GFLOP/s at the start, against 163 in another
    # session) would inflate MFU.
    measured = {name: [] for name in CONTENDERS}

    def measure_peaks(when):
        for name, dtype in (("float32", tf.float32), ("mixed_bfloat16", tf.bfloat16)):
            measured[name].append(matmul_peak(dtype))
        print(
            f"matmul peak (1024^3, XLA, {when}): "
            + ", ".join(f"{k} {v[-1] / 1e9:.1f} GFLOP/s" for k, v in measured.items())
        )

    measure_peaks("before")
    rows = []
    for precision in args.precision.split(","):
        print(f"{precision}:")
        entries = contenders(config, data, pool, precision, batch_tokens, pipes)
        repeats = args.repeats if precision == "float32" else args.bf16_repeats
        measure(entries, repeats)
        for (library, pipe), e in entries.items():
            seconds = e["seconds"]
            median, fastest, slowest = common.median_min_max(seconds)
            rows.append(
                dict(
                    library=library,
                    pipeline=pipe,
                    precision=precision,
                    steps=e["steps"],
                    real_tokens=e["tokens"],
                    seconds_median=median,
                    seconds=seconds,
                    fit_seconds=e["fit_seconds"],
                    tokens_per_second=e["tokens"] / median,
                    tokens_per_second_min=e["tokens"] / slowest,
                    tokens_per_second_max=e["tokens"] / fastest,
                    useful_flops=e["flops"],
                )
            )
    measure_peaks("after")
    peaks = {name: max(values) for name, values in measured.items()}
    for r in rows:
        r["mfu"] = r["useful_flops"] / r["seconds_median"] / peaks[r["precision"]]
    base = {
        r["precision"]: r
        for r in rows
        if r["library"] == "keras_hub" and r["pipeline"] == "fixed"
    }
    print(
        f"\n{'library':<20} {'pipeline':<9} {'precision':<15} "
        f"{'real tok/s (min-max)':<24} {'MFU':>6} {'vs keras-hub':>12}"
    )
    for r in rows:
        fixed = base.get(r["precision"])  # absent when --pipelines leaves it out
        r["vs_keras_hub_fixed"] = (
            r["tokens_per_second"] / fixed["tokens_per_second"] if fixed else None
        )
        spread = common.spread_text(
            r["tokens_per_second"],
            r["tokens_per_second_min"],
            r["tokens_per_second_max"],
        )
        versus = "" if fixed is None else f"{r['vs_keras_hub_fixed']:>11.2f}x"
        print(
            f"{r['library']:<20} {r['pipeline']:<9} {r['precision']:<15} "
            f"{spread:<24} {r['mfu']:>6.1%} {versus}"
        )
    result = dict(
        sentences=args.sentences,
        repeats=args.repeats,
        batch_size=config.train.batch_size,
        batch_tokens=batch_tokens,
        token_batch_sizes=list(
            pipeline.token_batch_sizes(data.bucket_lengths, batch_tokens)
        ),
        product_pipeline=product,
        bucket_lengths=list(data.bucket_lengths),
        max_length=config.data.max_length,
        sizes=get_task(config.task).model_sizes(config.model),
        matmul_peak_flops=peaks,
        matmul_peak_flops_before_after=measured,
        rows=rows,
    )
    common.write_result(args.output, result)
    print(headline(rows, product))
    other = "bucketed" if product == "tokens" else "tokens"
    print(f"  ({other} pipeline: {headline(rows, other).split(': ', 1)[1]})")
    shipped = headline(rows, "bucketed", ours="tfformer_ffn_dropout")
    print(f"  (with the FFN's hidden dropout: {shipped.split(': ', 1)[1]})")
    return 0


def headline(rows, pipe="bucketed", ours="tfformer"):
    """Library against library: both models on pipeline `pipe`, float32, with
    the same dropout (`ours`: the tfformer row); and tfformer's MFU there."""
    by = {(r["library"], r["pipeline"], r["precision"]): r for r in rows}
    ours = by.get((ours, pipe, "float32"))
    theirs = by.get(("keras_hub", pipe, "float32"))
    if ours is None or theirs is None:
        return "same pipeline: not measured (needs both libraries' float32 rows)"
    ratio = ours["tokens_per_second"] / theirs["tokens_per_second"]
    return f"same pipeline: tfformer/keras-hub {ratio:.2f}x; MFU {ours['mfu']:.1%}"


if __name__ == "__main__":
    sys.exit(main())
