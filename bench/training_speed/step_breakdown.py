"""Where the training step's time goes: the seq2seq model of `translate_de_en`
(3+3 layers, d_model 256, 8 heads, FFN 1024) on the bucketed pipeline,
timed with one part of the step removed or changed at a time (ablation).

On CPU, XLA compiles the whole step into one program, so a profiler sees one
op; each row here instead removes one kind of work and reports how much
faster the step gets. Rows:

- full: the step `bench/training_speed/train.py` times (Adam, dropout 0.1,
  label smoothing).
- no dropout: `model.dropout=0` (no random numbers, no masks).
- fused QKV: one query/key/value matrix in every self-attention.
- 16-bit dropout draws: each 32-bit random number draws two masks, one per
  half (half as many Threefry draws; keep probability 1 - ceil(65536 rate) /
  65536 instead of 1 - rate; timing only, not what tfformer ships).
- SGD: plain SGD instead of Adam (what Adam's moment updates cost).
- no LayerNorm: every LayerNorm returns its input (timing only).
- forward+backward: gradients computed, not applied (no optimizer).
- forward: the training-mode forward pass and the loss only.
- matmul floor: the step's matmul FLOPs (padded shapes, 3x forward) at the
  measured float32 matmul peak.

Contenders alternate (repeat r in order, r + 1 reversed); medians and
(min-max) of seconds per pass over the same cached batches.

Usage: `python -m bench.training_speed.step_breakdown [--run DIR] [--sentences 960]
[--repeats 3] [--variants full,...] [--output bench/results/step_breakdown.json]`
"""

import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf

from bench import common
from bench.callbacks import BatchClock
from bench.training_speed.train import (
    CONFIG,
    bucketed,
    cached,
    matmul_peak,
    subset,
    training_flops,
)
from tfformer.layers import dropout as dropout_module
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task
from tfformer.training.trainer import build_dataset, compile_model

VARIANTS = (
    "full",
    "no dropout",
    "fused QKV",
    "16-bit dropout draws",
    "SGD",
    "no LayerNorm",
    "forward+backward",
    "forward",
)


def build(config, data, *, dropout=None, fused_qkv=False):
    """The task's model (`Task.build_model`), with `model.dropout` and the
    builder's `fused_qkv` set."""
    import tfformer.models as models

    if dropout is not None:
        config = dataclasses.replace(
            config, model=dataclasses.replace(config.model, dropout=dropout)
        )
    original = models.from_preset
    models.from_preset = lambda *a, **k: original(*a, fused_qkv=fused_qkv, **k)
    try:
        keras.utils.set_random_seed(0)
        return get_task(config.task).build_model(config, data)
    finally:
        models.from_preset = original


def identity_layer_norms(model):
    """Every LayerNorm returns its input (the step without their work)."""
    count = 0
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, LayerNormalization):
            layer.call = lambda inputs, *args, **kwargs: inputs
            count += 1
    if not count:
        raise RuntimeError("no LayerNormalization found: the ablation is void")
    return model


HALF_DRAW_CALLS = []


