"""`tfformer`: the main job, end to end on the embedded default task.

1. Trains the translator of a config (default: the number-words task), with
   Keras's progress bar.
2. Greedy-translates the held-out test split with the saved `model.keras` and
   reports exact match, sacreBLEU and chrF.
3. Exports the run as a TF Serving SavedModel and as a builtin-ops TFLite
   model, each with the `tfformer-export` command in its own process, the two
   at once (export and training never import each other; the converter also
   keeps memory it never gives back, tensorflow#122598).
4. Translates test sentences with all three (Keras, SavedModel, TFLite), shows
   a few side by side and counts how often the exports agree with Keras.
5. Names where everything is.

The SavedModel is loaded with plain `tf.saved_model.load`, as a server would,
and the TFLite model runs in the LiteRT interpreter with the standard-library
`tokenizer.py` written next to it, as a device would.
"""

import argparse
import csv
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from training.atomic import atomic_path, atomic_write_text
from training.cli import add_config_arguments
from training.config import load_config


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="tfformer", description=__doc__.split("\n")[0])
    add_config_arguments(p, "a seq2seq training config (default: number_words.json)")
    p.add_argument(
        "--compare",
        type=int,
        default=200,
        help="test sentences translated by all three models (default 200)",
    )
    p.add_argument("--show", type=int, default=5, help="of those, printed (default 5)")
    return p.parse_args(argv)


def check_args(args, config):
    if config.model.family != "seq2seq":
        raise ValueError(
            "The main job trains and exports a translator: --config needs "
            f"model.family 'seq2seq'. Received: {config.model.family!r}"
        )
    for name in ("compare", "show"):
        value = getattr(args, name)
        if value < 1:
            raise ValueError(f"--{name} must be at least 1. Received: {value}")


def read_all(file):
    file.seek(0)
    with file:
        return file.read()


