"""Masked sequence cross-entropy with label smoothing, and its use for
BERT's next-sentence classes."""

import keras
import tensorflow as tf
from keras import ops

from tfformer.errors import InputError


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Token-level cross-entropy over non-padding labels, with label smoothing.

    With smoothing e over V classes the target distribution is
    (1 - e) * one_hot(y) + e / V (as `keras.losses.CategoricalCrossentropy`
    defines it), so the loss per token is

        -(1 - e) * log p(y) - (e / V) * sum_v log p(v).

    Positions whose label is `pad_id` are ignored. The result is the mean over
    the real (non-padding) tokens of the batch, not over all positions, so
    short and long batches weigh each token the same. Under a tf.distribute
    strategy each replica takes the mean over its own tokens.

    Args:
        label_smoothing: float in [0, 1).
        pad_id: label id that marks padding.
        from_logits: `y_pred` are logits (True) or probabilities.
    """

    def __init__(
        self,
        label_smoothing=0.0,
        pad_id=0,
        from_logits=True,
        name="masked_sparse_categorical_crossentropy",
        **kwargs,
    ):
        if not 0.0 <= label_smoothing < 1.0:
            raise InputError(
                "label_smoothing must be in [0, 1). "
                f"Received: label_smoothing={label_smoothing}"
            )
        kwargs.pop("reduction", None)
        # "sum" of per-token values already divided by the token count.
        super().__init__(name=name, reduction="sum", **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.pad_id = int(pad_id)
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        y_pred = ops.cast(y_pred, "float32")
        if self.from_logits:
            log_probs = ops.log_softmax(y_pred, axis=-1)
        else:
            log_probs = ops.log(ops.clip(y_pred, 1e-7, 1.0))
        # (batch, T): log p(label) and the mean log p over the vocabulary.
        label_log_probs = ops.squeeze(
            ops.take_along_axis(log_probs, ops.expand_dims(y_true, -1), axis=-1), -1
        )
        nll = -label_log_probs
        if self.label_smoothing:
            e = self.label_smoothing
            nll = (1.0 - e) * nll - e * ops.mean(log_probs, axis=-1)
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), "float32")
        count = ops.maximum(ops.sum(mask), 1.0)
        # Keras divides mean-type losses by the replica count (the gradients of
        # the replicas are summed) but not "sum" losses; do it here, or
        # Mirrored training would use (and log) replicas x the loss.
        replicas = tf.distribute.get_replica_context()
        replicas = replicas.num_replicas_in_sync if replicas is not None else 1
        return nll * mask / (count * replicas)

    def get_config(self):
        config = super().get_config()
        config.pop("reduction", None)
        config.update(
            label_smoothing=self.label_smoothing,
            pad_id=self.pad_id,
            from_logits=self.from_logits,
        )
        return config


def with_padding_class(logits):
    """Class logits `(batch, n)` as `(batch, 1, n + 1)`: a class 0 first
    with logit -1e9 (never chosen), so labels shifted by one, with 0 for
    padding rows, go through the masked loss and metrics unchanged."""
    logits = ops.cast(logits, "float32")
    never = ops.full_like(logits[:, :1], -1e9)
    return ops.expand_dims(ops.concatenate([never, logits], axis=-1), 1)


@keras.saving.register_keras_serializable(package="tfformer")
class NextSentenceLoss(MaskedSparseCategoricalCrossentropy):
    """Cross-entropy of BERT's next-sentence logits `(batch, 2)` (class 0:
    B follows A, 1: B is random) against labels `(batch, 1)` shifted by one
    (1 = next, 2 = random) with 0 for padding rows, which are ignored."""

    def call(self, y_true, y_pred):
        return super().call(y_true, with_padding_class(y_pred))


@keras.saving.register_keras_serializable(package="tfformer")
class DistillationLoss(keras.losses.Loss):
    """Knowledge distillation's loss (Hinton et al., 2015) per example:

        w * T^2 * KL(softmax(t / T) || softmax(s / T))
            + (1 - w) * -log softmax(s)[y]

    for student logits `s` (`y_pred`), and `y_true` rows of the class id
    `y` (-1: none, which drops the second term) followed by the teacher's
    logits `t`. T^2 keeps the soft term's gradients at the hard term's
    scale as T grows. The batch's value is the mean over its examples
    (sample weights apply, as for any Keras loss).

    Args:
        temperature: T > 0.
        teacher_weight: w in [0, 1].
    """

    def __init__(
        self, temperature=2.0, teacher_weight=0.5, name="distillation", **kwargs
    ):
        if not temperature > 0:
            raise InputError(f"temperature must be > 0. Received: {temperature!r}")
        if not 0.0 <= teacher_weight <= 1.0:
            raise InputError(
                f"teacher_weight must be in [0, 1]. Received: {teacher_weight!r}"
            )
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)
        self.teacher_weight = float(teacher_weight)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "float32")
        y_pred = ops.cast(y_pred, "float32")
        label, teacher = y_true[:, 0], y_true[:, 1:]
        t = self.temperature
        theirs = ops.log_softmax(teacher / t, axis=-1)
        ours = ops.log_softmax(y_pred / t, axis=-1)
        soft = ops.sum(ops.exp(theirs) * (theirs - ours), axis=-1) * (t * t)
        ids = ops.expand_dims(ops.cast(ops.maximum(label, 0.0), "int32"), -1)
        log_probs = ops.log_softmax(y_pred, axis=-1)
        hard = -ops.squeeze(ops.take_along_axis(log_probs, ids, axis=-1), -1)
        hard = ops.where(label >= 0, hard, ops.zeros_like(hard))
        w = self.teacher_weight
        return w * soft + (1.0 - w) * hard

    def get_config(self):
        return {
            **super().get_config(),
            "temperature": self.temperature,
            "teacher_weight": self.teacher_weight,
        }
