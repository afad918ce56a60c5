"""tfformer.training: data, tokenizers, tf.data pipelines, strategies and
`model.fit`, organised by job:

- `config`: the typed config (`load_config`);
- `tasks/`: one module per trainable task (translation, causal_lm,
  text_classification, masked_lm, image_classification), registered by
  name; the trainer asks the task and never branches on its name;
- `predictors/`: one module per task (those and sentence_embedding, whose
  runs only come from `tfformer-convert`): a finished run used from Python
  (`tfformer.load`), which the prediction and evaluation commands call;
- `sources/` (raw examples), `text/` (tokenizers), `pipeline` (tf.data);
- `trainer`: `train(config)`; `callbacks`, `losses`, `metrics`,
  `schedules`, `plots`; `distribution/`: the `tf.distribute` strategies;
- `convert/`: Hugging Face checkpoints to run directories;
- `evaluation/`: scores and plots; `commands/`: the console commands, thin
  shells over the functions above.

Depends on `tfformer` (the model library, `tfformer.runs`, the run
directory format, and `tfformer.preprocessing`); never on `tfformer.export`.

    from tfformer.training import load, load_config, train
    config = load_config("training/configs/number_words.json")
    train(config)
    load(config.train.output_dir).translate(["twenty-one"])

The names below are imported on first use.
"""

import importlib

# Registered with Keras on import, so that `keras.saving.load_model` can
# rebuild a saved run's compiled loss, metrics and schedule.
from tfformer import startup as _startup

if not _startup.help_only():
    from tfformer.training import losses, metrics, schedules  # noqa: F401

_EXPORTS = {
    "Config": "tfformer.training.config",
    "load_config": "tfformer.training.config",
    "get_task": "tfformer.training.tasks",
    "load": "tfformer.training.predictors",
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
