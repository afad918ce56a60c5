"""`tfformer`: the main job, end to end on the embedded translation task.

A translation config (default: the embedded number-words data):

1. Trains the model, with Keras's progress bar.
2. Predicts the held-out test split with the saved `model.keras` (greedy
   decoding, as the exported TFLite loop decodes) and scores it: exact
   match, sacreBLEU and chrF.
3. Exports the run as a TF Serving SavedModel and as a builtin-ops TFLite
   model, each with the `tfformer-export` command in its own process, the two
   at once (export and training never import each other; the converter also
   keeps memory it never gives back, tensorflow#122598). Each command writes
   the path it exported to in a JSON file (`--result-json`).
4. Predicts test examples with all three (Keras, SavedModel, TFLite), shows
   a few side by side and counts how often the exports agree with Keras.
5. Names where everything is.

The SavedModel is loaded with plain `tf.saved_model.load`, as a server would,
and the TFLite model runs with the runtime the export writes next to it,
`translate.py` (LiteRT and the standard-library `tokenizer.py`), loaded from
the export directory as an app would run it.

Other tasks have no comparison of their exports here yet: the main job
refuses them.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

from tfformer.errors import InputError
from tfformer.runs import directory as runs
from tfformer.runs.files import atomic_path, atomic_write_text
from tfformer.training.commands.train import (
    add_config_arguments,
    add_start_over_argument,
)
from tfformer.training.config import load_config
from tfformer.training.output_directory import check_output_directory
from tfformer.training.tasks import get_task

FORMATS = ("saved_model", "tflite")
# `tfformer-export` options per format, so that every export decodes as the
# Keras column does (greedy; the TFLite loop is greedy anyway).
EXPORT_OPTIONS = {"saved_model": ["--search", "greedy"], "tflite": []}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="tfformer", description=__doc__.split("\n")[0])
    add_config_arguments(p, "a training config (default: number_words.json)")
    add_start_over_argument(p)
    p.add_argument(
        "--compare",
        type=int,
        default=200,
        help="test examples predicted by all three models (default 200)",
    )
    p.add_argument("--show", type=int, default=5, help="of those, printed (default 5)")
    return p.parse_args(argv)


def check_args(args, config):
    if config.task != "translation":
        raise InputError(
            f"The main job exports the model and compares the exports with Keras; "
            f"task {config.task!r} has no exported predictions yet."
        )
    for name in ("compare", "show"):
        value = getattr(args, name)
        if value < 1:
            raise InputError(f"--{name} must be at least 1. Received: {value}")


def read_all(file):
    file.seek(0)
    with file:
        return file.read()


def run_exports(run_dir, exports, progress=print):
    """Runs `python -m tfformer.export` once per format, both at once (each is
    mostly one thread); returns {format: exported path}, read from the JSON
    each command writes with `--result-json` (the export function's return
    value)."""
    with tempfile.TemporaryDirectory(prefix="tfformer-exports-") as results:
        return _run_exports(run_dir, exports, results, progress)


def _run_exports(run_dir, exports, results, progress):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    running = {}
    for fmt in FORMATS:
        result = os.path.join(results, f"{fmt}.json")
        command = [
            sys.executable, "-m", "tfformer.export", "--checkpoint", run_dir,
            "--format", fmt, "--out", os.path.join(exports, fmt),
            "--result-json", result,
        ]  # fmt: skip
        command += EXPORT_OPTIONS[fmt]
        progress(f"  $ python {' '.join(command[1:])}")
        # Files, not pipes: a full pipe would block one while we wait on the other.
        logs = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        process = subprocess.Popen(command, stdout=logs[0], stderr=logs[1], env=env)
        running[fmt] = process, logs, result
    paths, failures = {}, []
    for fmt, (process, logs, result) in running.items():
        process.wait()
        stdout, stderr = (read_all(f) for f in logs)
        for line in stdout.splitlines():
            progress(f"  {line}")
        if process.returncode or not os.path.isfile(result):
            failures.append(f"{fmt} (exit {process.returncode}):\n{stderr[-3000:]}")
        else:
            with open(result, encoding="utf-8") as f:
                paths[fmt] = json.load(f)["path"]
    if failures:
        raise RuntimeError("Export failed: " + "\n".join(failures))
    return paths


def keras_translations(run_dir, pairs, progress=print):
    """The scores of the run's Keras model on the (source, reference)
    `pairs`, greedy as the exported TFLite loop is (exact match, BLEU,
    chrF, speed), and its translations."""
    from tfformer.training.predictors.translation import TranslationPredictor
    from tfformer.training.tasks.translation import evaluate_translator

    translator = TranslationPredictor(run_dir).translator(search="greedy")
    scores, translations = evaluate_translator(translator, pairs, progress=progress)
    scores.pop("examples")
    progress(f"  {headline(scores)}")
    return scores, translations


def headline(scores):
    """One line of the scores that matter most, for the end of the job."""
    return (
        f"exact match {scores['exact_match']:.1%} of {scores['sentences']}, "
        f"chrF {scores['chrf_cased']}, BLEU {scores['bleu_cased']} (words), "
        f"{scores['bleu_char']} (characters)"
    )


def saved_model_translations(path, sentences, batch_size=64):
    """Translations by the SavedModel's `serving_default`, loaded as a server
    would (TensorFlow only)."""
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    out = []
    for start in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[start : start + batch_size])
        texts = serve(text=batch)["translation"].numpy()
        out += [t.decode("utf-8", "replace") for t in texts]
    return out


def tflite_translations(path, sentences):
    """Translations by the `.tflite` at `path` with the runtime the export
    ships next to it, `translate.py` (LiteRT, NumPy and the standard-library
    `tokenizer.py`; greedy, as the model decodes), loaded from the export
    directory as an app would run it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tfformer_translate_runtime",
        os.path.join(os.path.dirname(path), "translate.py"),
    )
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    return runtime.Translator(path).translate(list(sentences))


