"""`tfformer-predict --checkpoint RUN INPUT...`: whatever the run's task
predicts (translations, continuations, labels), one result per input.

Inputs come from the arguments, or one per line on stdin when none are
given; bytes that are not UTF-8 become U+FFFD. The run's task adds its own
options (`--help` with `--checkpoint` lists them).
"""

import re
import sys

from tfformer.training.commands.run_arguments import parse_with_task
from tfformer.training.tasks.base import Piece


def as_text(argument):
    """An argument or stdin line as valid UTF-8 text: Python hands undecodable
    bytes over as lone surrogates, which become U+FFFD here."""
    try:
        raw = argument.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # lone surrogates that are not escaped bytes
        return re.sub("[\ud800-\udfff]", "\ufffd", argument)
    return raw.decode("utf-8", "replace")


def main(argv=None, prog="tfformer-predict"):
    try:
        args, run, task = parse_with_task(
            prog,
            " ".join(__doc__.split("\n\n")[0].split()),
            lambda parser: parser.add_argument(
                "inputs", nargs="*", help="inputs (default: one per line on stdin)"
            ),
            lambda task, parser: task.add_predict_arguments(parser),
            argv,
        )
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if args.inputs:
        inputs = [as_text(a) for a in args.inputs]
    else:
        stdin = getattr(sys.stdin, "buffer", None)
        lines = stdin if stdin is not None else (x.encode() for x in sys.stdin)
        inputs = [line.rstrip(b"\n").decode("utf-8", "replace") for line in lines]
    try:
        for line in task.predict(run.path, args, inputs):
            print(line, end="" if isinstance(line, Piece) else "\n", flush=True)
    except (ValueError, TypeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
