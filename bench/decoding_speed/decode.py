"""Decoding speed: tfformer's KV cache vs prefix recompute vs keras-hub's cache.

All three decode greedily, 64 new tokens per sequence, with encoder-decoder
models of the same size (default: 3+3 layers, d_model 256, 8 heads, FFN
1024, vocabulary 8000, source length 32), each inside one `tf.while_loop`.
The end token is set outside the vocabulary, so every run generates exactly
64 tokens.

- tfformer: `tfformer.decoding.Generator`; the encoder and the cross-attention
  keys/values once per source, one decoder step per token over the cache.
- prefix recompute: the method of the TensorFlow tutorial and the keras.io
  translation example: the whole model (encoder included) runs on the full
  target buffer for every new token.
- keras-hub: `keras_hub.layers.TransformerEncoder` / `TransformerDecoder` with
  their self-attention and cross-attention caches (cross cache computed at
  step 0, reused after), the best cached path keras-hub offers.
- weight-streaming floor (a reference, not a decoder): per token, only the
  matrix-vector products over the float32 weights that a cached decoder step
  must read (each decoder layer's self-attention Q/K/V/O, cross-attention
  Q/O and feed-forward kernels, then the tied output projection and an
  argmax), with no attention, normalization or softmax. At batch 1 that is
  ~19 MB of weights per token, more than this machine's caches hold, so
  no float32 cached decoder on the same machine can be much faster. Its
  ratio to prefix recompute is the ceiling for the cached ratios. Its cross
  caches are random numbers; `weight_floor_with_encoder` does the encoder's
  matmuls over the source and the cross-attention key/value projections
  instead, as every timed decoder does before its first token.

Each runs as an XLA-compiled and as a plain-graph `tf.function`; ratios use
the faster mode of each. Contenders alternate within each repeat; the
figures are medians with min and max.

Usage: `python -m bench.decoding_speed.decode [--repeats 5] [--batches 1,32]
[--vocabulary 8000] [--output FILE]`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bench import common
from bench.peers import seq2seq_for_sizes
from tfformer.decoding import Generator
from tfformer.decoding.sampling import greedy_choice
from tfformer.models import transformer_seq2seq

START = 2


def default_sizes(vocabulary=8000):
    """The benchmark model: translate_de_en.json's transformer_small."""
    return dict(
        layers=3,
        hidden_dim=256,
        heads=8,
        intermediate_dim=1024,
        vocabulary=vocabulary,
        source_length=32,
        new_tokens=64,
        max_length=128,
    )


def build_tfformer(sizes):
    return transformer_seq2seq(
        sizes["vocabulary"],
        sizes["vocabulary"],
        num_encoder_layers=sizes["layers"],
        num_decoder_layers=sizes["layers"],
        hidden_dim=sizes["hidden_dim"],
        num_heads=sizes["heads"],
        intermediate_dim=sizes["intermediate_dim"],
        dropout=0.0,
        max_sequence_length=sizes["max_length"],
    )


def tfformer_decoder(model, sizes, jit_compile):
    generator = Generator(
        model,
        max_length=sizes["new_tokens"] + 1,
        start_id=START,
        end_id=sizes["vocabulary"],  # never generated: always 64 new tokens
    )
    compiled = generator.compiled(jit_compile=jit_compile)
    return lambda source: compiled(source)["token_ids"]


def prefix_recompute_decoder(model, sizes, jit_compile):
    length = sizes["new_tokens"] + 1

    def decode(source):
        batch = tf.shape(source)[0]
        tokens = tf.concat(
            [tf.fill([batch, 1], START), tf.zeros([batch, length - 1], tf.int32)], 1
        )

        def body(i, tokens):
            logits = model(
                {"encoder_token_ids": source, "decoder_token_ids": tokens},
                training=False,
            )
            next_ids = tf.argmax(logits[:, i], -1, output_type=tf.int32)
            hot = tf.cast(tf.range(length)[None, :] == i + 1, tf.int32)
            return i + 1, tokens + hot * next_ids[:, None]

        _, tokens = tf.while_loop(
            lambda i, t: i < length - 1, body, (tf.constant(0), tokens)
        )
        return tokens

    return tf.function(decode, jit_compile=jit_compile, autograph=False)


STAGES = ("bias", "layer_norm", "self_attention", "cross_attention", "log_softmax")