def side_by_side(rows, show):
    lines = []
    for source, reference, keras_, saved, lite in rows[:show]:
        lines.append(f"  {source}")
        lines.append(f"      {'reference':<11} {reference}")
        for name, text in (("Keras", keras_), ("SavedModel", saved), ("TFLite", lite)):
            mark = "" if text == keras_ else "   (differs from Keras)"
            lines.append(f"      {name:<11} {text}{mark}")
    return "\n".join(lines)


def main_job(config, *, compare=200, show=5, progress=print, start_over=False):
    """Runs the main job for `config`; returns the summary dict it saves."""
    from tfformer.training.trainer import train

    began = time.perf_counter()
    out = config.train.output_dir
    preset = get_task(config.task).preset(config.model)
    progress(f"[1/4] Training ({preset}) into {out}")
    result = train(config, progress=progress, start_over=start_over)
    pairs = result.data.raw["test"]  # (source, reference)

    progress(f"[2/4] Predicting the {len(pairs)} held-out test examples (Keras)")
    scores, keras_out = keras_translations(out, pairs, progress=progress)

    progress("[3/4] Exporting")
    exported = run_exports(out, os.path.join(out, "export"), progress)

    sample = pairs[:compare]
    sources = [s for s, _ in sample]
    progress(f"[4/4] Predicting {len(sample)} test examples with all three")
    saved_out = saved_model_translations(exported["saved_model"], sources)
    lite_out = tflite_translations(exported["tflite"], sources)
    rows = [
        (s, r, k, m, t)
        for (s, r), k, m, t in zip(
            sample, keras_out[: len(sample)], saved_out, lite_out, strict=True
        )
    ]
    comparison = {
        "examples": len(rows),
        "saved_model_equals_keras": sum(r[3] == r[2] for r in rows) / len(rows),
        "tflite_equals_keras": sum(r[4] == r[2] for r in rows) / len(rows),
    }
    table = os.path.join(out, "predictions.tsv")
    with atomic_path(table) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["input", "reference", "keras", "saved_model", "tflite"])
        writer.writerows(rows)

    print(side_by_side(rows, show))
    print(
        f"  Same as Keras: SavedModel {comparison['saved_model_equals_keras']:.1%}, "
        f"TFLite {comparison['tflite_equals_keras']:.1%} of {len(rows)} test "
        "examples."
    )
    paths = {
        "model": os.path.join(out, runs.FINAL_MODEL),
        "saved_model": exported["saved_model"],
        "tflite": exported["tflite"],
        "tensorboard_logs": os.path.join(out, runs.LOGS),
        "training_metrics": os.path.join(out, runs.METRICS),
        "training_curves": os.path.join(out, runs.TRAINING_CURVES),
        "predictions": table,
        "summary": os.path.join(out, "main_job.json"),
    }
    summary = {
        "test": scores,
        "comparison": comparison,
        "paths": paths,
        "training": {
            k: result.metrics[k]
            for k in ("global_step", "wall_seconds", "real_tokens_per_second")
            if k in result.metrics
        },
        "wall_seconds": round(time.perf_counter() - began, 1),
    }
    atomic_write_text(paths["summary"], json.dumps(summary, indent=2))
    print(f"\nDone in {summary['wall_seconds'] / 60:.1f} min: {headline(scores)}.")
    for name, path in paths.items():
        print(f"  {name:<17} {path}")
    print(f"  (TensorBoard: tensorboard --logdir {paths['tensorboard_logs']})")
    return summary


def main(argv=None):
    args = parse_args(argv)
    try:
        overrides = ["train.final_evaluation=false", *args.overrides]
        config = load_config(args.config, overrides)
        check_args(args, config)
        check_output_directory(config, start_over=args.start_over)
    except InputError as e:
        print(f"tfformer: error: {e}", file=sys.stderr)
        return 2
    try:
        main_job(
            config, compare=args.compare, show=args.show, start_over=args.start_over
        )
    except InputError as e:  # found while training: a data file, say
        print(f"tfformer: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # an export subprocess failed; its stderr is in e
        print(f"tfformer: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
