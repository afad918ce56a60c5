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
Each contender compiles on one pass over the batches, then the two
alternate (the order reversed every other repeat), one `fit` pass per
repeat, timed from the end of its first batch to the end of its last.
Reported: medians and (min-max) of real (non-padding) input tokens per
second, and the ratio of the medians.

Usage: `python bench/train_families.py [--families gpt,bert] [--batches 30]
[--repeats 5] [--output bench/results/train_families.json]`
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
from train import BatchClock, batches_dataset, machine, write_result

from tfformer.training.config import load_config
from tfformer.training.fit.trainer import build_dataset, build_model, compile_model
from tfformer.training.tasks import get_task

CONFIGS = {
    "gpt": os.path.join("training", "configs", "shakespeare_gpt.json"),
    "bert": os.path.join("training", "configs", "polarity_bert.yaml"),
}


def backbone_arguments(sizes, vocabulary, length):
    """keras-hub backbone keywords for tfformer's sizes."""
    names = ("num_layers", "num_heads", "hidden_dim", "intermediate_dim", "dropout")
    return dict(
        vocabulary_size=vocabulary,
        max_sequence_length=length,
        **{name: sizes[name] for name in names},
    )


def keras_hub_gpt(sizes, vocabulary, length):
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    backbone = keras_hub.models.GPT2Backbone(
        **backbone_arguments(sizes, vocabulary, length)
    )
    hidden = backbone(
        {"token_ids": token_ids, "padding_mask": keras.ops.not_equal(token_ids, 0)}
    )
    logits = backbone.token_embedding(hidden, reverse=True)
    return keras.Model({"token_ids": token_ids}, logits)


def keras_hub_bert(sizes, vocabulary, length, num_classes):
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    backbone = keras_hub.models.BertBackbone(
        **backbone_arguments(sizes, vocabulary, length)
    )
    outputs = backbone(
        {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": keras.ops.not_equal(token_ids, 0),
        }
    )
    pooled = keras.layers.Dropout(sizes["dropout"])(outputs["pooled_output"])
    logits = keras.layers.Dense(num_classes)(pooled)
    return keras.Model({"token_ids": token_ids, "segment_ids": segment_ids}, logits)


def contenders(family, batches):
    """The config, its two compiled models and the cached batches."""
    config = load_config(CONFIGS[family], overrides=["train.ema_momentum=null"])
    task = get_task(config.task)
    data = build_dataset(config, tempfile.mkdtemp(prefix=f"bench-{family}-"))
    sizes = task.model_sizes(config.model)
    vocabulary = data.tokenizers["text"].vocabulary_size
    length = config.data.max_length
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
    models = {}
    for library in ("tfformer", "keras_hub"):
        keras.utils.set_random_seed(0)
        if library == "tfformer":
            model = build_model(config, data)
        elif family == "gpt":
            model = keras_hub_gpt(sizes, vocabulary, length)
        else:
            model = keras_hub_bert(sizes, vocabulary, length, data.num_classes)
        models[library] = compile_model(model, config)
    # Real tokens of batches 2..N (the clock starts at the end of batch 1).
    tokens = sum(int(np.sum(b[0]["token_ids"].numpy() != 0)) for b in cache[1:])
    return config, sizes, models, cache, tokens


def one_pass(model, cache):
    clock = BatchClock()
    model.fit(batches_dataset(cache), epochs=1, verbose=0, callbacks=[clock])
    return clock.ends[-1] - clock.ends[0]


def measure(family, batches, repeats):
    config, sizes, models, cache, tokens = contenders(family, batches)
    for library, model in models.items():
        began = time.perf_counter()
        one_pass(model, cache)
        print(f"  {family}: compiled {library} in {time.perf_counter() - began:.0f} s")
    seconds = {library: [] for library in models}
    for r in range(repeats):
        order = list(models) if r % 2 == 0 else list(models)[::-1]
        for library in order:
            seconds[library].append(one_pass(models[library], cache))
            print(
                f"  {family} repeat {r + 1}/{repeats} {library}: "
                f"{tokens / seconds[library][-1]:.0f} real tokens/s"
            )
    rows = []
    for library, values in seconds.items():
        median = statistics.median(values)
        rows.append(
            dict(
                family=family,
                library=library,
                parameters=models[library].count_params(),
                seconds=values,
                tokens_per_second=tokens / median,
                tokens_per_second_min=tokens / max(values),
                tokens_per_second_max=tokens / min(values),
            )
        )
    ratio = rows[0]["tokens_per_second"] / rows[1]["tokens_per_second"]
    return dict(
        family=family,
        config=CONFIGS[family],
        batch_size=config.train.batch_size,
        bucket_lengths=list(config.data.bucket_lengths) or [config.data.max_length],
        sizes=sizes,
        timed_batches=batches - 1,
        real_tokens=tokens,
        rows=rows,
        tfformer_over_keras_hub=ratio,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    print(f"\n{'family':<7}{'library':<11}{'params':>10}  real tok/s (min-max)")
    for result in results:
        for r in result["rows"]:
            print(
                f"{r['family']:<7}{r['library']:<11}{r['parameters']:>10,}  "
                f"{r['tokens_per_second']:.0f} ({r['tokens_per_second_min']:.0f}-"
                f"{r['tokens_per_second_max']:.0f})"
            )
    write_result(
        args.output,
        dict(machine=machine(), command=" ".join(sys.argv), families=results),
    )
    for result in results:
        print(
            f"{result['family']}: tfformer/keras-hub "
            f"{result['tfformer_over_keras_hub']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
