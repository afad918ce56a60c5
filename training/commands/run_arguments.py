"""What `tfformer-predict` and `tfformer-evaluate` share: the run is read
first, then its predictor adds its own options, so each command has one
parser whose options fit the run it is given."""

import argparse

from tfformer.runs.directory import CHECKPOINTS, RunDirectory
from tfformer.training.predictors import predictor_class


def parse_with_predictor(prog, description, add_common, options_of, argv):
    """(args, predictor class, its options): parses `--checkpoint` alone
    first, then everything with the options the run's predictor declares
    (`options_of(predictor_class)`, a tuple of `predictors.base.Option`).

    Raises:
        ValueError: `--checkpoint` is not a readable run directory (the
            message names the file and what is wrong).
    """
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--checkpoint")
    known, _ = first.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--checkpoint", required=True, help="a tfformer-train run dir")
    parser.add_argument("--model", default="model.keras", choices=list(CHECKPOINTS))
    add_common(parser)
    predictor, options = None, ()
    if known.checkpoint:
        predictor = predictor_class(RunDirectory(known.checkpoint).task)
        options = options_of(predictor)
        group = parser.add_argument_group(f"{predictor.task} options")
        for option in options:
            group.add_argument(option.flag, **option.settings)
    args = parser.parse_args(argv)
    return args, predictor, options


def option_values(args, options):
    """{keyword: value} of `options` in parsed `args`."""
    return {option.dest: getattr(args, option.dest) for option in options}
