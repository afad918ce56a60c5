"""How fast XLA runs each kind of matmul in the GPT training step, on its own.

bench/training_speed/train_families.py's GPT step (the `shakespeare_gpt` config's sizes:
batch 32, 128 tokens, width 256, 4 heads of 64, FFN 1024, byte vocabulary) spends
about two thirds of its thunk time in matmuls (BENCHMARKS.md, "where the XLA
steps' time goes"). This script times each kind alone, forward and backward
under XLA (float32), at the step's shapes:

- projection: (B*S, d) x (d, d), one of attention's four;
- ffn up / ffn down: (B*S, d) x (d, ff) and (B*S, ff) x (ff, d);
- output: (B*S, d) x (d, vocab), the tied output projection;
- attention: the two batched matmuls of one self-attention,
  softmax's place taken by nothing (scores straight into the values' matmul),
  in tfformer's head-first layout `(B, H, S, d)` and in the token-major
  layout `(B, S, H, d)` that a projection's reshape gives without a
  transpose (XLA then picks the layout it wants).

Each kind backpropagates a fixed random cotangent and returns its output and
every gradient whole, so XLA cannot drop a matmul (without the output, the
forward matmul of a linear map is dead code). FLOPs count 3x the forward's
2 x multiply-adds. Kinds alternate (repeat r in order, r + 1 reversed);
medians and (min-max) over repeats, each repeat the median of `--calls`
calls. The last block estimates one step's matmul time from the rates, and
what it would be if attention's batched matmuls ran at the dense rate.

Usage: `python -m bench.training_speed.matmul_shapes [--repeats 7] [--calls 10]
[--output bench/results/matmul_shapes.json]`
"""

import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from bench import common
from bench.training_speed.train import matmul_peak
from bench.training_speed.train_families import CONFIGS
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task


def gpt_sizes():
    """The step's sizes, read from train_families.py's GPT config (its byte
    tokenizer's vocabulary: 256 bytes and the reserved tokens)."""
    config = load_config(CONFIGS["gpt"])
    if config.data.tokenizer != "byte":
        raise ValueError(
            f"{CONFIGS['gpt']}: expected the byte tokenizer. "
            f"Received: data.tokenizer={config.data.tokenizer!r}"
        )
    sizes = get_task(config.task).model_sizes(config.model)
    return dict(
        batch=config.train.batch_size,
        length=config.data.max_length,
        width=sizes["hidden_dim"],
        heads=sizes["num_heads"],
        ffn=sizes["intermediate_dim"],
        layers=sizes["num_layers"],
        vocabulary=ByteTokenizer.vocabulary_size,
    )


def kinds(s):
    """name -> (function of the operands, operand shapes, forward FLOPs, count
    per step) at the sizes `s` (`gpt_sizes`)."""
    b, n, d, h, f, v = (
        s[k] for k in ("batch", "length", "width", "heads", "ffn", "vocabulary")
    )
    layers, tokens, head = s["layers"], b * n, d // h

    def dense(x, w):
        return tf.matmul(x, w)

    def heads_first(q, k, v):
        scores = tf.einsum("bhtd,bhsd->bhts", q, k)
        return tf.einsum("bhts,bhsd->bhtd", scores, v)

    def token_major(q, k, v):
        scores = tf.einsum("bthd,bshd->bhts", q, k)
        return tf.einsum("bhts,bshd->bthd", scores, v)

    attention_flops = 2 * 2 * b * h * n * n * head
    return {
        "projection": (dense, [(tokens, d), (d, d)], 2 * tokens * d * d, 4 * layers),
        "ffn up": (dense, [(tokens, d), (d, f)], 2 * tokens * d * f, layers),
        "ffn down": (dense, [(tokens, f), (f, d)], 2 * tokens * f * d, layers),
        "output": (dense, [(tokens, d), (d, v)], 2 * tokens * d * v, 1),
        "attention, heads first": (
            heads_first,
            [(b, h, n, head)] * 3,
            attention_flops,
            layers,
        ),
        "attention, token-major": (
            token_major,
            [(b, n, h, head)] * 3,
            attention_flops,
            0,  # an alternative layout, not in the step
        ),
    }


