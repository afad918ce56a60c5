"""Masked sequence cross-entropy with label smoothing."""

import keras
import tensorflow as tf
from keras import ops


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
            raise ValueError(
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
