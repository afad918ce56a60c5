"""`tfformer-predict --checkpoint RUN INPUT...`: whatever the run's task
predicts (translations, continuations, labels), one result per input.

Inputs come from the arguments, or one per line on stdin when none are
given. The run's task adds its own options (`--help` with `--checkpoint`
lists them).
"""

import sys

from tfformer.training.commands.run_arguments import parse_with_task


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
    inputs = args.inputs or [line.rstrip("\n") for line in sys.stdin]
    try:
        for line in task.predict(run.path, args, inputs):
            print(line, flush=True)
    except (ValueError, TypeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