def compiled(function, shapes, seed):
    """An XLA step: forward, backward with a fixed random cotangent, the
    output and every gradient returned whole."""
    generator = tf.random.Generator.from_seed(seed)
    operands = [tf.Variable(generator.normal(shape)) for shape in shapes]
    output_shape = function(*operands).shape
    cotangent = tf.constant(generator.normal(output_shape))

    @tf.function(jit_compile=True)
    def step():
        with tf.GradientTape() as tape:
            out = function(*operands)
        # The output too: a linear map's gradients do not need it, so XLA
        # would drop the forward matmul.
        return [out, *tape.gradient(out, operands, output_gradients=cotangent)]

    return step


def seconds_per_call(step, calls):
    def call():
        for gradient in step():
            gradient.numpy()

    return statistics.median(common.call_seconds(call, calls))


def main(argv=None):
    parser = common.argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--output", default="bench/results/matmul_shapes.json")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.calls < 1:
        parser.error(
            f"--repeats and --calls must be >= 1; received {args.repeats}, {args.calls}"
        )

    peak_before = matmul_peak(tf.float32)
    sizes = gpt_sizes()
    table = kinds(sizes)
    steps = {}
    for i, (name, (function, shapes, _, _)) in enumerate(table.items()):
        steps[name] = compiled(function, shapes, seed=i)
        for gradient in steps[name]():  # compile
            gradient.numpy()
    times = {name: [] for name in table}
    for r, order in common.rounds(table, args.repeats):
        for name in order:
            times[name].append(seconds_per_call(steps[name], args.calls))
        print(f"repeat {r + 1}/{args.repeats}", file=sys.stderr)
    peak_after = matmul_peak(tf.float32)
    peak = max(peak_before, peak_after)

    rows = []
    for name, (_, shapes, forward, count) in table.items():
        flops = 3 * forward
        median, fastest, slowest = common.median_min_max(times[name])
        rows.append(
            dict(
                kind=name,
                shapes=shapes,
                training_flops=flops,
                per_step=count,
                ms_median=1e3 * median,
                ms_min=1e3 * fastest,
                ms_max=1e3 * slowest,
                gflops=flops / median / 1e9,
                share_of_peak=flops / median / peak,
            )
        )
    by = {row["kind"]: row for row in rows}
    step_ms = sum(row["per_step"] * row["ms_median"] for row in rows)
    dense_rate = sum(
        by[k]["per_step"] * by[k]["training_flops"]
        for k in ("projection", "ffn up", "ffn down")
    ) / sum(
        by[k]["per_step"] * by[k]["ms_median"] / 1e3
        for k in ("projection", "ffn up", "ffn down")
    )
    attention = by["attention, heads first"]
    at_dense_rate = attention["training_flops"] / dense_rate * 1e3
    saved = attention["per_step"] * (attention["ms_median"] - at_dense_rate)
    estimate = dict(
        matmul_ms_per_step=step_ms,
        attention_ms_per_step=attention["per_step"] * attention["ms_median"],
        dense_gflops=dense_rate / 1e9,
        attention_at_dense_rate_saves_ms=saved,
        attention_at_dense_rate_saves_share=saved / step_ms,
    )
    for row in rows:
        print(
            f"{row['kind']:24s} {row['ms_median']:7.2f} ms "
            f"({row['ms_min']:.2f}-{row['ms_max']:.2f})  "
            f"{row['gflops']:6.1f} GFLOP/s  {row['share_of_peak']:.0%} of peak"
        )
    print(
        f"one step's matmuls: {step_ms:.0f} ms, attention's "
        f"{estimate['attention_ms_per_step']:.0f} ms; "
        f"at the dense rate ({estimate['dense_gflops']:.0f} GFLOP/s) attention "
        f"would save {saved:.0f} ms ({saved / step_ms:.1%} of the matmul time)"
    )
    common.write_result(
        args.output,
        dict(
            sizes=sizes,
            repeats=args.repeats,
            calls=args.calls,
            matmul_peak_gflops=dict(before=peak_before / 1e9, after=peak_after / 1e9),
            rows=rows,
            estimate=estimate,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
