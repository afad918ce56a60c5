"""tfformer: Transformer layers and models for Keras 3.

`tfformer.layers` holds the building blocks, `tfformer.models` the functional
model builders (encoder-decoder, BERT, GPT, ViT) and their ready-made sizes,
`tfformer.decoding` KV-cached greedy/beam/sampled generation. These are the
backend-neutral model library.

`tfformer.training` (from the repository's `training/` folder) and
`tfformer.export` (from `export/`) are the training program and the
exporters; `tfformer.runs` is the run-directory format both of them use and
`tfformer.preprocessing` the core-op tokenizers and image decoding both run.
None of these is imported by the model library.
"""

__version__ = "0.1.0"

# Imported eagerly: importing them registers every layer with Keras, so that
# `import tfformer` is enough for `keras.saving.load_model` to read a model.
from tfformer import layers, models

__all__ = ["layers", "models"]
