"""Image patches to a token sequence with a class token (ViT, Dosovitskiy et al.)."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.validation import check_positive_int


@keras.saving.register_keras_serializable(package="tfformer")
class PatchEmbedding(keras.layers.Layer):
    """Splits an image into patches, embeds them and prepends a class token.

        z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos     (ViT, equation 1)

    The linear patch projection E is a convolution with kernel and stride equal
    to the patch size, which is the same map and keeps the image layout.

    Args:
        patch_size: side of the square patches, in pixels.
        hidden_dim: embedding width.
        kernel_initializer: initializer of the patch projection.

    Call arguments:
        inputs: `(batch, height, width, channels)` images; height and width
            must be known and divisible by `patch_size`.

    Returns:
        `(batch, 1 + num_patches, hidden_dim)`; position 0 is the class token.

    Example:
    >>> embed = PatchEmbedding(patch_size=4, hidden_dim=64)
    >>> tokens = embed(keras.random.normal((2, 32, 32, 3)))  # (2, 65, 64)
    """

    def __init__(
        self, patch_size, hidden_dim, kernel_initializer="glorot_uniform", **kwargs
    ):
        check_positive_int("patch_size", patch_size)
        check_positive_int("hidden_dim", hidden_dim)
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.hidden_dim = hidden_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, inputs_shape):
        if len(inputs_shape) != 4:
            raise InputError(
                "PatchEmbedding expects images (batch, height, width, channels). "
                f"Received: inputs with shape {inputs_shape}"
            )
        height, width = inputs_shape[1], inputs_shape[2]
        if (
            height is None
            or width is None
            or height % self.patch_size
            or width % self.patch_size
        ):
            raise InputError(
                f"Image height and width must be known and divisible by "
                f"patch_size={self.patch_size}. Received: inputs with shape "
                f"{inputs_shape}"
            )
        self.num_patches = (height // self.patch_size) * (width // self.patch_size)
        self.projection = keras.layers.Conv2D(
            self.hidden_dim,
            self.patch_size,
            strides=self.patch_size,
            kernel_initializer=self.kernel_initializer.clone(),
            dtype=self.dtype_policy,
            name="projection",
        )
        self.projection.build(inputs_shape)
        self.class_token = self.add_weight(
            name="class_token", shape=(1, 1, self.hidden_dim), initializer="zeros"
        )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(1, self.num_patches + 1, self.hidden_dim),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )
        self.built = True

    def call(self, inputs):
        patches = self.projection(inputs)  # (B, H/p, W/p, hidden)
        patches = ops.reshape(patches, (-1, self.num_patches, self.hidden_dim))
        class_token = ops.cast(self.class_token, patches.dtype)
        class_token = ops.broadcast_to(
            class_token, (ops.shape(patches)[0], 1, self.hidden_dim)
        )
        tokens = ops.concatenate([class_token, patches], axis=1)  # (B, 1+N, hidden)
        return tokens + ops.cast(self.position_embeddings, tokens.dtype)

    def compute_output_shape(self, inputs_shape):
        height, width = inputs_shape[1], inputs_shape[2]
        patches = (height // self.patch_size) * (width // self.patch_size)
        return (inputs_shape[0], patches + 1, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "hidden_dim": self.hidden_dim,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
