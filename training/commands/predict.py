"""`tfformer-predict --checkpoint RUN INPUT...`: whatever the run's task
predicts (translations, continuations, labels), one result per input.

Inputs come from the arguments, or one per line on stdin when none are
given; bytes that are not UTF-8 become U+FFFD. The run's predictor adds its
own options (`--help` with `--checkpoint` lists them).
"""

import os
import sys

from tfformer.errors import InputError
from tfformer.runs.files import printable
from tfformer.training.commands.run_arguments import (
    option_values,
    parse_with_predictor,
)
from tfformer.training.predictors.base import as_flags


def read_inputs(arguments, paths=False):
    """The inputs: the arguments, else the lines of stdin. Text becomes
    valid UTF-8; file `paths` keep their bytes (a name that is not UTF-8
    still opens)."""
    if arguments:
        return list(arguments) if paths else [printable(a) for a in arguments]
    stdin = getattr(sys.stdin, "buffer", None)
    lines = stdin if stdin is not None else (x.encode() for x in sys.stdin)
    lines = [line.rstrip(b"\n") for line in lines]
    if paths:
        return [os.fsdecode(line) for line in lines]
    return [line.decode("utf-8", "replace") for line in lines]


def main(argv=None, prog="tfformer-predict"):
    options = ()
    try:
        args, predictor, options = parse_with_predictor(
            prog,
            " ".join(__doc__.split("\n\n")[0].split()),
            lambda parser: parser.add_argument(
                "inputs", nargs="*", help="inputs (default: one per line on stdin)"
            ),
            lambda predictor: predictor.predict_options,
            argv,
        )
        predictor = predictor(args.checkpoint, checkpoint=args.model)
        # A conversation (causal LM `--chat`) reads stdin as it goes.
        chatting = getattr(args, "chat", None) is not None
        paths = getattr(predictor, "inputs_are_paths", False)
        inputs = args.inputs if chatting else read_inputs(args.inputs, paths)
        # Printed as it comes: a causal LM streams its tokens.
        for text in predictor.printed(inputs, **option_values(args, options)):
            print(text, end="", flush=True)
    except InputError as e:
        print(f"{prog}: error: {as_flags(str(e), options)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, in a conversation say
        print(file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
