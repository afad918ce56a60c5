"""Training recipes per precision and compile mode, tfformer against
keras-hub: real tokens per second of `model.fit` on the same cached
batches, and MFU against the peak of each recipe's own precision.

Recipes (`train.precision`, `train.jit_compile`):
- float32_xla: float32, the step compiled by XLA (every shipped config).
- float32_graph: float32, TensorFlow's graph (oneDNN kernels).
- bfloat16_graph: Keras's mixed_bfloat16 policy (float32 variables,
  bfloat16 compute), graph (oneDNN's bfloat16 kernels).
- bfloat16_xla: mixed_bfloat16 under XLA.

Families and models, each library in the same model (as
`train.py` and `train_families.py`, whose batches and peers these are):
- translator: `translate_de_en` (3+3 layers, d 256, FFN 1,024), 1,920
  Multi30k pairs bucketed; keras-hub's TransformerEncoder/Decoder with
  embedding dropout. Tokens: real target tokens.
- gpt: `shakespeare_gpt` (4 layers, d 256), 32 windows of 128 bytes;
  `GPT2Backbone` with its tied output. Tokens: real input tokens.
- bert: `polarity_bert` (`bert_tiny`), 32 sentences bucketed;
  `BertBackbone` with pooler, dropout and Dense.
tfformer runs without the FFN's hidden dropout (keras-hub's blocks have
none) and, for GPT and BERT, with the tanh GELU (keras-hub's); no weight
averaging for either.

Each contender compiles on one pass; then all of a family's contenders
alternate (the order reversed every other repeat), one `fit` pass per
repeat, timed from the end of its first batch to the end of its last. The
peaks (1024^3 matmul: float32 under XLA and in graph, bfloat16 in graph)
are measured in this process before and after the families; MFU divides
the useful training FLOPs of the real tokens per second by the higher
measurement of the recipe's precision (float32: the better of XLA and
graph; bfloat16: graph, oneDNN) and, for every recipe, by the bfloat16
peak (`mfu_of_bfloat16_peak`).

Usage: `python -m bench.training_speed.recipes [--families translator,gpt,bert]
[--repeats 3] [--run TRANSLATOR_RUN] [--output bench/results/recipes.json]`
"""

import dataclasses
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bench import common
from bench.callbacks import BatchClock
from bench.peers import bert_text_classifier, gpt2_language_model, seq2seq_for_config
from bench.training_speed import train, train_families
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task
from tfformer.training.trainer import (
    build_dataset,
    build_model,
    compile_model,
    dtype_policy,
)

RECIPES = common.TRAINING_RECIPES
CONFIGS = {
    "translator": train.CONFIG,
    **train_families.CONFIGS,
    "gpt_10min": os.path.join("training", "configs", "shakespeare_gpt_10min.json"),
    "gpt_60min": os.path.join("training", "configs", "shakespeare_gpt_60min.json"),
}
# The peer and FLOP count of each family's kind.
KINDS = {"gpt_10min": "gpt", "gpt_60min": "gpt"}
LIBRARIES = ("tfformer", "keras_hub")


PEAKS = {
    "float32_xla": (tf.float32, True),
    "float32_graph": (tf.float32, False),
    "bfloat16_graph": (tf.bfloat16, False),
}


def recipe_config(config, recipe):
    precision, jit = RECIPES[recipe]
    train_config = dataclasses.replace(
        config.train, precision=precision, jit_compile=jit
    )
    return dataclasses.replace(config, train=train_config)


def same_model(config, family):
    """keras-hub's blocks: no FFN hidden dropout; GPT-2's and BERT's tanh GELU."""
    changes = dict(activation_dropout=0.0)
    if family != "translator":
        changes["activation"] = "gelu_approximate"
    return dataclasses.replace(
        config, model=dataclasses.replace(config.model, **changes)
    )


