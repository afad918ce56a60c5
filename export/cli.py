"""`tfformer-export`: a training run to a TF Serving SavedModel or a TFLite model.

Examples:
    tfformer-export --checkpoint runs/number_words --format saved_model \\
        --out serving/translator
    tfformer-export --checkpoint runs/number_words --format tflite \\
        --quantize int8 --out device/
"""

import argparse
import gzip
import os
import sys

FORMATS = ("saved_model", "tflite")


def read_sentences(path):
    """Lines of a UTF-8 text file (plain or .gz), for full-int8 calibration."""
    if not os.path.isfile(path):
        raise ValueError(f"--representative-data file not found: {path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    except (UnicodeDecodeError, OSError) as e:
        raise ValueError(f"--representative-data {path!r} is unreadable: {e}") from None


def parser():
    p = argparse.ArgumentParser(
        prog="tfformer-export", description=__doc__.split("\n")[0]
    )
    p.add_argument("--checkpoint", required=True, help="a tfformer-train run directory")
    p.add_argument("--format", required=True, help="saved_model or tflite")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--quantize",
        default="none",
        help=(
            "tflite only: none, float16, int8 (dynamic range) or full_int8 (int8 "
            "weights and activations with float fallback; not integer-only)"
        ),
    )
    p.add_argument(
        "--representative-data",
        help="full_int8: source sentences, one per line (plain or .gz)",
    )
    p.add_argument(
        "--checkpoint-file",
        default="model.keras",
        help="model.keras (final) or best.keras (lowest validation loss)",
    )
    p.add_argument("--version", type=int, help="saved_model: version number")
    p.add_argument("--search", default="beam", help="saved_model: beam or greedy")
    p.add_argument("--beam-width", type=int, default=4)
    p.add_argument("--length-penalty", type=float, default=0.6)
    p.add_argument(
        "--max-length", type=int, help="decoder length (default: training max_length)"
    )
    p.add_argument(
        "--jit-compile",
        action="store_true",
        help="saved_model: XLA-compile the decoding loop (the server needs XLA)",
    )
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        path = export(args)
    except ValueError as e:
        print(f"tfformer-export: error: {e}", file=sys.stderr)
        return 2
    print(f"Exported to {path}")
    return 0


def export(args):
    if args.format not in FORMATS:
        raise ValueError(
            f"--format must be one of {FORMATS}. Received: {args.format!r}"
        )
    if args.format == "saved_model":
        if args.quantize != "none":
            raise ValueError(
                "--quantize applies to --format tflite. Received: "
                f"--quantize {args.quantize!r} with --format saved_model"
            )
        from export.saved_model import export_saved_model

        return export_saved_model(
            args.checkpoint,
            args.out,
            version=args.version,
            checkpoint=args.checkpoint_file,
            search=args.search,
            beam_width=args.beam_width,
            length_penalty=args.length_penalty,
            max_length=args.max_length,
            jit_compile=args.jit_compile,
        )
    from export.tflite import export_tflite

    sentences = (
        read_sentences(args.representative_data) if args.representative_data else None
    )
    return export_tflite(
        args.checkpoint,
        args.out,
        quantize=args.quantize,
        checkpoint=args.checkpoint_file,
        max_length=args.max_length,
        representative_sentences=sentences,
    )


if __name__ == "__main__":
    sys.exit(main())
