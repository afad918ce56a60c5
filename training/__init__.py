"""tfformer.training: data, tokenizers, tf.data pipelines, strategies and
`model.fit`, organised by job:

- `config`: the typed config (`load_config`);
- `tasks/`: one module per task (translation, causal_lm,
  text_classification), registered by name; the trainer and the commands
  ask the task and never branch on its name;
- `sources/` (raw examples), `text/` (tokenizers), `pipeline` (tf.data);
- `fit/`: `train(config)`, callbacks, loss, metrics, schedule, strategies;
- `evaluation/`: scores and plots; `commands/`: the console commands.

Depends on `tfformer` (the model library and `tfformer.rundir`, the run
directory format); never on `tfformer.export`.

    from tfformer.training import load_config, train
    result = train(load_config("training/configs/number_words.json"))

The names below are imported on first use.
"""

import importlib

# Registered with Keras on import, so that `keras.saving.load_model` can
# rebuild a saved run's compiled loss, metrics and schedule.
from tfformer.training.fit import losses, metrics, schedule  # noqa: F401

_EXPORTS = {
    "Config": "tfformer.training.config",
    "load_config": "tfformer.training.config",
    "get_task": "tfformer.training.tasks",
    "build_dataset": "tfformer.training.fit.trainer",
    "build_model": "tfformer.training.fit.trainer",
    "compile_model": "tfformer.training.fit.trainer",
    "train": "tfformer.training.fit.trainer",
    "TrainResult": "tfformer.training.fit.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfformer.training' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
