"""Sentence embeddings: the config schema of a task that does not train.

Runs of this task come from `tfformer-convert` (a sentence-transformers or
BERT checkpoint), not from `tfformer-train`: training a sentence encoder
needs a contrastive objective tfformer does not have. Their config.json
records the encoder and its pooling with the sections below; what such a run
does (embed, compare, evaluate on scored pairs) is its predictor's,
`tfformer.training.predictors.sentence_embedding`. A text classifier can
start from such a run (`model.init_from`).
"""

import dataclasses

from tfformer.errors import InputError
from tfformer.training.tasks.base import ModelConfig, TaskSchema, TextDataConfig

NOT_TRAINABLE = (
    "task 'sentence_embedding' runs are made by tfformer-convert from a "
    "checkpoint, not trained; to fine-tune one, train task=text_classification "
    "with --set model.init_from=RUN"
)


@dataclasses.dataclass
class EmbeddingModel(ModelConfig):
    """`ModelConfig` plus how token vectors become one vector."""

    # mean, cls or max (`tfformer.layers.SequencePooling`).
    pooling: str = "mean"
    # L2-normalize the pooled vector.
    normalize: bool = True


class SentenceEmbeddingSchema(TaskSchema):
    name = "sentence_embedding"
    DataConfig = TextDataConfig
    ModelConfig = EmbeddingModel
    backbone_name = "BertBackbone"
    default_preset = "bert_tiny"

    def validate(self, config):
        super().validate(config)
        from tfformer.layers.sequence_pooling import MODES

        if config.model.pooling not in MODES:
            raise InputError(
                f"model.pooling must be one of {list(MODES)}. "
                f"Received: {config.model.pooling!r}"
            )


TASK = SentenceEmbeddingSchema()
