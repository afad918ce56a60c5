"""The full-int8 TFLite translator under each greedy choice: quality and speed.

Stop 33 replaced the generator's greedy choice, `top_k(log_probs, 2)` (the
runner-up when the best is padding), with two reductions
(`tfformer.decoding.sampling.greedy_choice`). In a full-int8 export the
old choice was a float TOPK_V2 op; the new one runs in int8. This script
exports the same run's full-int8 translator twice, calibrated on the same
200 training sources, once with the current choice and once with the old one
put back in the export process, and translates the first `--limit` test
sentences one at a time with each in LiteRT (device tokenizer), as
`bench/exports/translator_export.py` does. Reported: lowercased sacreBLEU
and chrF, agreement with Keras greedy (batch 1), agreement of the two
exports, and the median latency per sentence, and the ops that still read or
write float tensors.

Usage: `python -m bench.exports.int8_greedy_choice --checkpoint RUN [--limit 300]
[--output bench/results/int8_greedy_choice.json]`
"""

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import tfformer
from bench import common
from bench.exports.translator_export import summary
from tfformer.export.flatbuffer import float_ops
from tfformer.export.tflite import tflite_file_name
from tfformer.runs.directory import RunDirectory
from tfformer.training.config import config_from_dict
from tfformer.training.tasks.translation import TASK

# Runs `python -m tfformer.export ...` with the greedy choice of bcdd058..a1497be.
OLD_CHOICE = """
import runpy, sys
from keras import ops
import tfformer.decoding.generator as generator

def top_k_choice(log_probs, pad_id):
    best = ops.cast(ops.top_k(log_probs, 2)[1], "int32")
    return ops.where(best[:, 0] == pad_id, best[:, 1], best[:, 0])

generator.greedy_choice = top_k_choice
sys.argv = ["tfformer.export", *sys.argv[1:]]
runpy.run_module("tfformer.export", run_name="__main__", alter_sys=True)
"""


def export_full_int8(checkpoint, out, calibration, old_choice):
    prefix = (
        [sys.executable, "-c", OLD_CHOICE]
        if old_choice
        else [
            sys.executable,
            "-m",
            "tfformer.export",
        ]
    )
    command = [
        *prefix,
        *("--checkpoint", checkpoint, "--format", "tflite"),
        *("--quantize", "full_int8", "--representative-data", calibration),
        *("--out", out),
    ]
    common.run_command(command)
    return os.path.join(out, tflite_file_name("full_int8"))


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a translate_de_en run")
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--output", default="bench/results/int8_greedy_choice.json")
    args = parser.parse_args()

    config = config_from_dict(RunDirectory(args.checkpoint).read_json("config.json"))
    splits = TASK.raw_splits(config.data)
    pairs = splits["test"][: args.limit]
    sources = [s for s, _ in pairs]
    keras_translator = tfformer.load(args.checkpoint).translator(
        search="greedy", batch_size=1
    )
    keras_out, seconds = common.timed_each(
        lambda s: keras_translator.translate([s])[0], sources, warmup=True
    )
    rows = [summary("keras (greedy)", keras_out, seconds, pairs, None, 0)]
    outputs = {}
    with tempfile.TemporaryDirectory() as work:
        calibration = os.path.join(work, "calibration.txt")
        with open(calibration, "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s, _ in splits["train"][:200])
        for name, old in (("two reductions (now)", False), ("top_k (before)", True)):
            device = os.path.join(work, "old" if old else "new")
            print(f"exporting full int8, greedy choice {name} ...", flush=True)
            path = export_full_int8(args.checkpoint, device, calibration, old)
            # The runtime the export ships (translate.py), run as an app would.
            runtime = common.load_script(os.path.join(device, "translate.py"))
            translator = runtime.Translator(path)

            def one(source, translator=translator):
                return translator.translate([source])[0]

            outputs[name], seconds = common.timed_each(one, sources, warmup=True)
            row = summary(
                f"tflite full_int8, {name}",
                outputs[name],
                seconds,
                pairs,
                keras_out,
                os.path.getsize(path),
            )
            with open(path, "rb") as f:
                row["float_ops"] = float_ops(f.read())
            rows.append(row)
    new, old = outputs.values()
    agree = float(np.mean([a == b for a, b in zip(new, old, strict=True)]))
    print(f"{'model':<40}{'ms/sent':>9}{'BLEU':>7}{'chrF':>7}{'=keras':>8}")
    for r in rows:
        print(
            f"{r['name']:<40}{r['latency_ms_median']:>9.1f}"
            f"{r['bleu_lowercased']:>7.2f}{r['chrf_lowercased']:>7.2f}"
            f"{r['agrees_with_keras']:>8.3f}"
        )
    print(f"the two full-int8 exports translate {agree:.1%} of sentences alike")
    common.write_result(
        args.output,
        dict(
            run=os.path.abspath(args.checkpoint),
            test_sentences=len(pairs),
            exports_agree=agree,
            rows=rows,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
