"""An image classifier: a `ViTBackbone` and a linear head on its class
token or on its tokens' attention-weighted mean."""

import keras

from tfformer.errors import InputError, InputTypeError
from tfformer.layers.attention_pooling import AttentionPooling
from tfformer.layers.validation import check_positive_int
from tfformer.models.task_model import TaskModel, float32_logits
from tfformer.models.vit_backbone import ViTBackbone

POOLINGS = ("class_token", "attention")


@keras.saving.register_keras_serializable(package="tfformer")
class ImageClassifier(TaskModel):
    """A dense layer on one vector per image: the backbone's class token
    (ViT) or `AttentionPooling` over its tokens (CCT's sequence pooling).

    Images `(batch, height, width, channels)` in (raw pixels when the
    backbone has pixel statistics), `(batch, num_classes)` float32 logits
    out.

    Args:
        backbone: a `ViTBackbone`.
        num_classes: classes of the head.
        pooling: "class_token" or "attention"; None: the class token when
            the backbone has one (patch tokenizer), else attention.

    Attributes:
        head: the `Dense` layer; pooling_layer: the `AttentionPooling`
        (None on the class token).
    """

    def __init__(self, backbone, num_classes, pooling=None, **kwargs):
        if not isinstance(backbone, ViTBackbone):
            raise InputTypeError(
                "ImageClassifier needs a ViTBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        check_positive_int("num_classes", num_classes)
        if pooling is None:
            pooling = "class_token" if backbone.class_token else "attention"
        if pooling not in POOLINGS:
            raise InputError(
                f"pooling must be one of {POOLINGS}. Received: pooling={pooling!r}"
            )
        if pooling == "class_token" and not backbone.class_token:
            raise InputError(
                "pooling='class_token' needs a backbone with a class token "
                "(tokenizer='patch'). Received: a backbone with "
                f"tokenizer={backbone.tokenizer!r}"
            )
        inputs = backbone.input
        sequence = backbone(inputs)
        pooling_layer = None
        if pooling == "class_token":
            pooled = sequence[:, 0, :]
        else:
            if backbone.class_token:
                sequence = sequence[:, 1:, :]
            pooling_layer = AttentionPooling(
                dtype=backbone.dtype_policy, name="attention_pooling"
            )
            pooled = pooling_layer(sequence)
        head = keras.layers.Dense(num_classes, dtype=backbone.dtype_policy, name="head")
        logits = float32_logits(head(pooled))
        kwargs.setdefault("name", "vit")
        super().__init__(backbone, inputs, logits, **kwargs)
        self.head = head
        self.pooling_layer = pooling_layer
        self.num_classes = num_classes
        self.pooling = pooling

    def get_config(self):
        config = super().get_config()
        config["num_classes"] = self.num_classes
        config["pooling"] = self.pooling
        return config
