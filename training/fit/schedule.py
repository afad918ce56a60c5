"""The learning-rate schedule of "Attention Is All You Need" (section 5.3)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = scale * hidden_dim^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warm-up for `warmup_steps`, then decay with the inverse square root
    of the step. Steps count from 1 (the optimizer's iteration 0 is step 1),
    so the first update is not taken with a zero learning rate. The peak,
    at step = warmup_steps, is scale * (hidden_dim * warmup_steps)^-0.5.
    """

    def __init__(self, hidden_dim, warmup_steps=4000, scale=1.0):
        for name, value in (("hidden_dim", hidden_dim), ("warmup_steps", warmup_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{name} must be a positive int. Received: {name}={value!r}"
                )
        if not scale > 0:
            raise ValueError(f"scale must be positive. Received: scale={scale!r}")
        self.hidden_dim = hidden_dim
        self.warmup_steps = warmup_steps
        self.scale = float(scale)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        rate = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        return self.scale * self.hidden_dim**-0.5 * rate

    def get_config(self):
        return {
            "hidden_dim": self.hidden_dim,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }
