"""Root-mean-square layer normalization (Zhang and Sennrich 2019; Llama)."""

import keras
from keras import ops

from tfformer.errors import InputError
from tfformer.layers.validation import check_positive_number


@keras.saving.register_keras_serializable(package="tfformer")
class RMSNormalization(keras.layers.Layer):
    """Scales each vector by the inverse of its root mean square:

        y = x / sqrt(mean(x^2) + epsilon) * gamma

    over the last axis, with no centring and no offset (Llama, T5, Gemma
    without its +1). Computed in at least float32 and cast back to the
    input's dtype before the scale is applied, as Hugging Face's
    `LlamaRMSNorm` does, so half-precision models round alike.

    Keras's own `LayerNormalization(rms_scaling=True)` divides by the
    standard deviation instead (deprecated for that reason). Keras 3.15's
    `keras.layers.RMSNormalization` computes in the layer's dtype and names
    its weight `scale`; this layer keeps the float32 upcast Llama's weights
    were trained with and the `gamma` of tfformer's other norms.

    Args:
        epsilon: added to the mean square.

    Example:
    >>> norm = RMSNormalization(epsilon=1e-5)
    >>> y = norm(keras.random.normal((2, 7, 16)))  # (2, 7, 16)
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        check_positive_number("epsilon", epsilon)
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.supports_masking = True

    def build(self, inputs_shape):
        if inputs_shape[-1] is None:
            raise InputError(
                "RMSNormalization needs a known last dimension. "
                f"Received: inputs with shape {inputs_shape}"
            )
        self.gamma = self.add_weight(
            name="gamma", shape=(inputs_shape[-1],), initializer="ones"
        )
        self.built = True

    def call(self, inputs):
        compute_dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, compute_dtype)
        x = x * ops.rsqrt(
            ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon
        )
        x = ops.cast(x, self.compute_dtype)
        return x * ops.cast(self.gamma, self.compute_dtype)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config
