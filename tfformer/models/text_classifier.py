"""A sequence classifier on BERT's pooled [CLS] output."""

import keras

from tfformer.errors import InputTypeError
from tfformer.layers.dropout import Dropout
from tfformer.layers.validation import check_positive_int, check_rate
from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.task_model import TaskModel, float32_logits


@keras.saving.register_keras_serializable(package="tfformer")
class TextClassifier(TaskModel):
    """Dropout and a dense layer on the backbone's pooled output.

    The backbone's inputs in, `(batch, num_classes)` float32 logits out. The
    model shares the backbone's layers, so a pretrained encoder fine-tunes
    in place.

    Args:
        backbone: a `BertBackbone`.
        num_classes: classes of the head.
        dropout: dropout on the pooled output.

    Attributes:
        head: the `Dense` classification layer (`classifier`).
    """

    def __init__(self, backbone, num_classes, *, dropout=0.1, **kwargs):
        if not isinstance(backbone, BertBackbone):
            raise InputTypeError(
                "TextClassifier needs a BertBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        check_positive_int("num_classes", num_classes)
        check_rate("dropout", dropout)
        inputs = backbone.input
        pooled = backbone(inputs)["pooled_output"]
        x = Dropout(dropout, dtype=backbone.dtype_policy, name="classifier_dropout")(
            pooled
        )
        head = keras.layers.Dense(
            num_classes, dtype=backbone.dtype_policy, name="classifier"
        )
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(backbone, inputs, float32_logits(head(x)), **kwargs)
        self.head = head
        self.num_classes = num_classes
        self.dropout = dropout

    def get_config(self):
        config = super().get_config()
        config.update({"num_classes": self.num_classes, "dropout": self.dropout})
        return config
