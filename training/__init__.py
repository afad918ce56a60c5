"""Training: data, tokenizers, tf.data pipelines, strategies and `model.fit`.

Depends on `tfformer`; never on `export`.

    from training import load_config, train
    result = train(load_config("training/configs/number_words.json"))

The names below are imported on first use, so `tfformer-train --help` and
config errors come back without loading TensorFlow.
"""

import importlib

_EXPORTS = {
    "Config": "training.config",
    "load_config": "training.config",
    "build_dataset": "training.data",
    "build_model": "training.trainer",
    "compile_model": "training.trainer",
    "train": "training.trainer",
    "TrainResult": "training.trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'training' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
