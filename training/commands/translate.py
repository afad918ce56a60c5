"""`tfformer-translate`: `tfformer-predict` for translation runs (sentences
as arguments, or one per line on stdin)."""

import sys

from tfformer.training.commands.predict import main as predict_main


def main(argv=None):
    return predict_main(argv, prog="tfformer-translate")


if __name__ == "__main__":
    sys.exit(main())
