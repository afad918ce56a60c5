"""Sentence embeddings from a `BertBackbone`: the sentence-transformers
recipe."""

import keras

from tfformer.errors import InputTypeError
from tfformer.layers.sequence_pooling import SequencePooling
from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.task_model import TaskModel


@keras.saving.register_keras_serializable(package="tfformer")
class SentenceEmbedder(TaskModel):
    """Pools the backbone's token vectors into one vector per sentence
    (all-MiniLM-L6-v2's recipe is mean pooling over the real tokens, [CLS]
    and [SEP] included, then L2 normalization).

    The backbone's inputs in; a dict out: `embedding` `(batch, hidden_dim)`
    float32 (`SequencePooling` modes "mean", "cls" or "max"), and the
    backbone's `sequence_output` and `pooled_output` (so the pooler stays
    part of the model: a classifier fine-tuned from it starts from the
    checkpoint's pooler).

    Args:
        backbone: a `BertBackbone`.
        pooling: "mean", "cls" or "max".
        normalize: L2-normalize the embedding.

    Attributes:
        pooling_layer: the `SequencePooling` layer.
    """

    def __init__(self, backbone, *, pooling="mean", normalize=True, **kwargs):
        if not isinstance(backbone, BertBackbone):
            raise InputTypeError(
                "SentenceEmbedder needs a BertBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        inputs = backbone.input
        outputs = backbone(inputs)
        padding_mask = keras.ops.not_equal(inputs["token_ids"], 0)
        pooling_layer = SequencePooling(
            pooling, normalize, name="pooling", dtype="float32"
        )
        embedding = pooling_layer(outputs["sequence_output"], padding_mask)
        kwargs.setdefault("name", "bert_embedder")
        super().__init__(
            backbone, inputs, {"embedding": embedding, **outputs}, **kwargs
        )
        self.pooling_layer = pooling_layer
        self.pooling = pooling
        self.normalize = normalize

    def get_config(self):
        config = super().get_config()
        config.update({"pooling": self.pooling, "normalize": self.normalize})
        return config
