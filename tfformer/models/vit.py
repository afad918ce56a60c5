"""The Vision Transformer (Dosovitskiy et al. 2021)."""

import keras

from tfformer.layers.dropout import Dropout
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
    activation_dropout=None,
    activation="gelu",
    layer_norm_epsilon=1e-6,
    pixel_mean=None,
    pixel_std=None,
    name="vit",
):
    """Builds a ViT image classifier as a functional `keras.Model`.

    `(batch, image_size, image_size, num_channels)` float images in,
    `(batch, num_classes)` float32 logits out. Patches become tokens
    (`PatchEmbedding`, with a class token and learned positions), pre-norm GELU
    encoder blocks follow, and a final LayerNorm and a linear head read the
    class token. Defaults are ViT-B/16.

    With `pixel_mean` and `pixel_std`, the model takes raw pixel values (0 to
    255, as decoded) and normalizes them itself, (x - mean) / std per channel,
    so a server or a phone feeds it decoded pixels and nothing else.

    Args:
        image_size: int or (height, width).
        num_classes: classes of the head.
        patch_size: square patch side; must divide the image size.
        num_channels: image channels.
        num_layers, hidden_dim, num_heads, intermediate_dim: sizes.
        dropout: dropout rate.
        activation_dropout: dropout on the FFN's hidden activations; None:
            `dropout`. keras-hub's blocks, GPT-2 and BERT have none (0.0).
        activation: FFN activation (ViT's is the exact GELU).
        layer_norm_epsilon: epsilon of the layer norms.
        pixel_mean, pixel_std: per-channel statistics (`num_channels` floats
            each) of a normalization layer in front; None: the model takes
            images already normalized.
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
    x = images
    if (pixel_mean is None) != (pixel_std is None):
        raise ValueError(
            "Give both pixel_mean and pixel_std, or neither. Received: "
            f"pixel_mean={pixel_mean}, pixel_std={pixel_std}"
        )
    if pixel_mean is not None:
        mean, std = (
            _channel_values("pixel_mean", pixel_mean, num_channels),
            (_channel_values("pixel_std", pixel_std, num_channels)),
        )
        if min(std) <= 0:
            raise ValueError(f"pixel_std must be positive. Received: {pixel_std}")
        x = keras.layers.Normalization(
            mean=mean, variance=[s * s for s in std], name="pixel_normalization"
        )(x)
    x = PatchEmbedding(patch_size, hidden_dim, name="patch_embedding")(x)
    x = Dropout(dropout, name="embedding_dropout")(x)
    x = encoder_stack(
        x,
        num_layers,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        activation_dropout=activation_dropout,
        activation=activation,
        layer_norm_epsilon=layer_norm_epsilon,
        normalize_first=True,
    )
    x = LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0, :])
    return keras.Model(images, float32_logits(logits), name=name)


def _channel_values(name, values, num_channels):
    values = [float(v) for v in values]
    if len(values) != num_channels:
        raise ValueError(
            f"{name} needs one value per channel ({num_channels}). "
            f"Received: {name}={values}"
        )
    return values
