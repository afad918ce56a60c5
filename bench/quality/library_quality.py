"""Library against library on Multi30k De->En: tfformer's model and
keras-hub's layers trained on tfformer's pipeline with everything else equal,
in one process, alternating, then decoded with one search and scored on the
same test set.

What both contenders get (from `training/configs/translate_de_en.json`):
- the same WordPiece vocabularies and token ids, the same bucketed batches in
  the same order (`pipeline.training_stream`, one seed), batch 64;
- Adam with the paper's schedule (1,000 warmup steps), label smoothing 0.1,
  the masked loss, XLA (`jit_compile=True`);
- weight averaging on both (`ema_momentum` 0.998, `AveragedWeights`):
  validation and decoding use the average;
- sizes 3+3 layers, d_model 256, 8 heads, FFN 1024, dropout 0.1, LayerNorm
  epsilon 1e-6 (keras-hub's default is 1e-5; set to tfformer's), post-norm;
- dropout sites: residual (attention and FFN outputs), attention
  probabilities and embeddings on both (keras-hub's blocks have no embedding
  dropout, so a `Dropout` layer follows its `TokenAndPositionEmbedding`, as a
  keras-hub user would add it); tfformer alone also drops out the FFN's
  hidden layer (keras-hub's `TransformerEncoder/Decoder` offer no such site);
- the same number of optimizer steps (`--epochs` passes of the bucketed
  training set), alternating one epoch at a time with the order swapped every
  epoch, so that both see the same machine conditions; the batches' seconds
  are measured inside `fit` (`BatchClock`) and reported separately, so the
  quality figures do not depend on what else the machine ran;
- decoding with one search, `tfformer.decoding.Generator`, over each model's
  own key/value caches (keras-hub's through `KerasHubCachedDecoder`): greedy
  with early exit, and beam 4 with the GNMT length penalty 0.6 (the default
  of `tfformer-evaluate`); the keras-hub adapter is checked against
  keras-hub's own cached greedy loop on the first test batch.

What differs is the library: tfformer's model as its config builds it
(sinusoidal positions, embeddings scaled by sqrt(d), decoder embedding tied
to the output, attention kernels drawn per head, fused layers) against
keras-hub's layers as its keras.io translation example composes them
(learned positions, no scaling, untied `Dense` output, Keras's default
initializers).

Usage:
  python -m bench.quality.library_quality [--epochs 3] [--limit N]
      [--output bench/results/library_quality_de_en.json]

Writes the JSON (per-epoch validation loss/accuracy and batch seconds per
contender, test BLEU/chrF per decoding, the adapter check) and a PNG of the
validation curves next to it.
"""

import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

from bench import common
from bench.callbacks import BatchClock
from bench.peers import KerasHubCachedDecoder, cut_after_end, seq2seq_for_config
from tfformer.runs.directory import RunDirectory
from tfformer.training import pipeline
from tfformer.training.callbacks import AveragedWeights
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task
from tfformer.training.tasks.translation import Translator, evaluate_translator
from tfformer.training.trainer import build_dataset, build_model, compile_model

CONFIG = os.path.join("training", "configs", "translate_de_en.json")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tfformer", "bench_de_en")
CONTENDERS = ("tfformer", "keras_hub")


def prepared_data(config, progress=print):
    """The config's data; the vocabularies are learned once and kept in CACHE."""
    data = build_dataset(config, CACHE if os.path.isdir(CACHE) else None)
    if not os.path.isdir(CACHE):
        os.makedirs(CACHE)
        get_task(config.task).save_preprocessing(config, data, RunDirectory(CACHE))
        progress(f"vocabularies kept in {CACHE}")
    return data


def build_contenders(config, data):
    t = config.train
    out = {}
    for name in CONTENDERS:
        keras.utils.set_random_seed(t.seed)
        if name == "tfformer":
            model, adapter = build_model(config, data), None
        else:
            hub = seq2seq_for_config(
                config,
                data,
                layer_norm_epsilon=1e-6,
                embedding_dropout=config.model.dropout,
            )
            model, adapter = hub.training_model(), hub
        out[name] = dict(model=compile_model(model, config), hub=adapter, epochs=[])
    return out


def train_epoch(entry, config, data, epoch, steps):
    t = config.train
    train = pipeline.training_stream(
        data.examples["train"],
        batch_size=t.batch_size,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=steps,
        seed=config.data.seed,
        first_epoch=epoch,
    )
    validation = pipeline.evaluation_dataset(
        data.examples["validation"],
        batch_size=t.batch_size,
        bucket_lengths=data.bucket_lengths,
    )
    clock = BatchClock()
    began = time.perf_counter()
    history = entry["model"].fit(
        train,
        validation_data=validation,
        initial_epoch=epoch,
        epochs=epoch + 1,
        steps_per_epoch=steps,
        callbacks=[AveragedWeights(keep_average=False), clock],
        verbose=2,
    )
    logs = {k: float(v[-1]) for k, v in history.history.items()}
    return dict(
        epoch=epoch + 1,
        step=int(entry["model"].optimizer.iterations.numpy()),
        batch_seconds=round(clock.seconds(), 2),
        fit_seconds=round(time.perf_counter() - began, 2),
        val_loss=round(logs["val_loss"], 4),
        val_accuracy=round(logs["val_accuracy"], 4),
        train_loss=round(logs["loss"], 4),
    )


