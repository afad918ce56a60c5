"""tfformer: Transformer layers and models for Keras 3.

`tfformer.layers` holds the building blocks, `tfformer.models` the functional
model builders (encoder-decoder, BERT, GPT, ViT) and their ready-made sizes.
"""

__version__ = "0.1.0"

from tfformer import layers, models

__all__ = ["layers", "models"]
