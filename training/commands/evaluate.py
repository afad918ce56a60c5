"""`tfformer-evaluate --checkpoint RUN`: the run's test split scored in its
task's units (translation: sacreBLEU, chrF, exact match and speed; language
model: nats per token and bits per byte; classification: accuracy, macro-F1
and the confusion matrix)."""

import json
import sys

from tfformer.runs.files import atomic_write_text
from tfformer.training.commands.run_arguments import parse_with_task


def add_common(parser):
    parser.add_argument("--limit", type=int, help="the first N examples only")
    parser.add_argument("--output", help="JSON file for the results")


def main(argv=None):
    try:
        args, run, task = parse_with_task(
            "tfformer-evaluate",
            " ".join(__doc__.split("\n\n")[0].split()),
            add_common,
            lambda task, parser: task.add_evaluate_arguments(parser),
            argv,
        )
    except ValueError as e:
        print(f"tfformer-evaluate: error: {e}", file=sys.stderr)
        return 2
    try:
        results = task.evaluate(
            run.path, args, progress=lambda m: print(m, file=sys.stderr)
        )
    except (ValueError, TypeError) as e:
        print(f"tfformer-evaluate: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(results, indent=2, ensure_ascii=False)
    if args.output:
        atomic_write_text(args.output, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
