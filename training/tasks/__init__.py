"""Training tasks: one module each, registered here by name.

A training task owns what differs between translation, language modelling
and classification while a model trains: its config sections, raw splits,
preprocessing, model, loss and metrics (see `base.TrainingTask`). The trainer
asks the task; it never branches on its name. What a finished run does
(predict, evaluate) belongs to its predictor, `tfformer.training.predictors`.

Adding a task is one module here (a `TrainingTask` subclass bound to `TASK`),
one line below, a predictor, a config in `training/configs/` and its tests;
its exporter goes in `export/tasks/`.
"""

import importlib

from tfformer.errors import InputError

# name -> module of a trainable task; imported on first use, so config errors
# need no TensorFlow.
_TRAINABLE = {
    "translation": "tfformer.training.tasks.translation",
    "causal_lm": "tfformer.training.tasks.causal_lm",
    "text_classification": "tfformer.training.tasks.text_classification",
    "masked_lm": "tfformer.training.tasks.masked_lm",
    "image_classification": "tfformer.training.tasks.image_classification",
}
# Tasks whose runs only `tfformer-convert` makes: a config schema (their
# config.json parses), a predictor and a `NOT_TRAINABLE` message saying what
# to do instead; nothing to train.
_CONVERTED_ONLY = {
    "sentence_embedding": "tfformer.training.tasks.sentence_embedding",
}
TRAINABLE_TASKS = tuple(_TRAINABLE)
# Every task a config may name.
TASK_NAMES = (*TRAINABLE_TASKS, *_CONVERTED_ONLY)
DEFAULT_TASK = "translation"


def task_schema(name):
    """The `TaskSchema` of the task called `name`: its config sections and
    their checks (a `TrainingTask` for a trainable task)."""
    module = _TRAINABLE.get(name) or _CONVERTED_ONLY.get(name)
    if module is None:
        raise InputError(f"task must be one of {list(TASK_NAMES)}. Received: {name!r}")
    return importlib.import_module(module).TASK


def check_trainable(name):
    """Raises ValueError saying why when the task `name` cannot train (its
    module's `NOT_TRAINABLE`)."""
    if name in _CONVERTED_ONLY:
        raise InputError(importlib.import_module(_CONVERTED_ONLY[name]).NOT_TRAINABLE)


def get_task(name):
    """The `TrainingTask` called `name`.

    Raises:
        ValueError: `name` is no task a config may name, or one that cannot
            train (a converted-only task: the message says what to do).
    """
    check_trainable(name)
    if name not in _TRAINABLE:
        raise InputError(
            f"task must be one of {list(TRAINABLE_TASKS)}. Received: {name!r}"
        )
    return importlib.import_module(_TRAINABLE[name]).TASK
