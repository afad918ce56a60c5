"""Images to tokens through a small convolution stack (Compact Convolutional
Transformers, Hassani et al. 2021)."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.validation import check_positive_int


@keras.saving.register_keras_serializable(package="tfformer")
class ConvolutionalTokenizer(keras.layers.Layer):
    """CCT's tokenizer: `num_layers` times a 3x3 convolution (stride 1, no
    bias), ReLU and a 3x3 max-pool of stride 2, then each position of the
    last feature map is a token, with a learned position added.

        x_{l+1} = MaxPool_{3x3, /2}(ReLU(Conv_{3x3}(x_l)))

    The pool pads one pixel on every side as CCT's `MaxPool2d(3, 2, 1)`
    does; the ReLU in front makes its inputs non-negative, so zero padding
    then a valid pool is that exact map (and two TFLite builtins, PAD and
    MAX_POOL_2D). The convolutions have `channels` filters, the last one
    `hidden_dim`. Each layer halves the height and width: a 32x32 image
    with 2 layers gives 8x8 = 64 tokens. There is no class token; pool the
    tokens with `AttentionPooling` (CCT's sequence pooling).

    Args:
        hidden_dim: token width (the last convolution's filters).
        num_layers: convolution + pool layers.
        channels: filters of the convolutions before the last.
        kernel_initializer: initializer of the convolutions (CCT's is He
            normal).

    Call arguments:
        inputs: `(batch, height, width, channels)` images; height and width
            must be known and divisible by `2 ** num_layers`.

    Returns:
        `(batch, height * width / 4 ** num_layers, hidden_dim)`, row-major
        over the final feature map.

    Example:
    >>> tokenize = ConvolutionalTokenizer(hidden_dim=128, num_layers=2)
    >>> tokens = tokenize(keras.random.normal((2, 32, 32, 3)))  # (2, 64, 128)
    """

    def __init__(
        self,
        hidden_dim,
        num_layers=2,
        channels=64,
        kernel_initializer="he_normal",
        **kwargs,
    ):
        check_positive_int("hidden_dim", hidden_dim)
        check_positive_int("num_layers", num_layers)
        check_positive_int("channels", channels)
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.channels = channels
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    @property
    def stride(self):
        """Pixels per token along each side."""
        return 2**self.num_layers

    def build(self, inputs_shape):
        if len(inputs_shape) != 4:
            raise InputError(
                "ConvolutionalTokenizer expects images (batch, height, width, "
                f"channels). Received: inputs with shape {inputs_shape}"
            )
        height, width = inputs_shape[1], inputs_shape[2]
        if (
            height is None
            or width is None
            or height % self.stride
            or width % self.stride
        ):
            raise InputError(
                "Image height and width must be known and divisible by "
                f"2 ** num_layers = {self.stride}. Received: inputs with shape "
                f"{inputs_shape}"
            )
        self.grid = (height // self.stride, width // self.stride)
        self.convolutions = []
        shape = tuple(inputs_shape)
        for i in range(self.num_layers):
            filters = self.hidden_dim if i == self.num_layers - 1 else self.channels
            convolution = keras.layers.Conv2D(
                filters,
                3,
                padding="same",
                use_bias=False,
                kernel_initializer=self.kernel_initializer.clone(),
                dtype=self.dtype_policy,
                name=f"convolution_{i}",
            )
            convolution.build(shape)
            self.convolutions.append(convolution)
            shape = (shape[0], shape[1] // 2, shape[2] // 2, filters)
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(1, self.grid[0] * self.grid[1], self.hidden_dim),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        )
        self.built = True

    def call(self, inputs):
        x = inputs
        for convolution in self.convolutions:
            x = ops.relu(convolution(x))
            x = ops.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
            x = ops.max_pool(x, 3, strides=2, padding="valid")
        tokens = ops.reshape(x, (-1, self.grid[0] * self.grid[1], self.hidden_dim))
        return tokens + ops.cast(self.position_embeddings, tokens.dtype)

    def compute_output_shape(self, inputs_shape):
        tokens = (inputs_shape[1] // self.stride) * (inputs_shape[2] // self.stride)
        return (inputs_shape[0], tokens, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_dim": self.hidden_dim,
                "num_layers": self.num_layers,
                "channels": self.channels,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
            }
        )
        return config