def weight_floor_decoder(model, sizes, jit_compile=True, stages=(), encoder=False):
    """Reads every weight a cached step reads, once per token, and by default
    nothing else: the weight-streaming floor.

    Without `encoder` (the floor of every table before stop 37) the cross
    caches are random numbers drawn once per decode: that leaves out the
    encoder pass that every timed decoder makes (at batch 32 the floor with
    the encoder is about 1.2x slower). With `encoder` the floor first does, once
    per source, the matmuls that every cached decode of a source must do
    before its first token: each encoder layer's projections and
    feed-forward over the source tokens, then each decoder layer's
    cross-attention key and value projections, which become the
    cross-attention caches.

    `stages` (names from STAGES) add, one by one, the rest of a decoder
    step's math, written by hand with the model's weights: the biases; the
    LayerNorms; self-attention over a `(batch, 2, heads, max_length, d)` cache
    written at each step and masked to the written slots; cross-attention
    over a fixed cache (no mask); log-softmax and the Generator's greedy
    choice (padding ruled out) instead of argmax.
    With all stages it is a minimal cached step: no position encoding, no
    source padding mask, no score or end-of-sequence bookkeeping.

    tanh stands in for the attention the floor leaves out, so XLA cannot
    re-associate a chain of products into one loop-invariant matrix; the
    next input is the embedding row of the chosen token, so steps depend on
    each other as decoding steps do.
    """
    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"stages must come from {STAGES}. Received: {unknown}")
    names = (
        "self_attention/query",
        "self_attention/key",
        "self_attention/value",
        "self_attention/attention_output",
        "cross_attention/query",
        "cross_attention/key",
        "cross_attention/value",
        "cross_attention/attention_output",
        "ffn/intermediate",
        "ffn/output",
        "self_attention_norm",
        "cross_attention_norm",
        "ffn_norm",
    )

    backbone = model.backbone

    def block_weights(block):
        # Paths relative to the block: "self_attention/query/kernel".
        return {w.path.split(f"{block.name}/", 1)[1]: w for w in block.weights}

    layers = []
    for block in backbone.decoder_blocks:
        weights = block_weights(block)
        layer = {}
        for name in names:
            prefix = f"{name}/"
            if name.endswith("_norm"):
                layer[name] = (weights[prefix + "gamma"], weights[prefix + "beta"])
            else:
                layer[name] = (weights[prefix + "kernel"], weights[prefix + "bias"])
        layers.append(layer)
    embedding = backbone.decoder_embedding.token_embeddings
    source_embedding = backbone.encoder_embedding.token_embeddings
    encoder_layers = []
    for block in backbone.encoder_blocks:
        weights = block_weights(block)
        encoder_layers.append(
            {
                name: weights[f"{name}/kernel"]
                for name in (
                    "self_attention/query",
                    "self_attention/key",
                    "self_attention/value",
                    "self_attention/attention_output",
                    "ffn/intermediate",
                    "ffn/output",
                )
            }
        )
    cross_kernels = [
        [layer[f"cross_attention/{n}"][0] for n in ("key", "value")] for layer in layers
    ]
    length = sizes["new_tokens"] + 1
    heads = sizes["heads"]
    head_dim = sizes["hidden_dim"] // heads

    def dense(layer, name, x):
        kernel, bias = layer[name]
        y = tf.matmul(x, kernel)
        return y + bias if "bias" in stages else y

    def norm(layer, name, x):
        if "layer_norm" not in stages:
            return x
        gamma, beta = layer[name]
        mean = tf.reduce_mean(x, -1, keepdims=True)
        variance = tf.reduce_mean(tf.square(x - mean), -1, keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + 1e-6) * gamma + beta

    def attend(q, cache, written):
        # q (B, H*d) against a (B, 2, H, S, d) cache; one query position.
        q = tf.reshape(q, (-1, heads, 1, head_dim)) * head_dim**-0.5
        scores = tf.einsum("bhtd,bhsd->bhts", q, cache[:, 0])
        if written is not None:
            floor = tf.reduce_min(scores, -1, keepdims=True) - 30.0
            scores = tf.where(written, scores, floor)
        weights = tf.nn.softmax(scores, -1)
        if written is not None:
            weights = tf.where(written, weights, 0.0)
        context = tf.einsum("bhts,bhsd->bthd", weights, cache[:, 1])
        return tf.reshape(context, (-1, heads * head_dim))

    def encode(source):
        # The encoder's matmuls over the source tokens (tanh stands in for
        # the attention, as in the steps), then the cross-attention keys and
        # values: (layers, batch, 2, heads, source_length, d).
        x = tf.gather(source_embedding, source)
        for w in encoder_layers:
            q = tf.matmul(x, w["self_attention/query"])
            k = tf.matmul(x, w["self_attention/key"])
            v = tf.matmul(x, w["self_attention/value"])
            # One tanh each: XLA would merge x @ Wq + x @ Wk + x @ Wv into
            # one matmul by (Wq + Wk + Wv).
            h = tf.tanh(q) + tf.tanh(k) + tf.tanh(v)
            x = x + tf.matmul(h, w["self_attention/attention_output"])
            x = x + tf.matmul(
                tf.nn.relu(tf.matmul(x, w["ffn/intermediate"])), w["ffn/output"]
            )
        caches = []
        for key, value in cross_kernels:
            k, v = (
                tf.transpose(
                    tf.reshape(
                        tf.matmul(x, w), (-1, sizes["source_length"], heads, head_dim)
                    ),
                    (0, 2, 1, 3),
                )
                for w in (key, value)
            )
            caches.append(tf.stack([k, v], 1))
        return tf.stack(caches)

    def decode(source):
        batch = tf.shape(source)[0]
        if encoder:
            cross = encode(source)
            # Without the cross-attention stage the steps would not read the
            # encoder's output and XLA would drop the encoder: the largest of
            # its keys and values over the source (loop-invariant, computed
            # once) enters the stand-in. A maximum, not a mean, so that XLA
            # cannot move it before the projections; one read of the caches.
            summaries = tf.unstack(
                tf.reshape(
                    tf.reduce_max(cross, axis=(2, 4)), (sizes["layers"], batch, -1)
                )
            )
        else:
            cross = tf.random.stateless_normal(
                (sizes["layers"], batch, 2, heads, sizes["source_length"], head_dim),
                (1, 2),
            )
            summaries = [None] * sizes["layers"]
        caches = tuple(tf.zeros((batch, 2, heads, length, head_dim)) for _ in layers)

        def body(i, tokens, out, caches):
            x = tf.gather(embedding, tokens)
            written = tf.range(length)[None, None, None, :] <= i
            new_caches = []
            for layer, cache, cross_cache, summary in zip(
                layers,
                caches,
                tf.unstack(cross),
                summaries,
                strict=True,
            ):
                q = dense(layer, "self_attention/query", x)
                k = dense(layer, "self_attention/key", x)
                v = dense(layer, "self_attention/value", x)
                if "self_attention" in stages:
                    new = tf.reshape(tf.stack([k, v], 1), (-1, 2, heads, 1, head_dim))
                    cache = keras.ops.slice_update(cache, [0, 0, 0, i, 0], new)
                    h = attend(q, cache, written)
                else:
                    h = tf.tanh(q + k + v)
                new_caches.append(cache)
                x = norm(
                    layer,
                    "self_attention_norm",
                    x + dense(layer, "self_attention/attention_output", h),
                )
                q = dense(layer, "cross_attention/query", x)
                if "cross_attention" in stages:
                    h = attend(q, cross_cache, None)
                else:
                    h = tf.tanh(q if summary is None else q + summary)
                x = norm(
                    layer,
                    "cross_attention_norm",
                    x + dense(layer, "cross_attention/attention_output", h),
                )
                h = tf.nn.relu(dense(layer, "ffn/intermediate", x))
                x = norm(layer, "ffn_norm", x + dense(layer, "ffn/output", h))
            logits = tf.matmul(x, embedding, transpose_b=True)
            if "log_softmax" in stages:
                # The Generator's greedy choice (two reductions; top_k with
                # k = 2 cost a sort of the row under XLA on CPU).
                tokens = greedy_choice(tf.nn.log_softmax(logits), 0)
            else:
                tokens = tf.argmax(logits, -1, output_type=tf.int32)
            hot = tf.cast(tf.range(length)[None, :] == i + 1, tf.int32)
            return i + 1, tokens, out + hot * tokens[:, None], tuple(new_caches)

        _, _, out, _ = tf.while_loop(
            lambda i, t, o, c: i < length - 1,
            body,
            (
                tf.constant(0),
                tf.fill([batch], START),
                tf.zeros([batch, length], tf.int32),
                caches,
            ),
        )
        return out

    return tf.function(decode, jit_compile=jit_compile, autograph=False)


