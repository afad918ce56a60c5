"""The position-wise feed-forward network of the Transformer."""

import keras

from tfformer.errors import InputError
from tfformer.layers.dropout import Dropout
from tfformer.layers.validation import check_positive_int, check_rate


@keras.saving.register_keras_serializable(package="tfformer")
def gelu_approximate(x):
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    x^3))): GPT-2's "gelu_new" (Keras's "gelu" is the exact, erf form)."""
    return keras.activations.gelu(x, approximate=True)


def get_activation(identifier):
    """`keras.activations.get`, which also knows "gelu_approximate"."""
    if identifier == "gelu_approximate":
        return gelu_approximate
    return keras.activations.get(identifier)


@keras.saving.register_keras_serializable(package="tfformer")
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network (paper section 3.3).

        FFN(x) = act(x W1 + b1) W2 + b2,   act = max(0, .) in the paper

    or, gated (GLU variants, Shazeer 2020; SwiGLU in Llama with act = SiLU):

        FFN(x) = (act(x W_gate + b_gate) * (x W1 + b1)) W2 + b2

    Args:
        intermediate_dim: width of the hidden layer (d_ff, 2048 in the paper).
        activation: "relu" (the paper), "gelu" (BERT, ViT; exact),
            "gelu_approximate" (GPT-2's tanh form) or any Keras activation.
        dropout: dropout on the hidden activations.
        output_dim: output width; defaults to the input's.
        gated: add the gate projection (`gate`, with the activation; the
            `intermediate` projection is then linear).
        use_bias: whether the projections have biases (Llama's have none).
        kernel_initializer, bias_initializer: initializers of every projection.

    Call arguments:
        inputs: `(..., features)`.
        training: whether dropout is active.

    Returns:
        `(..., output_dim)`.

    Example:
    >>> ffn = FeedForward(intermediate_dim=256, activation="gelu")
    >>> y = ffn(keras.random.normal((2, 10, 64)))  # (2, 10, 64)
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        dropout=0.0,
        output_dim=None,
        gated=False,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        check_positive_int("intermediate_dim", intermediate_dim)
        check_positive_int("output_dim", output_dim, allow_none=True)
        check_rate("dropout", dropout)
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.activation = get_activation(activation)
        self.dropout = dropout
        self.output_dim = output_dim
        self.gated = gated
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        if inputs_shape[-1] is None:
            raise InputError(
                "FeedForward needs a known last dimension. "
                f"Received: inputs with shape {inputs_shape}"
            )

        def dense(units, activation, name):
            return keras.layers.Dense(
                units,
                activation=activation,
                use_bias=self.use_bias,
                kernel_initializer=self.kernel_initializer.clone(),
                bias_initializer=self.bias_initializer.clone(),
                dtype=self.dtype_policy,
                name=name,
            )

        self.intermediate_dense = dense(
            self.intermediate_dim,
            None if self.gated else self.activation,
            "intermediate",
        )
        self.intermediate_dense.build(inputs_shape)
        if self.gated:
            self.gate_dense = dense(self.intermediate_dim, self.activation, "gate")
            self.gate_dense.build(inputs_shape)
        self.dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = dense(self.output_dim or inputs_shape[-1], None, "output")
        self.output_dense.build((*inputs_shape[:-1], self.intermediate_dim))
        self.built = True

    def call(self, inputs, training=None):
        hidden = self.intermediate_dense(inputs)
        if self.gated:
            hidden = self.gate_dense(inputs) * hidden
        hidden = self.dropout_layer(hidden, training=training)
        return self.output_dense(hidden)

    def compute_output_shape(self, inputs_shape):
        return (*inputs_shape[:-1], self.output_dim or inputs_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "output_dim": self.output_dim,
                "gated": self.gated,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
