"""`tfformer-evaluate --checkpoint RUN`: the run's test split scored in its
task's units (translation: sacreBLEU, chrF, exact match and speed; language
model: nats per token and bits per byte; classification: accuracy, macro-F1
and the confusion matrix)."""

import json
import sys

from tfformer.errors import InputError
from tfformer.runs.files import atomic_write_text
from tfformer.training.commands.run_arguments import (
    option_values,
    parse_with_predictor,
)
from tfformer.training.predictors.base import as_flags


def add_common(parser):
    parser.add_argument("--limit", type=int, help="the first N examples only")
    parser.add_argument("--output", help="JSON file for the results")


def main(argv=None):
    options = ()
    try:
        args, predictor, options = parse_with_predictor(
            "tfformer-evaluate",
            " ".join(__doc__.split("\n\n")[0].split()),
            add_common,
            lambda predictor: predictor.evaluate_options,
            argv,
        )
        predictor = predictor(args.checkpoint, checkpoint=args.model)
        results = predictor.evaluate(
            limit=args.limit,
            progress=lambda m: print(m, file=sys.stderr),
            **option_values(args, options),
        )
    except InputError as e:
        message = as_flags(str(e), options)
        print(f"tfformer-evaluate: error: {message}", file=sys.stderr)
        return 2
    text = json.dumps(results, indent=2, ensure_ascii=False)
    if args.output:
        atomic_write_text(args.output, text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
