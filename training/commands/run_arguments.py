"""What `tfformer-predict` and `tfformer-evaluate` share: the run is read
first, then its task adds its own options, so each command has one parser
whose options fit the run it is given."""

import argparse

from tfformer.runs.directory import CHECKPOINTS, RunDirectory
from tfformer.training.tasks import get_task


def parse_with_task(prog, description, add_common, add_task, argv):
    """(args, run directory, task): parses `--checkpoint` alone first, then
    everything with the options the run's task adds (`add_task(task,
    parser)`).

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
    run = task = None
    if known.checkpoint:
        run = RunDirectory(known.checkpoint)
        task = get_task(run.task)
        add_task(task, parser)
    args = parser.parse_args(argv)
    return args, run, task
