"""Layer normalization written as (x - mean) * rsqrt(var + eps) * gamma + beta.

Keras's `LayerNormalization` computes `x * inv + (beta - mean * inv)`: the
same function, but its `-mean` is a NEG op that TF 2.21's TFLite quantizer
does not quantize, so an otherwise integer-only model keeps a float island
(QUANTIZE, NEG, DEQUANTIZE) in every layer norm and cannot run on an
integer-only accelerator. Subtracting the mean instead gives a SUB, which
quantizes. The weights (`gamma`, `beta`), the config and the results (within
float rounding) are Keras's; models saved with Keras's layer load as before.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (mean and variance over `axis`),
    computed in at least float32 as Keras does, with a TFLite lowering that
    quantizes to integer-only ops. `rms_scaling=True` keeps Keras's own
    computation."""

    def call(self, inputs):
        if self.rms_scaling:
            return super().call(inputs)
        compute_dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, compute_dtype)
        mean = ops.mean(x, axis=self.axis, keepdims=True)
        centred = x - mean
        variance = ops.mean(ops.square(centred), axis=self.axis, keepdims=True)
        outputs = centred * ops.rsqrt(variance + self.epsilon)
        if self.scale:
            outputs = outputs * self._broadcast(self.gamma, x)
        if self.center:
            outputs = outputs + self._broadcast(self.beta, x)
        return ops.cast(outputs, self.compute_dtype)

    def _broadcast(self, weight, x):
        """`weight` (shaped as the normalized axes) cast to `x`'s dtype and
        shaped to broadcast against `x` (as Keras does for several axes)."""
        weight = ops.cast(weight, x.dtype)
        rank = len(x.shape)
        axes = sorted(a % rank for a in self.axis)
        if axes == list(range(rank - len(axes), rank)):
            return weight  # trailing axes: broadcasts as it is
        shape = [1] * rank
        for a, size in zip(axes, weight.shape, strict=True):
            shape[a] = size
        return ops.reshape(weight, shape)
