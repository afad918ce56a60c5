"""tfformer: Transformer layers and models for Keras 3.

`tfformer.layers` holds the building blocks, `tfformer.models` the functional
model builders (encoder-decoder, BERT, GPT, ViT) and their ready-made sizes,
`tfformer.decoding` KV-cached greedy/beam/sampled generation. These three are
the backend-neutral model library.

`tfformer.training` (from the repository's `training/` folder) and
`tfformer.export` (from `export/`) are the training program and the
exporters; `tfformer.rundir` is the run-directory format both of them use.
None of these is imported by the model library.
"""

import importlib

__version__ = "0.1.0"

_SUBPACKAGES = ("layers", "models", "decoding")
__all__ = list(_SUBPACKAGES)


def __getattr__(name):
    # Lazy, so `import tfformer.training.config` does not load Keras.
    if name in _SUBPACKAGES:
        return importlib.import_module(f"tfformer.{name}")
    raise AttributeError(f"module 'tfformer' has no attribute {name!r}")
