"""`tfformer-translate`: translate sentences given as arguments or on stdin.

Also holds the command-line options that choose a run and a decoding
search, shared with `tfformer-evaluate`.
"""

import argparse
import sys


def add_translator_arguments(parser):
    """--checkpoint, --model, --search, --beam-width, --length-penalty."""
    parser.add_argument("--checkpoint", required=True, help="a tfformer-train run dir")
    parser.add_argument(
        "--model", default="model.keras", choices=["model.keras", "best.keras"]
    )
    parser.add_argument("--search", default="beam", choices=["greedy", "beam"])
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.6)


def translator_from_args(args, **kwargs):
    """A `Translator` for the options added by `add_translator_arguments`."""
    from training.translator import Translator

    return Translator(
        args.checkpoint,
        checkpoint=args.model,
        search=args.search,
        beam_width=args.beam_width,
        length_penalty=args.length_penalty,
        **kwargs,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfformer-translate",
        description="Translate sentences with a trained run (one per line on stdin "
        "when none are given).",
    )
    add_translator_arguments(parser)
    parser.add_argument("sentences", nargs="*")
    args = parser.parse_args(argv)
    try:
        translator = translator_from_args(args)
    except (ValueError, TypeError) as e:
        print(f"tfformer-translate: error: {e}", file=sys.stderr)
        return 2
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    for translation in translator.translate(sentences):
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
