"""Which directory a training run may write into: `train.output_dir` belongs
to one run, and another run never writes over it.

A run is identified by its `config.json`: the task and the whole `data` and
`model` sections (the vocabulary is learned from the data settings, the
weights are shaped by the model settings). The `train` section may change
between invocations (more epochs, another time budget, steps per execution),
so a resumed run can go on differently from where it stopped.

`train.output_dir` is accepted when it is missing or empty (a new run) or when
its `config.json` has this config's task, data and model (the same run:
resumed from its backup, or re-run after it finished). Anything else — another
trained run, a converted checkpoint (its `config.json` names its own task and
model), a `model.init_from` inside the directory, files that are no run — is
refused before a byte is written, naming the directory, what differs and the
way out: another `train.output_dir`, or `start_over`, which renames the old
directory aside (nothing is deleted).
"""

import json
import os
import time

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.directory import CONFIG, MANIFEST

# The config entries that make two configs the same run.
IDENTITY = ("task", "data", "model")
# How many differing keys a refusal lists.
SHOWN = 6


def differences(saved, current, prefix=""):
    """The dotted keys whose values differ between two nested dicts, sorted."""
    keys = sorted(set(saved) | set(current))
    found = []
    for key in keys:
        where = f"{prefix}{key}"
        a, b = saved.get(key, "<absent>"), current.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            found.extend(differences(a, b, f"{where}."))
        elif a != b:
            found.append((where, a, b))
    return found


def identity(config_dict):
    """The part of a config (as `Config.to_dict()` or `config.json` gives
    it, after a JSON round trip) that names the run."""
    values = json.loads(json.dumps(config_dict))
    return {key: values.get(key) for key in IDENTITY}


def saved_identity(output_dir):
    """The identity of the run whose `config.json` is in `output_dir`, with
    the defaults of today's config filled in; ValueError naming the file
    when it is not a readable training config."""
    from tfformer.runs.directory import RunDirectory
    from tfformer.training.config import config_from_dict

    values = RunDirectory(output_dir).read_config()  # names a broken file
    try:
        if not isinstance(values, dict):
            raise InputTypeError(
                f"a config must be a mapping, not {type(values).__name__}"
            )
        # Only what names the run: the saved train section may fail today's
        # checks and still be resumed with another.
        named = {key: values[key] for key in IDENTITY if key in values}
        return identity(config_from_dict(named).to_dict())
    except InputError as e:
        path = os.path.join(output_dir, CONFIG)
        raise InputError(
            f"{path} is not a training config this version reads: {e}"
        ) from None


def is_within(path, directory):
    """Whether `path` is `directory` or inside it (after resolving links)."""
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return os.path.commonpath([path, directory]) == directory


def way_out(output_dir):
    return (
        f"Train into another train.output_dir, or start over with "
        f"tfformer-train --start-over (train(..., start_over=True)), which "
        f"renames {output_dir} aside and keeps it."
    )


def check_output_directory(config, *, start_over=False):
    """Raises ValueError unless `config` (a training `Config`) may write into
    its `train.output_dir`; returns "new" (missing or empty), "same" (it
    holds this run) or "start_over" (`start_over` and it is not empty: what
    it holds is to be moved aside, whatever it is). Reads only."""
    output_dir = config.train.output_dir
    where = f"train.output_dir={output_dir!r}"
    init_from = getattr(config.model, "init_from", None)
    if init_from is not None and is_within(init_from, output_dir):
        raise InputError(
            f"model.init_from={init_from!r} is inside {where}: training would "
            "write over the run it starts from. Use another train.output_dir."
        )
    if not os.path.exists(output_dir):
        return "new"
    if not os.path.isdir(output_dir):
        raise InputError(f"{where} is a file, not a directory.")
    entries = sorted(os.listdir(output_dir))
    if not entries:
        return "new"
    if start_over:
        return "start_over"
    if os.path.isfile(os.path.join(output_dir, CONFIG)):
        mine = identity(config.to_dict())
        theirs = saved_identity(output_dir)
        found = differences(theirs, mine)
        if not found:
            return "same"
        if theirs["task"] != mine["task"]:  # then data and model differ too
            found = [("task", theirs["task"], mine["task"])]
        shown = "; ".join(
            f"{key}: {theirs!r} there, {ours!r} here"
            for key, theirs, ours in found[:SHOWN]
        )
        more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
        problem = f"{where} holds another run ({shown}{more})."
    elif MANIFEST in entries:
        problem = (
            f"{where} holds a run manifest ({MANIFEST}) without the {CONFIG} "
            "that names its run."
        )
    else:
        listed = ", ".join(entries[:SHOWN]) + (", ..." if len(entries) > SHOWN else "")
        problem = f"{where} is not empty and holds no training run ({listed})."
    raise InputError(f"{problem} {way_out(output_dir)}")


def aside_path(output_dir, now=None):
    """A free sibling name for a directory moved aside:
    `<dir>.replaced-YYYYmmdd-HHMMSS` (with -2, -3, ... when taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = f"{os.path.normpath(os.path.abspath(output_dir))}.replaced-{stamp}"
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def move_aside(output_dir, progress=print):
    """Renames `output_dir` to `aside_path(output_dir)`; returns the new path."""
    aside = aside_path(output_dir)
    try:
        os.rename(output_dir, aside)
    except OSError as e:  # the working directory, a mount point, no rights
        raise InputError(
            f"--start-over could not rename train.output_dir={output_dir!r} to "
            f"{aside}: {e.strerror}. Move it yourself or train elsewhere."
        ) from None
    progress(f"Moved what was in {output_dir} aside to {aside} (start over).")
    return aside
