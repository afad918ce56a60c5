"""BERT's pre-training model: the masked-language-model head (and
optionally next-sentence prediction) on a `BertBackbone`."""

import keras

from tfformer.errors import InputTypeError
from tfformer.layers.masked_lm_head import MaskedLMHead
from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.task_model import TaskModel, float32_logits


@keras.saving.register_keras_serializable(package="tfformer")
class MaskedLM(TaskModel):
    """Logits of the tokens at `mask_positions`, from BERT's MLM transform
    and the vocabulary projection tied to the token embedding.

    Inputs are the backbone's plus `mask_positions` `(batch, num_masked)`;
    the output is `(batch, num_masked, vocabulary_size)` float32 logits.

    With `next_sentence_prediction`, BERT's pre-training model: the outputs
    are a dict, `masked_lm` (the logits above) and `next_sentence`
    `(batch, 2)` float32 logits of a dense layer on the pooled output (class
    0: segment B follows segment A; 1: B is a random sentence), as BERT's
    `cls/seq_relationship`.

    Args:
        backbone: a `BertBackbone`.
        next_sentence_prediction: add the next-sentence head.

    Attributes:
        mlm_head: the `MaskedLMHead`; next_sentence_head: the dense layer
            (None without next-sentence prediction).
    """

    def __init__(self, backbone, *, next_sentence_prediction=False, **kwargs):
        if not isinstance(backbone, BertBackbone):
            raise InputTypeError(
                "MaskedLM needs a BertBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        policy = backbone.dtype_policy
        mask_positions = keras.Input((None,), dtype="int32", name="mask_positions")
        inputs = {**backbone.input, "mask_positions": mask_positions}
        outputs = backbone(backbone.input)
        mlm_head = MaskedLMHead(dtype=policy, name="mlm_head")
        hidden = mlm_head(outputs["sequence_output"], mask_positions)
        logits = float32_logits(backbone.token_embedding(hidden, reverse=True))
        next_sentence_head = None
        if next_sentence_prediction:
            next_sentence_head = keras.layers.Dense(
                2, dtype=policy, name="next_sentence_head"
            )
            logits = {
                "masked_lm": logits,
                "next_sentence": float32_logits(
                    next_sentence_head(outputs["pooled_output"]),
                    name="next_sentence_logits",
                ),
            }
        if kwargs.get("name") is None:
            kwargs["name"] = (
                "bert_pretraining" if next_sentence_prediction else "bert_masked_lm"
            )
        super().__init__(backbone, inputs, logits, **kwargs)
        self.mlm_head = mlm_head
        self.next_sentence_head = next_sentence_head
        self.next_sentence_prediction = next_sentence_prediction

    def get_config(self):
        config = super().get_config()
        config["next_sentence_prediction"] = self.next_sentence_prediction
        return config
