"""Tasks: one module each, registered here by name.

A task owns everything that differs between translation, language modelling
and classification: its config sections, raw splits, preprocessing, model,
loss and metrics, evaluation, prediction and the predictions of its exported
models (see `base.Task`). The trainer and the commands ask the task; none of
them branches on its name.

Adding a task is one module here (a `Task` subclass bound to `TASK`), one
line below, a config in `training/configs/` and its tests; its exporters go
in `export/tasks/`.
"""

import importlib

# name -> module; imported on first use, so config errors need no TensorFlow.
_MODULES = {
    "translation": "tfformer.training.tasks.translation",
    "causal_lm": "tfformer.training.tasks.causal_lm",
    "text_classification": "tfformer.training.tasks.text_classification",
    "masked_lm": "tfformer.training.tasks.masked_lm",
    "image_classification": "tfformer.training.tasks.image_classification",
    "sentence_embedding": "tfformer.training.tasks.sentence_embedding",
}
TASK_NAMES = tuple(_MODULES)
DEFAULT_TASK = "translation"


def get_task(name):
    """The registered `Task` instance called `name`."""
    if name not in _MODULES:
        raise ValueError(f"task must be one of {list(TASK_NAMES)}. Received: {name!r}")
    return importlib.import_module(_MODULES[name]).TASK