def measure(contenders, source, repeats):
    """Seconds per decode for each contender, alternating within each repeat,
    in reverse order every other repeat."""
    batch = source.shape[0]
    for (name, mode), decode in contenders.items():
        print(f"batch {batch}: compiling {name} ({mode})", flush=True)
        decode(source)
    times = {key: [] for key in contenders}
    for repeat, order in common.rounds(contenders, repeats):
        print(f"batch {batch}: repeat {repeat + 1}/{repeats}", flush=True)
        for name in order:
            _, seconds = common.timed(lambda d=contenders[name]: d(source).numpy())
            times[name].append(seconds)
    return times


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--output", default="bench/results/decode.json")
    parser.add_argument(
        "--vocabulary",
        type=int,
        default=8000,
        help="vocabulary size (default 8000, as in translate_de_en.json); a "
        "smaller one shows how the batch-1 ratio depends on the weights "
        "fitting in the CPU caches",
    )
    args = parser.parse_args()
    sizes = default_sizes(args.vocabulary)
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    hub = seq2seq_for_sizes(sizes)
    # Each contender as an XLA-compiled and as a plain graph tf.function; the
    # ratios compare the faster mode of each (keras-hub's cache is ~10x slower
    # under XLA at batch 32, so its best path is the graph one). The floor is
    # a reference, XLA only.
    contenders = {
        ("weight_floor", "xla"): weight_floor_decoder(model, sizes, True),
        # The same steps after the encoder's matmuls instead of random
        # cross caches.
        ("weight_floor_with_encoder", "xla"): weight_floor_decoder(
            model, sizes, True, encoder=True
        ),
    }
    for mode, jit in (("xla", True), ("graph", False)):
        contenders[("tfformer_cached", mode)] = tfformer_decoder(model, sizes, jit)
        contenders[("prefix_recompute", mode)] = prefix_recompute_decoder(
            model, sizes, jit
        )
        contenders[("keras_hub_cached", mode)] = hub.decoder(
            sizes["new_tokens"] + 1, jit, mask_source=False
        )
    rng = np.random.default_rng(0)
    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        source = rng.integers(4, sizes["vocabulary"], (batch, sizes["source_length"]))
        source = tf.constant(source, tf.int32)
        times = measure(contenders, source, args.repeats)
        for (name, mode), seconds in times.items():
            median, fastest, slowest = common.median_min_max(seconds)
            rows.append(
                dict(
                    contender=name,
                    mode=mode,
                    batch=batch,
                    median_seconds=median,
                    min_seconds=fastest,
                    max_seconds=slowest,
                    tokens_per_second=batch * sizes["new_tokens"] / median,
                    seconds=seconds,
                )
            )
    header = ("contender", "mode", "batch", "tokens/s", "median s", "min-max s")
    print(
        f"{header[0]:<18}{header[1]:<7}{header[2]:>6}{header[3]:>12}{header[4]:>11}"
        f"{header[5]:>18}"
    )
    for r in rows:
        spread = f"{r['min_seconds']:.3f}-{r['max_seconds']:.3f}"
        print(
            f"{r['contender']:<18}{r['mode']:<7}{r['batch']:>6}"
            f"{r['tokens_per_second']:>12.1f}{r['median_seconds']:>11.3f}{spread:>18}"
        )

    def best(name, batch):
        return max(
            r["tokens_per_second"]
            for r in rows
            if r["contender"] == name and r["batch"] == batch
        )

    ratios = {}
    for batch in sorted({r["batch"] for r in rows}):
        ours = best("tfformer_cached", batch)
        floor = best("weight_floor", batch)
        ratios[f"batch_{batch}"] = {
            "vs_prefix_recompute": ours / best("prefix_recompute", batch),
            "vs_keras_hub_cached": ours / best("keras_hub_cached", batch),
            "floor_vs_prefix_recompute": floor / best("prefix_recompute", batch),
            "share_of_floor": ours / floor,
            "share_of_floor_with_encoder": ours
            / best("weight_floor_with_encoder", batch),
        }
        ratio = ratios[f"batch_{batch}"]
        print(
            f"batch {batch}: tfformer is {ratio['vs_prefix_recompute']:.1f}x prefix "
            f"recompute, {ratio['vs_keras_hub_cached']:.2f}x keras-hub; the "
            f"weight-streaming floor is {ratio['floor_vs_prefix_recompute']:.1f}x "
            f"prefix recompute and tfformer runs at {ratio['share_of_floor']:.0%} "
            f"of it ({ratio['share_of_floor_with_encoder']:.0%} of the floor "
            "with the encoder)"
        )
    common.write_result(
        args.output,
        dict(sizes=sizes, repeats=args.repeats, rows=rows, ratios=ratios),
    )


if __name__ == "__main__":
    main()
