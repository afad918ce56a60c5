"""Metrics over real (non-padding) tokens."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedAccuracy(keras.metrics.Mean):
    """Share of non-padding positions where the arg-max prediction is the label."""

    def __init__(self, pad_id=0, name="accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = int(pad_id)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        correct = ops.cast(
            ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), y_true),
            self.dtype,
        )
        weight = ops.cast(ops.not_equal(y_true, self.pad_id), self.dtype)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, self.dtype)
            while len(sample_weight.shape) < len(weight.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)
            weight = weight * sample_weight
        super().update_state(correct, sample_weight=weight)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="tfformer")
class RealTokens(keras.metrics.Sum):
    """Counts the non-padding label tokens seen: the numerator of tokens/s."""

    def __init__(self, pad_id=0, name="real_tokens", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = int(pad_id)

    def update_state(self, y_true, y_pred, sample_weight=None):
        del y_pred, sample_weight
        real = ops.cast(
            ops.not_equal(ops.cast(y_true, "int32"), self.pad_id), "float32"
        )
        super().update_state(ops.sum(real))

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="tfformer")
class NextSentenceAccuracy(MaskedAccuracy):
    """Accuracy of BERT's next-sentence logits `(batch, 2)` against labels
    `(batch, 1)` shifted by one (see `losses.NextSentenceLoss`), over the
    real rows."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        from tfformer.training.losses import with_padding_class

        super().update_state(y_true, with_padding_class(y_pred), sample_weight)


@keras.saving.register_keras_serializable(package="tfformer")
class LabelledAccuracy(keras.metrics.Mean):
    """Accuracy against distillation targets (`DistillationLoss`'s `y_true`:
    the class id, -1 for none, then the teacher's logits) over the examples
    that have a class id."""

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        label = ops.cast(y_true[:, 0], "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        weight = ops.cast(ops.greater_equal(label, 0), self.dtype)
        if sample_weight is not None:
            weight = weight * ops.cast(ops.reshape(sample_weight, (-1,)), self.dtype)
        super().update_state(
            ops.cast(ops.equal(predicted, label), self.dtype), sample_weight=weight
        )


@keras.saving.register_keras_serializable(package="tfformer")
class TeacherAgreement(keras.metrics.Mean):
    """Share of examples whose arg-max class is the teacher's (distillation
    targets, as `LabelledAccuracy` reads them), labelled or not."""

    def __init__(self, name="teacher_agreement", dtype=None):
        super().__init__(name=name, dtype=dtype)

    def update_state(self, y_true, y_pred, sample_weight=None):
        theirs = ops.argmax(y_true[:, 1:], axis=-1)
        agree = ops.cast(ops.equal(ops.argmax(y_pred, axis=-1), theirs), self.dtype)
        if sample_weight is not None:
            sample_weight = ops.reshape(sample_weight, (-1,))
        super().update_state(agree, sample_weight=sample_weight)