def translator_batches(config, run):
    """The translator's data, cached batches, real target tokens and FLOPs."""
    data = build_dataset(config, run or tempfile.mkdtemp(prefix="bench-recipes-"))
    pool = train.subset(data.examples["train"], 1920)
    dataset, steps = train.bucketed(pool, data, config.train.batch_size)
    make, source, target = train.cached(dataset, steps)
    sizes = get_task(config.task).model_sizes(config.model)
    vocabulary = data.tokenizers["target"].vocabulary_size
    source, target = np.concatenate(source[1:]), np.concatenate(target[1:])
    flops = train.training_flops(source, target, sizes, vocabulary)
    return data, make, int(target.sum()), flops


def family_batches(family, config, batches=20):
    """GPT's or BERT's data, cached batches, real input tokens and FLOPs."""
    sizes = get_task(config.task).model_sizes(config.model)
    data, cache, lengths = train_families.cached_batches(config, family, batches)
    vocabulary = data.tokenizers["text"].vocabulary_size
    flops = train_families.family_flops(
        KINDS.get(family, family), lengths, sizes, vocabulary
    )
    return data, lambda: train.batches_dataset(cache), int(lengths.sum()), flops


def keras_hub_model(family, config, data):
    sizes = get_task(config.task).model_sizes(config.model)
    if family == "translator":
        return seq2seq_for_config(
            config, data, embedding_dropout=sizes["dropout"]
        ).training_model()
    vocabulary = data.tokenizers["text"].vocabulary_size
    if KINDS.get(family, family) == "gpt":
        return gpt2_language_model(sizes, vocabulary, config.data.max_length)
    return bert_text_classifier(
        sizes, vocabulary, config.data.max_length, data.num_classes
    )


def contenders(family, recipes, run):
    """(library, recipe) -> the compiled model; and the batches, tokens, FLOPs."""
    base = same_model(load_config(CONFIGS[family], ["train.ema_momentum=null"]), family)
    if family == "translator":
        data, make, tokens, flops = translator_batches(base, run)
    else:
        data, make, tokens, flops = family_batches(family, base)
    models = {}
    for recipe in recipes:
        config = recipe_config(base, recipe)
        for library in LIBRARIES:
            keras.utils.set_random_seed(0)
            with dtype_policy(config.train.precision):
                if library == "tfformer":
                    model = build_model(config, data)
                else:
                    model = keras_hub_model(family, config, data)
                models[library, recipe] = compile_model(model, config)
    return models, make, tokens, flops


def one_pass(model, make):
    clock = BatchClock()
    model.fit(make(), epochs=1, verbose=0, callbacks=[clock])
    return clock.seconds()


def measure(family, recipes, repeats, run):
    models, make, tokens, flops = contenders(family, recipes, run)
    for key, model in models.items():
        _, seconds = common.timed(one_pass, model, make)
        print(f"  {family}: compiled {'/'.join(key)} in {seconds:.0f} s", flush=True)
    seconds = {key: [] for key in models}
    for r, order in common.rounds(models, repeats):
        for key in order:
            seconds[key].append(one_pass(models[key], make))
            print(
                f"  {family} repeat {r + 1}/{repeats} {'/'.join(key)}: "
                f"{tokens / seconds[key][-1]:.0f} real tokens/s",
                flush=True,
            )
    rows = []
    for (library, recipe), values in seconds.items():
        median, fastest, slowest = common.median_min_max(values)
        rows.append(
            dict(
                family=family,
                library=library,
                recipe=recipe,
                precision=RECIPES[recipe][0],
                jit_compile=RECIPES[recipe][1] == "true",
                seconds=values,
                seconds_median=median,
                tokens_per_second=tokens / median,
                tokens_per_second_min=tokens / slowest,
                tokens_per_second_max=tokens / fastest,
            )
        )
    return dict(
        family=family,
        config=CONFIGS[family],
        real_tokens=tokens,
        useful_flops=flops,
        rows=rows,
    )


