"""An image classifier: a `ViTBackbone` and a linear head on its class
token."""

import keras

from tfformer.errors import InputTypeError
from tfformer.layers.validation import check_positive_int
from tfformer.models.task_model import TaskModel, float32_logits
from tfformer.models.vit_backbone import ViTBackbone


@keras.saving.register_keras_serializable(package="tfformer")
class ImageClassifier(TaskModel):
    """A dense layer on the backbone's class token.

    Images `(batch, height, width, channels)` in (raw pixels when the
    backbone has pixel statistics), `(batch, num_classes)` float32 logits
    out.

    Args:
        backbone: a `ViTBackbone`.
        num_classes: classes of the head.

    Attributes:
        head: the `Dense` layer.
    """

    def __init__(self, backbone, num_classes, **kwargs):
        if not isinstance(backbone, ViTBackbone):
            raise InputTypeError(
                "ImageClassifier needs a ViTBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        check_positive_int("num_classes", num_classes)
        inputs = backbone.input
        head = keras.layers.Dense(num_classes, dtype=backbone.dtype_policy, name="head")
        logits = float32_logits(head(backbone(inputs)[:, 0, :]))
        kwargs.setdefault("name", "vit")
        super().__init__(backbone, inputs, logits, **kwargs)
        self.head = head
        self.num_classes = num_classes

    def get_config(self):
        config = super().get_config()
        config["num_classes"] = self.num_classes
        return config