def adapter_check(hub, data, sentences, length):
    """Token agreement of Generator-over-keras-hub-caches greedy with
    keras-hub's own cached greedy loop (`KerasHubSeq2Seq.decoder`)."""
    source = data.tokenizers["source"].tokenize(sentences)[:, :length]
    source = source.to_tensor(shape=[len(sentences), length])
    from tfformer.decoding import Generator

    ours = Generator(KerasHubCachedDecoder(hub), max_length=length, search="greedy")
    ours = ours.compiled(jit_compile=False)(source)["token_ids"].numpy()
    theirs = cut_after_end(hub.decoder(length, jit_compile=False)(source).numpy())
    return dict(
        sentences=len(sentences),
        rows_equal=int(np.sum(np.all(ours == theirs, axis=1))),
        tokens_equal_fraction=round(float(np.mean(ours == theirs)), 6),
    )


def plot(results, path):
    plt = common.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name in CONTENDERS:
        epochs = results["contenders"][name]["epochs"]
        minutes = np.cumsum([e["batch_seconds"] for e in epochs]) / 60
        for ax, key in zip(axes, ("val_loss", "val_accuracy"), strict=True):
            ax.plot(minutes, [e[key] for e in epochs], marker="o", label=name)
            ax.set_xlabel("minutes of training batches")
            ax.set_ylabel(key.replace("_", " ") + " (averaged weights)")
    axes[0].legend()
    fig.suptitle("Multi30k De->En, same pipeline, optimizer and steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--limit", type=int, help="test sentences (default: all 1,000)")
    p.add_argument(
        "--steps", type=int, help="steps per epoch (default: one pass; for a smoke run)"
    )
    p.add_argument(
        "--output",
        default=os.path.join("bench", "results", "library_quality_de_en.json"),
    )
    args = p.parse_args()
    if args.epochs < 1:
        p.error(f"--epochs must be >= 1. Received: {args.epochs}")
    config = load_config(CONFIG)
    t = config.train
    data = prepared_data(config)
    steps = pipeline.batches_per_epoch(
        data.examples["train"].lengths, data.bucket_lengths, t.batch_size
    )
    steps = args.steps or steps
    contenders = build_contenders(config, data)
    for name, entry in contenders.items():
        print(f"{name}: {entry['model'].count_params():,} parameters")

    for epoch, order in common.rounds(CONTENDERS, args.epochs):
        for name in order:
            print(f"--- {name}, epoch {epoch + 1}/{args.epochs}", flush=True)
            record = train_epoch(contenders[name], config, data, epoch, steps)
            record["position_in_round"] = order.index(name)
            contenders[name]["epochs"].append(record)
            print(json.dumps(record), flush=True)

    pairs = data.raw["test"][: args.limit]
    length = config.data.max_length
    results = dict(
        config=CONFIG,
        steps_per_epoch=steps,
        epochs=args.epochs,
        contenders={},
    )
    for name, entry in contenders.items():
        model = entry["model"]
        # Training is over: the average becomes the model, for both.
        model.optimizer.finalize_variable_values(model.trainable_variables)
        decodable = KerasHubCachedDecoder(entry["hub"]) if entry["hub"] else model
        seconds = [e["batch_seconds"] for e in entry["epochs"]]
        results["contenders"][name] = dict(
            parameters=model.count_params(),
            epochs=entry["epochs"],
            batch_seconds_total=round(sum(seconds), 1),
            batch_seconds_median=round(statistics.median(seconds), 1),
            test={},
        )
        for search in ("greedy", "beam"):
            translator = Translator(
                decodable,
                data.tokenizers["source"],
                data.tokenizers["target"],
                source_length=length,
                max_length=length,
                search=search,
                beam_width=4,
                length_penalty=0.6,
            )
            scores, _ = evaluate_translator(translator, pairs)
            scores.pop("examples")
            results["contenders"][name]["test"][search] = scores
            print(name, search, json.dumps(scores), flush=True)
        if entry["hub"]:
            results["contenders"][name]["adapter_check"] = adapter_check(
                entry["hub"], data, [s for s, _ in pairs[:64]], length
            )
            print("adapter check", results["contenders"][name]["adapter_check"])
    tf_, kh = (results["contenders"][n] for n in CONTENDERS)
    results["keras_hub_batch_seconds_over_tfformer"] = round(
        kh["batch_seconds_total"] / tf_["batch_seconds_total"], 3
    )
    common.write_result(args.output, results)
    plot(results, os.path.splitext(args.output)[0] + ".png")


if __name__ == "__main__":
    main()