def add_ratios(result, peaks):
    """MFU at each recipe's precision and against the bfloat16 peak; each
    row's speed over tfformer's float32 XLA (today's recipe) and over
    keras-hub in the same recipe; and each library's fastest recipe."""
    float32 = max(peaks["float32_xla"], peaks["float32_graph"])
    by = {(r["library"], r["recipe"]): r for r in result["rows"]}
    today = by.get(("tfformer", "float32_xla"))
    for r in result["rows"]:
        rate = result["useful_flops"] / r["seconds_median"]
        own = float32 if r["precision"] == "float32" else peaks["bfloat16_graph"]
        r["precision_peak_flops"] = own
        r["mfu"] = rate / own
        r["mfu_of_bfloat16_peak"] = rate / peaks["bfloat16_graph"]
        peer = by[("keras_hub", r["recipe"])]["tokens_per_second"]
        r["over_keras_hub_same_recipe"] = r["tokens_per_second"] / peer
        if today:
            r["over_tfformer_float32_xla"] = (
                r["tokens_per_second"] / today["tokens_per_second"]
            )
    best = {}
    for library in LIBRARIES:
        rows = [r for r in result["rows"] if r["library"] == library]
        best[library] = max(rows, key=lambda r: r["tokens_per_second"])["recipe"]
    result["fastest_recipe"] = best
    ours, theirs = (by[library, best[library]] for library in LIBRARIES)
    result["best_over_best"] = ours["tokens_per_second"] / theirs["tokens_per_second"]


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--families", default="translator,gpt,bert")
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--run", help="a translate_de_en run directory (its vocabulary)")
    p.add_argument("--output", default="bench/results/recipes.json")
    args = p.parse_args()
    families, recipes = args.families.split(","), args.recipes.split(",")
    if set(families) - set(CONFIGS):
        p.error(f"--families takes {sorted(CONFIGS)}. Received: {args.families}")
    if set(recipes) - set(RECIPES):
        p.error(f"--recipes takes {sorted(RECIPES)}. Received: {args.recipes}")
    if args.repeats < 1:
        p.error(f"--repeats must be at least 1. Received: {args.repeats}")
    measured = {name: [] for name in PEAKS}

    def measure_peaks(when):
        for name, (dtype, jit) in PEAKS.items():
            measured[name].append(train.matmul_peak(dtype, jit_compile=jit))
        print(
            f"matmul peak (1024^3, {when}): "
            + ", ".join(f"{k} {v[-1] / 1e9:.0f} GFLOP/s" for k, v in measured.items()),
            flush=True,
        )

    measure_peaks("before")
    results = [measure(f, recipes, args.repeats, args.run) for f in families]
    measure_peaks("after")
    peaks = {name: max(values) for name, values in measured.items()}
    header = f"{'family':<11}{'library':<10}{'recipe':<16}real tok/s (min-max)"
    print(f"\n{header}  MFU  x today")
    for result in results:
        add_ratios(result, peaks)
        for r in result["rows"]:
            spread = common.spread_text(
                r["tokens_per_second"],
                r["tokens_per_second_min"],
                r["tokens_per_second_max"],
            )
            today = r.get("over_tfformer_float32_xla")
            print(
                f"{r['family']:<11}{r['library']:<10}{r['recipe']:<16}{spread:<22}"
                f"{r['mfu']:>5.1%} {'' if today is None else f'{today:.2f}x'}"
            )
        print(
            f"{result['family']}: fastest recipes {result['fastest_recipe']}; "
            f"best against best {result['best_over_best']:.2f}x"
        )
    common.write_result(
        args.output,
        dict(
            repeats=args.repeats,
            recipes={
                k: dict(precision=p, jit_compile=j == "true")
                for k, (p, j) in RECIPES.items()
            },
            matmul_peak_flops=peaks,
            matmul_peak_flops_before_after=measured,
            families=results,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
