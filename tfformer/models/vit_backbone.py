"""The Vision Transformer (Dosovitskiy et al. 2021), without its head."""

import keras

from tfformer.errors import InputError
from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import get_activation
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.patch_embedding import PatchEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.backbone import Backbone
from tfformer.models.common import encoder_stack


def _channel_values(name, values, num_channels):
    values = [float(v) for v in values]
    if len(values) != num_channels:
        raise InputError(
            f"{name} needs one value per channel ({num_channels}). "
            f"Received: {name}={values}"
        )
    return values


@keras.saving.register_keras_serializable(package="tfformer")
class ViTBackbone(Backbone):
    """A ViT encoder: patches become tokens (`PatchEmbedding`, with a class
    token and learned positions), pre-norm GELU encoder blocks follow, and
    a final LayerNorm.

    `(batch, image_size, image_size, num_channels)` float images in,
    `(batch, 1 + patches, hidden_dim)` out (token 0 is the class token).
    `ImageClassifier` adds the head on the class token. Defaults are
    ViT-B/16.

    With `pixel_mean` and `pixel_std` the backbone takes raw pixel values
    (0 to 255, as decoded) and normalizes them itself, (x - mean) / std per
    channel, so a server or a phone feeds it decoded pixels and nothing
    else.

    Args:
        image_size: int or (height, width).
        patch_size: square patch side; must divide the image size.
        num_channels: image channels.
        num_layers, hidden_dim, num_heads, intermediate_dim: sizes.
        dropout: dropout rate.
        activation_dropout: dropout on the FFN's hidden activations; None:
            `dropout`.
        activation: FFN activation (ViT's is the exact GELU).
        layer_norm_epsilon: epsilon of the layer norms.
        pixel_mean, pixel_std: per-channel statistics (`num_channels` floats
            each) of a normalization layer in front; None: the backbone
            takes images already normalized.
        dtype: dtype policy of every layer (None: the global policy).

    Attributes:
        pixel_normalization (None without statistics), patch_embedding,
        encoder_blocks (a list of `TransformerEncoderBlock`), encoder_norm.
    """

    presets = {
        "vit_tiny": dict(
            patch_size=4,
            num_layers=4,
            hidden_dim=128,
            num_heads=4,
            intermediate_dim=512,
        ),
        # ViT-B/16.
        "vit_base": dict(
            patch_size=16,
            num_layers=12,
            hidden_dim=768,
            num_heads=12,
            intermediate_dim=3072,
        ),
    }

    def __init__(
        self,
        image_size,
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
        dtype=None,
        **kwargs,
    ):
        height, width = (
            (image_size, image_size)
            if isinstance(image_size, int)
            else tuple(image_size)
        )
        check_positive_int("image_size", height)
        check_positive_int("image_size", width)
        check_positive_int("num_layers", num_layers)
        if (pixel_mean is None) != (pixel_std is None):
            raise InputError(
                "Give both pixel_mean and pixel_std, or neither. Received: "
                f"pixel_mean={pixel_mean}, pixel_std={pixel_std}"
            )
        policy = self.resolve_dtype(dtype)

        # === Layers, each created right before its first call ===
        images = keras.Input((height, width, num_channels), name="images")
        x = images
        pixel_normalization = None
        if pixel_mean is not None:
            pixel_mean = _channel_values("pixel_mean", pixel_mean, num_channels)
            pixel_std = _channel_values("pixel_std", pixel_std, num_channels)
            if min(pixel_std) <= 0:
                raise InputError(f"pixel_std must be positive. Received: {pixel_std}")
            pixel_normalization = keras.layers.Normalization(
                mean=pixel_mean,
                variance=[s * s for s in pixel_std],
                dtype=policy,
                name="pixel_normalization",
            )
            x = pixel_normalization(x)
        patch_embedding = PatchEmbedding(
            patch_size, hidden_dim, dtype=policy, name="patch_embedding"
        )
        x = patch_embedding(x)
        x = Dropout(dropout, dtype=policy, name="embedding_dropout")(x)
        x, blocks = encoder_stack(
            x,
            num_layers,
            policy,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            activation_dropout=activation_dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=True,
        )
        encoder_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="encoder_norm"
        )
        x = encoder_norm(x)
        super().__init__(inputs=images, outputs=x, dtype=policy, **kwargs)

        # === Handles and config ===
        self.pixel_normalization = pixel_normalization
        self.patch_embedding = patch_embedding
        self.encoder_blocks = blocks
        self.encoder_norm = encoder_norm
        self.image_size = image_size if isinstance(image_size, int) else [height, width]
        self.patch_size = patch_size
        self.num_channels = num_channels
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation_dropout = activation_dropout
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.pixel_mean = pixel_mean
        self.pixel_std = pixel_std

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "image_size": self.image_size,
                "patch_size": self.patch_size,
                "num_channels": self.num_channels,
                "num_layers": self.num_layers,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation_dropout": self.activation_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "pixel_mean": self.pixel_mean,
                "pixel_std": self.pixel_std,
            }
        )
        return config
