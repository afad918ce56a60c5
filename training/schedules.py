"""Learning-rate schedules: the one of "Attention Is All You Need" (section
5.3), and linear warmup + cosine decay (GPT-2/3, nanoGPT, Chinchilla)."""

import math

import keras
from keras import ops

from tfformer.errors import InputError


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
                raise InputError(
                    f"{name} must be a positive int. Received: {name}={value!r}"
                )
        if not scale > 0:
            raise InputError(f"scale must be positive. Received: scale={scale!r}")
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


@keras.saving.register_keras_serializable(package="tfformer")
class WarmupCosineSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `peak`, then a half cosine (or a straight line) down
    to `peak * final_fraction`.

    lr(s) = peak * s / warmup_steps for s <= warmup_steps (steps count from 1,
    as in `TransformerSchedule`); after it, with p = (s - warmup_steps) /
    (total_steps - warmup_steps) capped at 1,
    lr(s) = floor + (peak - floor) * (1 + cos(pi * p)) / 2 ("cosine") or
    floor + (peak - floor) * (1 - p) ("linear", BERT's fine-tuning
    schedule), floor = peak * final_fraction. Flat at the floor after
    `total_steps`.
    """

    def __init__(
        self,
        peak,
        warmup_steps,
        total_steps,
        final_fraction=0.1,
        decay="cosine",
        clock="steps",
    ):
        if decay not in ("cosine", "linear"):
            raise InputError(
                f"decay must be 'cosine' or 'linear'. Received: decay={decay!r}"
            )
        for name, value in (
            ("warmup_steps", warmup_steps),
            ("total_steps", total_steps),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(
                    f"{name} must be a positive int. Received: {name}={value!r}"
                )
        if total_steps <= warmup_steps:
            raise InputError(
                "total_steps must exceed warmup_steps. Received: "
                f"total_steps={total_steps}, warmup_steps={warmup_steps}"
            )
        if not peak > 0:
            raise InputError(f"peak must be positive. Received: peak={peak!r}")
        if not 0.0 <= final_fraction <= 1.0:
            raise InputError(
                f"final_fraction must be in [0, 1]. Received: {final_fraction!r}"
            )
        if clock not in ("steps", "budget"):
            raise InputError(
                f"clock must be 'steps' or 'budget'. Received: clock={clock!r}"
            )
        self.clock = clock
        # With clock="budget": the share of the time budget used so far, and
        # that share when warmup ended; `TimeBudget` sets both.
        self.budget_used = keras.Variable(0.0, trainable=False, name="budget_used")
        self.decay_start = keras.Variable(0.0, trainable=False, name="decay_start")
        self.peak = float(peak)
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.final_fraction = float(final_fraction)
        self.decay = decay

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup_rate = self.peak * step / self.warmup_steps
        if self.clock == "budget":
            # Decay over the time left after warmup, whatever the speed.
            start = ops.convert_to_tensor(self.decay_start)
            progress = ops.clip(
                (ops.convert_to_tensor(self.budget_used) - start)
                / ops.maximum(1.0 - start, 1e-6),
                0,
                1,
            )
        else:
            progress = ops.clip(
                (step - self.warmup_steps) / (self.total_steps - self.warmup_steps),
                0,
                1,
            )
        floor = self.peak * self.final_fraction
        # The share of (peak - floor) left after `progress` of the decay.
        if self.decay == "linear":
            share_left = 1.0 - progress
        else:
            share_left = 0.5 * (1 + ops.cos(math.pi * progress))
        return ops.where(
            step <= self.warmup_steps,
            warmup_rate,
            floor + (self.peak - floor) * share_left,
        )

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "final_fraction": self.final_fraction,
            "decay": self.decay,
            "clock": self.clock,
        }
