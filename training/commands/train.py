"""`tfformer-train --config FILE [--set section.key=value ...]`."""

import argparse
import json
import os
import sys

from tfformer.errors import InputError
from tfformer.training.config import load_config

DEFAULT_CONFIG = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "configs", "number_words.json"
)


def add_config_arguments(parser, help_config=None):
    """`--config FILE` and repeatable `--set SECTION.KEY=VALUE`."""
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG,
        help=help_config
        or "training/configs/NAME.json or .yaml (default: number_words.json, "
        "the embedded task)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one config value, e.g. --set train.epochs=3 (repeatable)",
    )


def add_start_over_argument(parser):
    """`--start-over`: train from scratch, the old directory renamed aside."""
    parser.add_argument(
        "--start-over",
        action="store_true",
        help="when train.output_dir holds anything (another run, or this one), "
        "rename it to OUTPUT_DIR.replaced-TIME and train from scratch; without "
        "it, only the same run (task, data, model) is resumed there",
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfformer-train",
        description="Train a tfformer model from a config file.",
    )
    add_config_arguments(parser)
    add_start_over_argument(parser)
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
    except InputError as e:
        print(f"tfformer-train: error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    from tfformer.training.tasks import check_trainable
    from tfformer.training.trainer import train

    try:
        check_trainable(config.task)
        results = train(config, start_over=args.start_over).metrics
    except InputError as e:  # bad data files, sizes, run dir
        print(f"tfformer-train: error: {e}", file=sys.stderr)
        return 2
    # (input, reference, prediction) examples of the task's final evaluation.
    for example in results.get("test_examples", []):
        print("  " + "\n    ".join(str(part) for part in example))
    shown = {k: v for k, v in results.items() if k != "test_examples"}
    print(json.dumps(shown, indent=2))
    print(f"Model, logs and metrics.json are in {config.train.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
