"""`tfformer-translate`: translate sentences given as arguments or on stdin."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfformer-translate",
        description="Translate sentences with a trained run (one per line on stdin "
        "when none are given).",
    )
    parser.add_argument("--checkpoint", required=True, help="a tfformer-train run dir")
    parser.add_argument(
        "--model", default="model.keras", choices=["model.keras", "best.keras"]
    )
    parser.add_argument("--strategy", default="beam", choices=["greedy", "beam"])
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("sentences", nargs="*")
    args = parser.parse_args(argv)
    from training.translator import Translator

    try:
        translator = Translator(
            args.checkpoint,
            checkpoint=args.model,
            strategy=args.strategy,
            beam_width=args.beam_width,
            length_penalty=args.length_penalty,
        )
    except (ValueError, TypeError) as e:
        print(f"tfformer-translate: error: {e}", file=sys.stderr)
        return 2
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    for translation in translator.translate(sentences):
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
