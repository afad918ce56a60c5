"""The Vision Transformer (Dosovitskiy et al. 2021), without its head, and
its compact convolutional form (CCT, Hassani et al. 2021)."""

import keras

from tfformer.errors import InputError
from tfformer.layers.convolutional_tokenizer import ConvolutionalTokenizer
from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import get_activation
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.patch_embedding import PatchEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.backbone import Backbone
from tfformer.models.common import encoder_stack

TOKENIZERS = ("patch", "convolution")


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
    """A ViT encoder: the image becomes tokens, pre-norm GELU encoder blocks
    follow, and a final LayerNorm.

    Two tokenizers:
    - "patch" (ViT): non-overlapping `patch_size` patches, linearly
      embedded (`PatchEmbedding`), with a class token in front and learned
      positions. Out: `(batch, 1 + patches, hidden_dim)`, token 0 the
      class token.
    - "convolution" (CCT): `tokenizer_layers` 3x3 convolutions, each with
      ReLU and a stride-2 max-pool (`ConvolutionalTokenizer`), learned
      positions and no class token. Out: `(batch, H W / 4 **
      tokenizer_layers, hidden_dim)`. Convolutions bring the locality a
      small data set cannot teach attention; `ImageClassifier` pools these
      tokens with `AttentionPooling` (CCT's sequence pooling).

    `(batch, image_size, image_size, num_channels)` float images in.
    Defaults are ViT-B/16; `cct_4_3x2` is CCT-4/3x2 (0.48 M parameters at
    CIFAR-10's 10 classes).

    With `pixel_mean` and `pixel_std` the backbone takes raw pixel values
    (0 to 255, as decoded) and normalizes them itself, (x - mean) / std per
    channel, so a server or a phone feeds it decoded pixels and nothing
    else.

    Args:
        image_size: int or (height, width).
        patch_size: square patch side of the "patch" tokenizer; must divide
            the image size. None: 16.
        tokenizer: "patch" or "convolution".
        tokenizer_layers: convolution + pool layers of the "convolution"
            tokenizer; `2 ** tokenizer_layers` must divide the image size.
        tokenizer_channels: filters of its convolutions before the last
            (the last has `hidden_dim`).
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
        pixel_normalization (None without statistics), image_tokenizer (the
        `PatchEmbedding` or `ConvolutionalTokenizer`), patch_embedding (the
        `PatchEmbedding`; None with the convolution tokenizer),
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
        # CCT-4/3x2 (Hassani et al. 2021, table 1): 2 convolution layers,
        # 4 blocks of width 128, 2 heads, MLP ratio 1.
        "cct_4_3x2": dict(
            tokenizer="convolution",
            tokenizer_layers=2,
            tokenizer_channels=64,
            num_layers=4,
            hidden_dim=128,
            num_heads=2,
            intermediate_dim=128,
        ),
    }

    def __init__(
        self,
        image_size,
        *,
        patch_size=None,
        tokenizer="patch",
        tokenizer_layers=2,
        tokenizer_channels=64,
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
        if tokenizer not in TOKENIZERS:
            raise InputError(
                f"tokenizer must be one of {TOKENIZERS}. Received: "
                f"tokenizer={tokenizer!r}"
            )
        if tokenizer == "convolution" and patch_size is not None:
            raise InputError(
                "patch_size applies to tokenizer='patch'; the convolution "
                "tokenizer's token grid is set by tokenizer_layers. Received: "
                f"patch_size={patch_size}"
            )
        if tokenizer == "patch" and patch_size is None:
            patch_size = 16
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
        if tokenizer == "patch":
            image_tokenizer = PatchEmbedding(
                patch_size, hidden_dim, dtype=policy, name="patch_embedding"
            )
        else:
            image_tokenizer = ConvolutionalTokenizer(
                hidden_dim,
                tokenizer_layers,
                tokenizer_channels,
                dtype=policy,
                name="convolutional_tokenizer",
            )
        x = image_tokenizer(x)
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
        self.image_tokenizer = image_tokenizer
        self.patch_embedding = image_tokenizer if tokenizer == "patch" else None
        self.encoder_blocks = blocks
        self.encoder_norm = encoder_norm
        self.image_size = image_size if isinstance(image_size, int) else [height, width]
        self.patch_size = patch_size
        self.tokenizer = tokenizer
        self.tokenizer_layers = tokenizer_layers
        self.tokenizer_channels = tokenizer_channels
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

    @property
    def class_token(self):
        """Whether token 0 is a class token (the patch tokenizer's)."""
        return self.tokenizer == "patch"

    @property
    def token_stride(self):
        """Pixels per token along each side of the image."""
        if self.tokenizer == "patch":
            return self.patch_size
        return 2**self.tokenizer_layers

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "image_size": self.image_size,
                "patch_size": self.patch_size,
                "tokenizer": self.tokenizer,
                "tokenizer_layers": self.tokenizer_layers,
                "tokenizer_channels": self.tokenizer_channels,
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
