"""The Vision Transformer (Dosovitskiy et al. 2021)."""

import keras

from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.patch_embedding import PatchEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.common import encoder_stack, float32_logits


def vit(
    image_size,
    num_classes,
    *,
    patch_size=16,
    num_channels=3,
    num_layers=12,
    hidden_dim=768,
    num_heads=12,
    intermediate_dim=3072,
    dropout=0.0,
    layer_norm_epsilon=1e-6,
    name="vit",
):
    """Builds a ViT image classifier as a functional `keras.Model`.

    `(batch, image_size, image_size, num_channels)` float images in,
    `(batch, num_classes)` float32 logits out. Patches become tokens
    (`PatchEmbedding`, with a class token and learned positions), pre-norm GELU
    encoder blocks follow, and a final LayerNorm and a linear head read the
    class token. Defaults are ViT-B/16.

    Args:
        image_size: int or (height, width).
        num_classes: classes of the head.
        patch_size: square patch side; must divide the image size.
        num_channels: image channels.
        num_layers, hidden_dim, num_heads, intermediate_dim: sizes.
        dropout: dropout rate.
        layer_norm_epsilon: epsilon of the layer norms.
        name: the model's name.
    """
    height, width = (
        (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    )
    check_positive_int("image_size", height)
    check_positive_int("image_size", width)
    check_positive_int("num_classes", num_classes)
    check_positive_int("num_layers", num_layers)
    images = keras.Input((height, width, num_channels), name="images")
    x = PatchEmbedding(patch_size, hidden_dim, name="patch_embedding")(images)
    x = keras.layers.Dropout(dropout, name="embedding_dropout")(x)
    x = encoder_stack(
        x,
        num_layers,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        activation="gelu",
        layer_norm_epsilon=layer_norm_epsilon,
        normalize_first=True,
    )
    x = LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0, :])
    return keras.Model(images, float32_logits(logits), name=name)