def run_exports(run_dir, exports, progress=print):
    """Runs `python -m export` once per format, both at once (each is mostly
    one thread); returns {format: exported path}."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    running = {}
    for fmt in ("saved_model", "tflite"):
        command = [
            sys.executable, "-m", "export", "--checkpoint", run_dir,
            "--format", fmt, "--out", os.path.join(exports, fmt),
        ]  # fmt: skip
        if fmt == "saved_model":
            # Greedy, as the Keras and TFLite columns are: the three should agree.
            command += ["--search", "greedy"]
        progress(f"  $ python {' '.join(command[1:])}")
        # Files, not pipes: a full pipe would block one while we wait on the other.
        logs = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        process = subprocess.Popen(command, stdout=logs[0], stderr=logs[1], env=env)
        running[fmt] = process, logs
    paths, failures = {}, []
    for fmt, (process, logs) in running.items():
        process.wait()
        stdout, stderr = (read_all(f) for f in logs)
        for line in stdout.splitlines():
            progress(f"  {line}")
        if process.returncode:
            failures.append(f"{fmt} (exit {process.returncode}):\n{stderr[-3000:]}")
        else:
            last = stdout.strip().splitlines()[-1]
            paths[fmt] = last.removeprefix("Exported to ").strip()
    if failures:
        raise RuntimeError("Export failed: " + "\n".join(failures))
    return paths


def load_device_tokenizer(directory):
    """The `tokenizer.py` an export writes next to its `.tflite`: exactly what
    a device app would port."""
    spec = importlib.util.spec_from_file_location(
        "tfformer_device_tokenizer", os.path.join(directory, "tokenizer.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DeviceTokenizer(directory)


def tflite_translations(path, sentences):
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    directory = os.path.dirname(path)
    tokenizer = load_device_tokenizer(directory)
    runner = Interpreter(model_path=path).get_signature_runner()
    out = []
    for sentence in sentences:
        ids = np.array([tokenizer.tokenize(sentence)], "int32")
        token_ids = runner(source_ids=ids)["token_ids"][0]
        out.append(tokenizer.detokenize(token_ids.tolist()))
    return out


def saved_model_translations(path, sentences, batch_size=64):
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    out = []
    for start in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[start : start + batch_size])
        texts = serve(text=batch)["translation"].numpy()
        out += [t.decode("utf-8", "replace") for t in texts]
    return out


def test_scores(translator, pairs, progress=print):
    """Exact match, sacreBLEU (13a words, and characters) and chrF."""
    import sacrebleu

    from training.evaluate import score_translations

    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    began = time.perf_counter()
    hypotheses = []
    for start in range(0, len(sources), 256):
        hypotheses += translator.translate(sources[start : start + 256])
        progress(f"  translated {len(hypotheses)}/{len(sources)}")
    seconds = time.perf_counter() - began
    scores = score_translations(hypotheses, references)
    # Word-level BLEU is 0 when the references are single words (the
    # number-words task writes German numbers as one compound word), so the
    # character-level BLEU is reported next to it.
    char_bleu = sacrebleu.metrics.BLEU(tokenize="char")
    scores["bleu_char"] = round(
        char_bleu.corpus_score(hypotheses, [references]).score, 2
    )
    scores["bleu_char_signature"] = str(char_bleu.get_signature())
    scores["exact_match"] = sum(
        h == r for h, r in zip(hypotheses, references, strict=True)
    ) / max(len(pairs), 1)
    scores["sentences"] = len(pairs)
    scores["seconds"] = round(seconds, 2)
    return scores, hypotheses


def side_by_side(rows, show):
    lines = []
    for source, reference, keras_, saved, lite in rows[:show]:
        lines.append(f"  {source}")
        lines.append(f"      {'reference':<11} {reference}")
        for name, text in (("Keras", keras_), ("SavedModel", saved), ("TFLite", lite)):
            mark = "" if text == keras_ else "   (differs from Keras)"
            lines.append(f"      {name:<11} {text}{mark}")
    return "\n".join(lines)


def main_job(config, *, compare=200, show=5, progress=print):
    """Runs the main job for `config`; returns the summary dict it saves."""
    from training.trainer import train
    from training.translator import Translator

    began = time.perf_counter()
    out = config.train.output_dir
    progress(f"[1/4] Training ({config.model.preset or 'custom'}) into {out}")
    result = train(config, progress=progress)
    pairs = result.data.raw["test"]

    progress(f"[2/4] Greedy-translating the {len(pairs)} held-out test sentences")
    translator = Translator(out, search="greedy")
    scores, keras_out = test_scores(translator, pairs, progress)
    progress(
        f"  exact match {scores['exact_match']:.1%}, chrF {scores['chrf_cased']}, "
        f"BLEU {scores['bleu_cased']} (words), {scores['bleu_char']} (characters)"
    )

    progress("[3/4] Exporting")
    exported = run_exports(out, os.path.join(out, "export"), progress)
    saved_model, tflite = exported["saved_model"], exported["tflite"]

    sample = pairs[:compare]
    sources = [s for s, _ in sample]
    progress(f"[4/4] Translating {len(sample)} test sentences with all three")
    saved_out = saved_model_translations(saved_model, sources)
    lite_out = tflite_translations(tflite, sources)
    rows = [
        (s, r, k, m, t)
        for (s, r), k, m, t in zip(sample, keras_out, saved_out, lite_out, strict=False)
    ]
    comparison = {
        "sentences": len(rows),
        "saved_model_equals_keras": sum(r[3] == r[2] for r in rows) / len(rows),
        "tflite_equals_keras": sum(r[4] == r[2] for r in rows) / len(rows),
        "tflite_exact_match": sum(r[4] == r[1] for r in rows) / len(rows),
    }
    table = os.path.join(out, "translations.tsv")
    with atomic_path(table) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        writer.writerow(["source", "reference", "keras", "saved_model", "tflite"])
        writer.writerows(rows)

    print(side_by_side(rows, show))
    print(
        f"  Same as Keras: SavedModel {comparison['saved_model_equals_keras']:.1%}, "
        f"TFLite {comparison['tflite_equals_keras']:.1%} of {len(rows)} test "
        "sentences."
    )
    paths = {
        "model": os.path.join(out, "model.keras"),
        "saved_model": saved_model,
        "tflite": tflite,
        "tensorboard_logs": os.path.join(out, "logs"),
        "training_metrics": os.path.join(out, "metrics.json"),
        "training_curves": os.path.join(out, "training_curves.png"),
        "translations": table,
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
    print(
        f"\nDone in {summary['wall_seconds'] / 60:.1f} min: exact match "
        f"{scores['exact_match']:.1%} on {scores['sentences']} test sentences."
    )
    for name, path in paths.items():
        print(f"  {name:<17} {path}")
    print(f"  (TensorBoard: tensorboard --logdir {paths['tensorboard_logs']})")
    return summary


def main(argv=None):
    args = parse_args(argv)
    try:
        overrides = ["train.evaluate_exact_match=false", *args.overrides]
        config = load_config(args.config, overrides)
        check_args(args, config)
    except (ValueError, TypeError) as e:
        print(f"tfformer: error: {e}", file=sys.stderr)
        return 2
    try:
        main_job(config, compare=args.compare, show=args.show)
    except RuntimeError as e:  # an export subprocess failed; its stderr is in e
        print(f"tfformer: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
