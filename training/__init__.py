"""tfformer.training: data, tokenizers, tf.data pipelines, strategies and
`model.fit`, organised by job:

- `config`: the typed config (`load_config`);
- `tasks/`: one module per task (translation, causal_lm,
  text_classification), registered by name; the trainer and the commands
  ask the task and never branch on its name;
- `sources/` (raw examples), `text/` (tokenizers), `pipeline` (tf.data);
- `trainer`: `train(config)`; `callbacks`, `losses`, `metrics`,
  `schedules`, `plots`; `distribution/`: the `tf.distribute` strategies;
- `convert/`: Hugging Face checkpoints to run directories;
- `evaluation/`: scores and plots; `commands/`: the console commands.

Depends on `tfformer` (the model library, `tfformer.runs`, the run
directory format, and `tfformer.preprocessing`); never on `tfformer.export`.

    from tfformer.training import load_config, train
    result = train(load_config("training/configs/number_words.json"))

The names below are imported on first use.
"""

import importlib

# Registered with Keras on import, so that `keras.saving.load_model` can
# rebuild a saved run's compiled loss, metrics and schedule.
from tfformer.training import losses, metrics, schedules  # noqa: F401

_EXPORTS = {
    "Config": "tfformer.training.config",
    "load_config": "tfformer.training.config",
    "get_task": "tfformer.training.tasks",
    "build_dataset": "tfformer.training.trainer",
    "build_model": "tfformer.training.trainer",
    "compile_model": "tfformer.training.trainer",
    "train": "tfformer.training.trainer",
    "TrainResult": "tfformer.training.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tfformer.training' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