def _half_draw_dropout_call(self, inputs, training=False):
    """tfformer's Dropout with two 16-bit draws from each 32-bit number."""
    if not training or self.rate <= 0:
        return inputs
    HALF_DRAW_CALLS.append(self.name)
    seed = self.seed_generator.next()
    seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    algorithm = "threefry" if dropout_module.in_xla_compilation() else "philox"
    count = tf.size(inputs)
    bits = tf.random.stateless_uniform(
        [(count + 1) // 2],
        seed,
        minval=None,
        maxval=None,
        dtype=tf.uint32,
        alg=algorithm,
    )
    halves = tf.stack(
        [tf.bitwise.bitwise_and(bits, 0xFFFF), tf.bitwise.right_shift(bits, 16)], 1
    )
    halves = tf.reshape(halves, [-1])[:count]
    threshold = int(-(-self.rate * 65536 // 1))
    keep = tf.reshape(halves >= threshold, tf.shape(inputs))
    scaled = inputs / tf.cast(1.0 - self.rate, inputs.dtype)
    return tf.where(keep, scaled, tf.zeros_like(inputs))


@contextlib.contextmanager
def half_draw_dropout():
    """While a variant traces: tfformer's Dropout draws 16-bit numbers."""
    shipped = dropout_module.Dropout.call
    dropout_module.Dropout.call = _half_draw_dropout_call
    try:
        yield
    finally:
        dropout_module.Dropout.call = shipped


TRACE_PATCHES = {"16-bit dropout draws": half_draw_dropout}


def fit_variant(model, config, optimizer=None):
    """`model.fit` as the trainer compiles it (loss and metrics), optionally
    with another optimizer; timed over one pass like bench/training_speed/train.py."""
    model = compile_model(model, config)
    if optimizer is not None:
        model.compile(
            optimizer=optimizer,
            jit_compile=True,
            steps_per_execution=config.train.steps_per_execution,
            **get_task(config.task).compile_arguments(config),
        )

    def one_pass(make):
        clock = BatchClock()
        model.fit(make(), epochs=1, verbose=0, callbacks=[clock])
        return clock.seconds()

    return one_pass


def function_variant(model, config, backward):
    """A jitted forward (+ backward) over each batch, timed like `fit`: from
    the end of the first batch to the end of the last."""
    loss_fn = compile_model(model, config).loss

    @tf.function(jit_compile=True, reduce_retracing=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if not backward:
            return loss
        grads = tape.gradient(loss, model.trainable_variables)
        return loss + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0

    def one_pass(make):
        ends = []
        for x, y in make():
            step(x, y).numpy()
            ends.append(time.perf_counter())
        return ends[-1] - ends[0]

    return one_pass


def padded_flops(batches_shapes, sizes, vocabulary):
    """3x the forward matmul FLOPs of the padded batches (all rows full)."""
    total = 0.0
    for batch, source_length, target_length in batches_shapes:
        total += training_flops(
            [source_length] * batch, [target_length] * batch, sizes, vocabulary
        )
    return total


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--run", help="a translate_de_en run directory (its vocabulary)")
    p.add_argument("--sentences", type=int, default=960)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated subset of the variants (full is always run)",
    )
    p.add_argument("--output", default="bench/results/step_breakdown.json")
    args = p.parse_args()
    chosen = ["full"] + [
        v.strip() for v in args.variants.split(",") if v.strip() not in ("", "full")
    ]
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        p.error(f"--variants: unknown {unknown}; known: {list(VARIANTS)}")
    config = load_config(CONFIG, overrides=["train.ema_momentum=null"])
    if not os.path.exists(config.data.source_path.format(split="train")):
        print(f"Multi30k not found ({config.data.source_path}); nothing to measure.")
        return 0
    data = build_dataset(
        config, args.run or tempfile.mkdtemp(prefix="bench-breakdown-")
    )
    pool = subset(data.examples["train"], args.sentences)
    dataset, steps = bucketed(pool, data, config.train.batch_size)
    make, _, _ = cached(dataset, steps)
    shapes = [
        (
            int(x["encoder_token_ids"].shape[0]),
            x["encoder_token_ids"].shape[1],
            x["decoder_token_ids"].shape[1],
        )
        for x, _ in list(make())[1:]
    ]
    sizes = get_task(config.task).model_sizes(config.model)
    vocabulary = data.tokenizers["target"].vocabulary_size
    peak = matmul_peak(tf.float32)
    floor = padded_flops(shapes, sizes, vocabulary) / peak
    print(f"matmul peak {peak / 1e9:.1f} GFLOP/s; {steps} batches per pass")

    makers = {
        "full": lambda: fit_variant(build(config, data), config),
        "no dropout": lambda: fit_variant(build(config, data, dropout=0.0), config),
        "fused QKV": lambda: fit_variant(build(config, data, fused_qkv=True), config),
        "16-bit dropout draws": lambda: fit_variant(build(config, data), config),
        "SGD": lambda: fit_variant(
            build(config, data), config, keras.optimizers.SGD(1e-3)
        ),
        "no LayerNorm": lambda: fit_variant(
            identity_layer_norms(build(config, data)), config
        ),
        "forward+backward": lambda: function_variant(build(config, data), config, True),
        "forward": lambda: function_variant(build(config, data), config, False),
    }
    runners = {name: makers[name]() for name in VARIANTS if name in chosen}
    seconds = {name: [] for name in runners}
    for name, run in runners.items():
        began = time.perf_counter()
        with TRACE_PATCHES.get(name, contextlib.nullcontext)():
            run(make)  # compiles every bucket shape
        if name in TRACE_PATCHES and not HALF_DRAW_CALLS:
            sys.exit(f"{name}: the patched Dropout never ran while tracing")
        print(f"  compiled {name} in {time.perf_counter() - began:.0f} s", flush=True)
    for r, names in common.rounds(runners, args.repeats):
        for name in names:
            seconds[name].append(runners[name](make))
            print(f"  repeat {r + 1} {name}: {seconds[name][-1]:.2f} s", flush=True)

    full = statistics.median(seconds["full"])
    rows = []
    print(f"\n{'variant':<18} {'s/pass (min-max)':<22} {'vs full':>8} {'saved':>7}")
    for name in runners:
        median, fastest, slowest = common.median_min_max(seconds[name])
        rows.append(
            dict(
                variant=name,
                seconds=seconds[name],
                seconds_median=median,
                vs_full=median / full,
                share_removed=1 - median / full,
            )
        )
        spread = common.spread_text(median, fastest, slowest, digits=2)
        ratio = median / full
        print(f"{name:<18} {spread:<22} {ratio:>7.2f}x {1 - ratio:>6.1%}")
    print(f"{'matmul floor':<18} {floor:<22.2f} {floor / full:>7.2f}x")
    result = dict(
        sentences=args.sentences,
        batches_timed=len(shapes),
        batch_shapes=shapes,
        sizes=sizes,
        matmul_peak_flops=peak,
        matmul_floor_seconds=floor,
        rows=rows,
    )
    common.write_result(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
