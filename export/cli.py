"""`tfformer-export`: a training run to a SavedModel, TFLite model or LiteRT-LM bundle.

Examples:
    tfformer-export --checkpoint runs/number_words --format saved_model \\
        --out serving/translator
    tfformer-export --checkpoint runs/number_words --format tflite \\
        --quantize int8 --out device/
    tfformer-export --checkpoint runs/shakespeare_gpt_10min --format tflite \\
        --prefill-lengths 16,64 --out device/gpt
    tfformer-export --checkpoint runs/shakespeare_gpt_10min --format litertlm \\
        --out device/gpt

The run's task adds its own options (`--help` with `--checkpoint` lists
them). `--result-json FILE` writes `{"path": ...}` of the export, for
programs that run this command (the main job does).
"""

import argparse
import gzip
import json
import os
import sys

from tfformer.errors import InputError
from tfformer.runs.files import atomic_write_text

FORMATS = ("saved_model", "tflite", "litertlm")


def read_sentences(path):
    """Lines of a UTF-8 text file (plain or .gz), for full-int8 calibration."""
    if not os.path.isfile(path):
        raise InputError(f"--representative-data file not found: {path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except (UnicodeDecodeError, OSError) as e:
        raise InputError(f"--representative-data {path!r} is unreadable: {e}") from None


def quality_options(args):
    """The quality gate's options (`tfformer.export.quality.QualityGate`,
    which refuses them for a float32 export); `--int4-block` is refused
    with any quantization but int4."""
    if args.int4_block != "32" and args.quantize != "int4":
        raise InputError(
            f"--int4-block applies to --quantize int4. Received: --quantize "
            f"{args.quantize!r}"
        )
    return {
        "int4_block": args.int4_block,
        "max_quality_loss": args.max_quality_loss,
        "force": args.force,
        "quality_data": args.quality_data,
    }


def parser():
    p = argparse.ArgumentParser(
        prog="tfformer-export", description=__doc__.split("\n")[0]
    )
    p.add_argument("--checkpoint", required=True, help="a tfformer-train run directory")
    p.add_argument(
        "--format",
        required=True,
        help="saved_model, tflite or litertlm (causal-LM runs on bytes: a "
        "bundle for Google's LiteRT-LM runtime)",
    )
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--quantize",
        default="none",
        help=(
            "tflite: none, float16, int8 (dynamic range), full_int8 (int8 "
            "weights and activations with float fallback) or integer_only (int8 "
            "ops only, int8 output; refused, with the float ops named, for a "
            "graph that keeps any) or int4 (int4 weights by ai-edge-quantizer); "
            "litertlm: none, float16, int8 or int4. A quantized model is "
            "measured against float32 on held-out data before it is written "
            "(without data: a warning; int4 refused)"
        ),
    )
    p.add_argument(
        "--int4-block",
        default="32",
        help="int4: weights per scale, 32, 64, 128, 256 or channel (default 32)",
    )
    p.add_argument(
        "--max-quality-loss",
        "--max-loss-increase",
        dest="max_quality_loss",
        type=float,
        help="a quantized model: the most it may lose against float32 on "
        "held-out data, in the task's unit (defaults: 0.1 nats per token, "
        "1.0 BLEU, 1.0 accuracy point, 0.01 cosine)",
    )
    p.add_argument(
        "--quality-data",
        "--quality-text",
        dest="quality_data",
        help="a quantized model: the held-out data to measure it on (default: "
        "the run's; a converted checkpoint has none): text (generators; "
        "embedders: one per line), source<TAB>target, text<TAB>label, "
        "image-file<TAB>label or .npz, or the same as .jsonl",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="a quantized model: write it even when it loses more than "
        "allowed or cannot be measured",
    )
    p.add_argument(
        "--representative-data",
        help="full_int8, integer_only: raw inputs, one per line (plain or .gz)",
    )
    p.add_argument(
        "--model",
        "--checkpoint-file",
        dest="checkpoint_file",
        default="model.keras",
        choices=["model.keras", "best.keras"],
        help="model.keras (final) or best.keras (lowest validation loss), as "
        "--model of the other commands (--checkpoint-file: the older name)",
    )
    p.add_argument("--version", type=int, help="saved_model: version number")
    p.add_argument("--result-json", help='write {"path": ...} of the export here')
    return p


def parse_args(argv=None):
    """Parses `--checkpoint` first, then everything with the run's task's
    options. Returns (args, exporter); ValueError for a bad run directory or
    a task without an exporter."""
    from tfformer.export.tasks import get_exporter
    from tfformer.runs.directory import RunDirectory

    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint")
    known, _ = first.parse_known_args(argv)
    p = parser()
    exporter = None
    if known.checkpoint:
        exporter = get_exporter(RunDirectory(known.checkpoint).task)
        exporter.add_arguments(p)
    return p.parse_args(argv), exporter


def main(argv=None):
    try:
        args, exporter = parse_args(argv)
        path = export(args, exporter)
    except InputError as e:
        print(f"tfformer-export: error: {e}", file=sys.stderr)
        return 2
    if args.result_json:
        atomic_write_text(args.result_json, json.dumps({"path": path}) + "\n")
    print(f"Exported to {path}")
    return 0


def export(args, exporter):
    if args.format not in FORMATS:
        raise InputError(
            f"--format must be one of {FORMATS}. Received: {args.format!r}"
        )
    if args.format == "saved_model":
        if getattr(args, "lora", "merge") != "merge":
            raise InputError(
                "--lora file applies to --format tflite and litertlm (the SavedModel "
                f"merges the adapters). Received: --lora {args.lora!r}"
            )
        if args.quantize != "none":
            raise InputError(
                "--quantize applies to --format tflite and litertlm. Received: "
                f"--quantize {args.quantize!r} with --format saved_model"
            )
        from tfformer.export.saved_model import export_saved_model

        return export_saved_model(
            args.checkpoint,
            args.out,
            version=args.version,
            checkpoint=args.checkpoint_file,
            **exporter.saved_model_options(args),
        )
    if args.format == "litertlm":
        if args.representative_data:
            raise InputError(
                "--representative-data calibrates full_int8 and integer_only "
                "TFLite models; a bundle takes none. Received: "
                f"--representative-data {args.representative_data!r}"
            )
        if getattr(args, "prefill_lengths", None):
            raise InputError(
                "--format litertlm chooses its prefill lengths (16, 64, 256, ... "
                "below the context, and the context). "
                f"Received: --prefill-lengths {args.prefill_lengths!r}"
            )
        if getattr(args, "decode_batch", None):
            raise InputError(
                "--decode-batch adds a signature LiteRT-LM cannot run (it steps "
                "one sequence per decode call); export --format tflite for "
                f"generate.py's BatchedGenerator. Received: --decode-batch "
                f"{args.decode_batch}"
            )
        from tfformer.export.litertlm import export_litertlm

        return export_litertlm(
            args.checkpoint,
            args.out,
            checkpoint=args.checkpoint_file,
            quantize=args.quantize,
            lora=getattr(args, "lora", "merge"),
            **quality_options(args),
        )
    from tfformer.export.tflite import export_tflite

    sentences = (
        read_sentences(args.representative_data) if args.representative_data else None
    )
    return export_tflite(
        args.checkpoint,
        args.out,
        quantize=args.quantize,
        checkpoint=args.checkpoint_file,
        representative_sentences=sentences,
        **quality_options(args),
        **exporter.tflite_options(args),
    )


if __name__ == "__main__":
    sys.exit(main())
