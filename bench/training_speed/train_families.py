"""Training speed of the GPT and BERT families: tfformer's models against
keras-hub's backbones of the same sizes, on the same batches.

- gpt: the `shakespeare_gpt` config (bytes, windows of 128 tokens, batch 32;
  4 layers, d_model 256, 4 heads, FFN 1024, dropout 0.1). tfformer: the
  config's `gpt_decoder`. keras-hub: `keras_hub.models.GPT2Backbone` of the
  same sizes with its tied output projection (`token_embedding(...,
  reverse=True)`, as `GPT2CausalLM`).
- bert: the `polarity_bert` config (WordPiece 8,000, lengths bucketed to 16 /
  32 / 64, batch 32; `bert_tiny`: 2 layers, d_model 128, 2 heads, FFN 512,
  dropout 0.1). tfformer: `bert_classifier` on the config's `bert_encoder`.
  keras-hub: `keras_hub.models.BertBackbone` of the same sizes, its pooled
  output, dropout and a Dense layer (as `BertTextClassifier`).

Library against library: both models train on the same cached batches of
tfformer's pipeline (`training_stream`), with the config's optimizer,
schedule and loss (`compile_model`), under XLA, no weight averaging; each
library keeps its own architecture details (keras-hub's GELU, its
`keras.layers.Dropout`). keras-hub's padding mask is `token_ids != 0`.
Same model: keras-hub's blocks (and GPT-2's and BERT's) do not drop the
feed-forward network's hidden activations, and GPT2Backbone and
BertBackbone both build their blocks with the tanh GELU
(`keras_hub.src.utils.keras_utils.gelu_approximate`); "tfformer" runs with
`model.activation_dropout=0.0` and `model.activation=gelu_approximate` to
match. "tfformer_ffn_dropout" is the config as it trains (hidden dropout
at `dropout`, the presets' exact GELU).
Each contender compiles on one pass over the batches, then the two
alternate (the order reversed every other repeat), one `fit` pass per
repeat, timed from the end of its first batch to the end of its last.
Reported: medians and (min-max) of real (non-padding) input tokens per
second, the ratio of the medians, and each contender's MFU: the useful
training FLOPs of the real tokens (`family_flops`) per second over the
float32 matmul peak (`train.matmul_peak`, measured before and after the
family's contenders; MFU divides by the higher), and each contender's share
of the step's matmul floor at its real shapes (`linear_twin`: the same
matmuls, forward and backward, and nothing else).

Usage: `python -m bench.training_speed.train_families [--families gpt,bert]
[--batches 30] [--repeats 5] [--output bench/results/train_families.json]`
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
from bench.peers import bert_text_classifier, gpt2_language_model
from bench.training_speed.train import batches_dataset, matmul_peak
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task
from tfformer.training.trainer import build_dataset, build_model, compile_model

CONFIGS = {
    "gpt": os.path.join("training", "configs", "shakespeare_gpt.json"),
    "bert": os.path.join("training", "configs", "polarity_bert.yaml"),
}


def family_flops(family, lengths, sizes, vocabulary):
    """Useful training FLOPs of rows of real lengths `lengths`: 3x forward,
    forward = 2x the multiply-adds of every matmul, attention counted in full
    (not causal), as train.py's `training_flops` counts them. GPT: the
    blocks and the tied output projection over the vocabulary. BERT: the
    blocks, the pooler (d x d) and the classifier (on one token per row, so
    left out: under 0.1 % here)."""
    t = np.asarray(lengths, np.float64)
    d, ff = sizes["hidden_dim"], sizes["intermediate_dim"]
    blocks = sizes["num_layers"] * (t * (4 * d * d + 2 * d * ff) + 2 * t * t * d)
    if family == "gpt":
        head = t * d * vocabulary
    else:
        head = np.full_like(t, d * d)
    return float(np.sum(3 * 2 * (blocks + head)))


def linear_twin(family, sizes, vocabulary, shape, seed=0):
    """An XLA-compiled forward and backward pass that does only the matmuls
    of a training step of `shape` (batch, length): the family's dense
    layers, attention scores and values (full, per head) and, for GPT, the
    output projection, with no softmax, normalization, activation, dropout,
    loss or optimizer. The gradients of every weight and of the input are
    computed (the backward pass's two matmuls per forward one), so the time
    of one call is the step's matmul floor at its real shapes."""
    batch, length = shape
    d, ff, heads = sizes["hidden_dim"], sizes["intermediate_dim"], sizes["num_heads"]
    rng = np.random.default_rng(seed)

    def weight(rows, columns):
        values = rng.normal(0, rows**-0.5, (rows, columns)).astype("float32")
        return tf.Variable(values)

    layers = [
        [weight(d, d) for _ in range(4)] + [weight(d, ff), weight(ff, d)]
        for _ in range(sizes["num_layers"])
    ]
    head = weight(d, vocabulary if family == "gpt" else d)
    variables = [w for layer in layers for w in layer] + [head]
    x = tf.constant(rng.normal(size=(batch, length, d)).astype("float32"))
    # A random cotangent for the output, so that XLA cannot simplify the
    # backward pass of a plain sum.
    out_shape = (batch, length) if family == "gpt" else (batch,)
    cotangent = tf.constant(
        rng.normal(size=(*out_shape, head.shape[1])).astype("float32")
    )

    def split(t):
        return tf.transpose(tf.reshape(t, (batch, length, heads, -1)), (0, 2, 1, 3))

    def forward(x):
        for wq, wk, wv, wo, w1, w2 in layers:
            q, k, v = (split(x @ w) for w in (wq, wk, wv))
            scores = tf.matmul(q, k, transpose_b=True) * (1.0 / length)
            context = tf.transpose(scores @ v, (0, 2, 1, 3))
            x = tf.reshape(context, (batch, length, d)) @ wo
            x = (x @ w1) @ w2
        return tf.reduce_sum(((x if family == "gpt" else x[:, 0]) @ head) * cotangent)

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = forward(x)
        grads = tape.gradient(loss, [x, *variables])
        # Every gradient is read whole, so none of its matmuls can be cut.
        return loss + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0

    return lambda: step(x).numpy()


def matmul_floor(family, cache, sizes, vocabulary, repeats=9):
    """Seconds of the linear twins (`linear_twin`) of batches 2..N: the
    median of `repeats` calls per batch shape, summed over the batches."""
    shapes = [tuple(b[0]["token_ids"].shape) for b in cache[1:]]
    seconds = {}
    for shape in sorted(set(shapes)):
        run = linear_twin(family, sizes, vocabulary, shape)
        run()  # compiles
        seconds[shape] = statistics.median(common.call_seconds(run, repeats))
    return sum(seconds[shape] for shape in shapes)


def cached_batches(config, family, batches):
    """The data of `config` (a GPT or BERT config), its first `batches`
    training batches held in memory, and the real lengths of the rows of
    batches 2..N (the clock starts at the end of batch 1)."""
    task = get_task(config.task)
    data = build_dataset(config, tempfile.mkdtemp(prefix=f"bench-{family}-"))
    stream = task.training_stream(
        data.examples["train"],
        batch_size=config.train.batch_size,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=batches,
        seed=0,
    )
    cache = list(stream.take(batches))
    if len(cache) < batches:
        raise ValueError(f"--batches {batches}: the data gives {len(cache)}.")
    lengths = np.concatenate(
        [np.sum(b[0]["token_ids"].numpy() != 0, axis=1) for b in cache[1:]]
    )
    return data, cache, lengths


def contenders(family, batches, with_floor=True):
    """The config, its two compiled models, the cached batches, their real
    tokens and useful FLOPs, and (`with_floor`) their matmul floor's seconds."""
    config = load_config(CONFIGS[family], overrides=["train.ema_momentum=null"])
    sizes = get_task(config.task).model_sizes(config.model)
    data, cache, lengths = cached_batches(config, family, batches)
    vocabulary = data.tokenizers["text"].vocabulary_size
    length = config.data.max_length
    # keras-hub's model: no hidden dropout in the FFN, and its tanh GELU.
    same_model = dataclasses.replace(
        config,
        model=dataclasses.replace(
            config.model, activation_dropout=0.0, activation="gelu_approximate"
        ),
    )
    models = {}
    for library in ("tfformer", "keras_hub", "tfformer_ffn_dropout"):
        keras.utils.set_random_seed(0)
        if library == "tfformer":
            model = build_model(same_model, data)
        elif library == "tfformer_ffn_dropout":
            model = build_model(config, data)
        elif family == "gpt":
            model = gpt2_language_model(sizes, vocabulary, length)
        else:
            model = bert_text_classifier(sizes, vocabulary, length, data.num_classes)
        models[library] = compile_model(model, config)
    # Useful training FLOPs of the real tokens of batches 2..N.
    flops = family_flops(family, lengths, sizes, vocabulary)
    floor = matmul_floor(family, cache, sizes, vocabulary) if with_floor else None
    return config, sizes, models, cache, int(lengths.sum()), flops, floor


def one_pass(model, cache):
    clock = BatchClock()
    model.fit(batches_dataset(cache), epochs=1, verbose=0, callbacks=[clock])
    return clock.seconds()


def measure(family, batches, repeats):
    config, sizes, models, cache, tokens, flops, floor = contenders(family, batches)
    peaks = [matmul_peak(tf.float32)]
    for library, model in models.items():
        _, seconds = common.timed(one_pass, model, cache)
        print(f"  {family}: compiled {library} in {seconds:.0f} s")
    seconds = {library: [] for library in models}
    for r, order in common.rounds(models, repeats):
        for library in order:
            seconds[library].append(one_pass(models[library], cache))
            print(
                f"  {family} repeat {r + 1}/{repeats} {library}: "
                f"{tokens / seconds[library][-1]:.0f} real tokens/s"
            )
    peaks.append(matmul_peak(tf.float32))
    rows = []
    for library, values in seconds.items():
        median, fastest, slowest = common.median_min_max(values)
        rows.append(
            dict(
                family=family,
                library=library,
                parameters=models[library].count_params(),
                seconds=values,
                tokens_per_second=tokens / median,
                tokens_per_second_min=tokens / slowest,
                tokens_per_second_max=tokens / fastest,
                mfu=flops / median / max(peaks),
                share_of_matmul_floor=floor / median,
            )
        )
    speed = {row["library"]: row["tokens_per_second"] for row in rows}
    return dict(
        family=family,
        config=CONFIGS[family],
        batch_size=config.train.batch_size,
        bucket_lengths=list(config.data.bucket_lengths) or [config.data.max_length],
        sizes=sizes,
        timed_batches=batches - 1,
        real_tokens=tokens,
        useful_flops=flops,
        matmul_peak_flops=peaks,
        matmul_floor_seconds=floor,
        rows=rows,
        tfformer_over_keras_hub=speed["tfformer"] / speed["keras_hub"],
        tfformer_ffn_dropout_over_keras_hub=(
            speed["tfformer_ffn_dropout"] / speed["keras_hub"]
        ),
    )


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--families", default="gpt,bert")
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--output", default="bench/results/train_families.json")
    args = p.parse_args()
    families = args.families.split(",")
    unknown = set(families) - set(CONFIGS)
    if unknown:
        p.error(f"--families takes {sorted(CONFIGS)}. Received: {sorted(unknown)}")
    if args.batches < 3 or args.repeats < 1:
        p.error("--batches must be at least 3 and --repeats at least 1.")
    results = []
    for family in families:
        results.append(measure(family, args.batches, args.repeats))
    print(f"\n{'family':<7}{'library':<21}{'params':>10}  real tok/s (min-max)   MFU")
    for result in results:
        for r in result["rows"]:
            spread = common.spread_text(
                r["tokens_per_second"],
                r["tokens_per_second_min"],
                r["tokens_per_second_max"],
            )
            print(
                f"{r['family']:<7}{r['library']:<21}{r['parameters']:>10,}  "
                f"{spread}   {r['mfu']:.1%}   {r['share_of_matmul_floor']:.0%}"
            )
    common.write_result(args.output, dict(families=results))
    for result in results:
        print(
            f"{result['family']}: tfformer/keras-hub "
            f"{result['tfformer_over_keras_hub']:.2f}x (same model); with the "
            f"FFN's hidden dropout {result['tfformer_ffn_dropout_over_keras_hub']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
