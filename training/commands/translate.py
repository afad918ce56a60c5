"""`tfformer-translate`: `tfformer-predict` for translation runs (sentences
as arguments, or one per line on stdin)."""

import argparse
import sys

from tfformer.errors import InputError
from tfformer.runs.directory import RunDirectory
from tfformer.training.commands.predict import main as predict_main


def main(argv=None):
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint")
    known, _ = first.parse_known_args(argv)
    if known.checkpoint:
        try:
            task = RunDirectory(known.checkpoint).task
        except InputError:
            task = None  # predict reports what is wrong with the directory
        if task not in (None, "translation"):
            print(
                f"tfformer-translate: error: {known.checkpoint} holds a {task!r} "
                "run; use tfformer-predict.",
                file=sys.stderr,
            )
            return 2
    return predict_main(argv, prog="tfformer-translate")


if __name__ == "__main__":
    sys.exit(main())
