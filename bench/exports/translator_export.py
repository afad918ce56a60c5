"""Exported models against the Keras model: size, latency per sentence, quality.

For one training run it exports the SavedModel (greedy and beam) and the four
TFLite variants (float32, float16, dynamic-range int8, full int8 calibrated
on 200 training sources), then translates the run's test split one sentence at
a time with each:

- Keras: `tfformer.load(RUN).translator(search="greedy")` (graph mode, batch 1);
- SavedModel: `serving_default` (strings in, strings out);
- TFLite: the runtime the export ships, `translate.py` (the `ai_edge_litert`
  Interpreter with the plain-Python device tokenizer), as an app would.

It reports file sizes, the median per-sentence latency with its 10th-90th
percentile spread, sacreBLEU / chrF (lowercased, with signatures), exact match,
and how often each agrees with the Keras greedy output. TFLite conversions run
in subprocesses (the converter leaks memory, tensorflow/tensorflow#122598).

Usage: `python -m bench.exports.translator_export --checkpoint RUN_DIR [--limit 300]
[--output bench/results/export.json]`.
"""

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import tfformer
from bench import common
from tfformer.export.saved_model import export_saved_model
from tfformer.export.tflite import QUANTIZATIONS, tflite_file_name
from tfformer.runs.directory import RunDirectory
from tfformer.training.config import config_from_dict
from tfformer.training.evaluation.translation import score_translations
from tfformer.training.tasks.translation import TASK


def summary(name, outputs, seconds, pairs, keras_outputs, size):
    references = [t for _, t in pairs]
    scores = score_translations(outputs, references)
    latency = common.latency_ms(seconds)
    # Printed, not stored: the test sentences stay in ../shared/data.
    print(f"{name}: {pairs[0][0]!r} -> {outputs[0]!r}")
    return {
        "name": name,
        "size_bytes": size,
        "latency_ms_median": latency["median_ms"],
        "latency_ms_p10": latency["p10_ms"],
        "latency_ms_p90": latency["p90_ms"],
        "exact_match": float(
            np.mean([o == r for o, r in zip(outputs, references, strict=True)])
        ),
        "agrees_with_keras": (
            float(
                np.mean([o == k for o, k in zip(outputs, keras_outputs, strict=True)])
            )
            if keras_outputs
            else 1.0
        ),
        "bleu_lowercased": scores["bleu_lowercased"],
        "chrf_lowercased": scores["chrf_lowercased"],
        "bleu_signature": scores["bleu_lowercased_signature"],
    }


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a tfformer-train run")
    parser.add_argument("--checkpoint-file", default="model.keras")
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--output", default="bench/results/export.json")
    args = parser.parse_args()

    keras_translator = tfformer.load(args.checkpoint, args.checkpoint_file).translator(
        search="greedy", batch_size=1
    )
    config = config_from_dict(RunDirectory(args.checkpoint).read_json("config.json"))
    splits = TASK.raw_splits(config.data)
    pairs = splits["test"][: args.limit]
    sources = [s for s, _ in pairs]
    rows = []
    keras_out, seconds = common.timed_each(
        lambda s: keras_translator.translate([s])[0], sources, warmup=True
    )
    model_path = os.path.join(args.checkpoint, args.checkpoint_file)
    rows.append(
        summary(
            "keras (greedy)",
            keras_out,
            seconds,
            pairs,
            None,
            os.path.getsize(model_path),
        )
    )
    print(f"keras: {rows[-1]['latency_ms_median']:.1f} ms/sentence", flush=True)

    with tempfile.TemporaryDirectory() as work:
        for search in ("greedy", "beam"):
            path = export_saved_model(
                args.checkpoint,
                os.path.join(work, f"serving_{search}"),
                checkpoint=args.checkpoint_file,
                search=search,
            )
            served = tf.saved_model.load(path).signatures["serving_default"]

            def one(source, served=served):
                out = served(text=tf.constant([source]))["translation"]
                return out.numpy()[0].decode("utf-8")

            outputs, seconds = common.timed_each(one, sources, warmup=True)
            rows.append(
                summary(
                    f"saved_model ({search})",
                    outputs,
                    seconds,
                    pairs,
                    keras_out,
                    common.directory_bytes(path),
                )
            )
            print(f"{rows[-1]['name']}: done", flush=True)

        device = os.path.join(work, "device")
        calibration = os.path.join(work, "calibration.txt")
        with open(calibration, "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s, _ in splits["train"][:200])
        # integer_only is refused for the translator (its loop keeps float
        # ops; export/tflite.py), so it is not among the variants.
        for quantize in [q for q in QUANTIZATIONS if q != "integer_only"]:
            command = [
                sys.executable,
                "-m",
                "tfformer.export",
                "--checkpoint",
                args.checkpoint,
                "--checkpoint-file",
                args.checkpoint_file,
                "--format",
                "tflite",
                "--quantize",
                quantize,
                "--out",
                device,
            ]
            if quantize == "full_int8":
                command += ["--representative-data", calibration]
            common.run_command(command)
            path = os.path.join(device, tflite_file_name(quantize))
            # The runtime the export ships (translate.py), run as an app would.
            runtime = common.load_script(os.path.join(device, "translate.py"))
            translator = runtime.Translator(path)

            def one(source, translator=translator):
                return translator.translate([source])[0]

            outputs, seconds = common.timed_each(one, sources, warmup=True)
            rows.append(
                summary(
                    f"tflite {quantize}",
                    outputs,
                    seconds,
                    pairs,
                    keras_out,
                    os.path.getsize(path),
                )
            )
            print(f"{rows[-1]['name']}: done", flush=True)

    float32 = next(r for r in rows if r["name"] == "tflite none")["size_bytes"]
    header = (
        f"{'model':<22}{'size MB':>9}{'vs f32':>8}{'ms/sent':>9}{'p10-p90':>13}"
        f"{'exact':>7}{'BLEU':>7}{'chrF':>7}{'=keras':>8}"
    )
    print(header)
    for r in rows:
        r["size_vs_tflite_float32"] = r["size_bytes"] / float32
        print(
            f"{r['name']:<22}{r['size_bytes'] / 1e6:>9.2f}"
            f"{r['size_vs_tflite_float32']:>8.2f}{r['latency_ms_median']:>9.1f}"
            f"{r['latency_ms_p10']:>6.1f}-{r['latency_ms_p90']:<6.1f}"
            f"{r['exact_match']:>7.3f}{r['bleu_lowercased']:>7.1f}"
            f"{r['chrf_lowercased']:>7.1f}{r['agrees_with_keras']:>8.3f}"
        )
    result = {
        "run": os.path.abspath(args.checkpoint),
        "checkpoint": args.checkpoint_file,
        "task": config.task,
        "corpus": config.data.corpus,
        "test_sentences": len(pairs),
        "rows": rows,
    }
    common.write_result(args.output, result)


if __name__ == "__main__":
    main()
