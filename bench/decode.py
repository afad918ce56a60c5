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

Each runs as an XLA-compiled and as a plain-graph `tf.function`; ratios use
the faster mode of each. Contenders alternate within each repeat; the
figures are medians with min and max.

Usage: `python bench/decode.py [--repeats 5] [--output FILE]`.
"""

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras_hub_seq2seq import KerasHubSeq2Seq

from tfformer.decoding import Generator
from tfformer.models import transformer_seq2seq

START = 2


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


def measure(contenders, source, repeats):
    """Seconds per decode for each contender, alternating within each repeat."""
    for decode in contenders.values():
        decode(source)  # compile
    times = {key: [] for key in contenders}
    for _ in range(repeats):
        for name, decode in contenders.items():
            began = time.perf_counter()
            decode(source).numpy()
            times[name].append(time.perf_counter() - began)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--output", default="bench/results/decode.json")
    args = parser.parse_args()
    sizes = dict(
        layers=3,
        hidden_dim=256,
        heads=8,
        intermediate_dim=1024,
        vocabulary=8000,
        source_length=32,
        new_tokens=64,
        max_length=128,
    )
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    hub = KerasHubSeq2Seq(
        sizes["vocabulary"],
        sizes["vocabulary"],
        layers=sizes["layers"],
        hidden_dim=sizes["hidden_dim"],
        heads=sizes["heads"],
        intermediate_dim=sizes["intermediate_dim"],
        max_length=sizes["max_length"],
    )
    # Each contender as an XLA-compiled and as a plain graph tf.function; the
    # ratios compare the faster mode of each (keras-hub's cache is ~10x slower
    # under XLA at batch 32, so its best path is the graph one).
    contenders = {}
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
            median = statistics.median(seconds)
            rows.append(
                dict(
                    contender=name,
                    mode=mode,
                    batch=batch,
                    median_seconds=median,
                    min_seconds=min(seconds),
                    max_seconds=max(seconds),
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
        ratios[f"batch_{batch}"] = {
            "vs_prefix_recompute": ours / best("prefix_recompute", batch),
            "vs_keras_hub_cached": ours / best("keras_hub_cached", batch),
        }
        ratio = ratios[f"batch_{batch}"]
        print(
            f"batch {batch}: tfformer is {ratio['vs_prefix_recompute']:.1f}x prefix "
            f"recompute, {ratio['vs_keras_hub_cached']:.2f}x keras-hub"
        )
    result = dict(
        sizes=sizes,
        repeats=args.repeats,
        machine=dict(
            platform=platform.platform(),
            processor=platform.processor(),
            cpus=os.cpu_count(),
            tensorflow=tf.__version__,
            keras=keras.__version__,
            keras_hub=keras_hub.__version__,
        ),
        rows=rows,
        ratios=ratios,
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
