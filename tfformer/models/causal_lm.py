"""A causal language model: a decoder backbone and its output projection."""

import keras

from tfformer.errors import InputTypeError
from tfformer.models.gpt_backbone import GPTBackbone
from tfformer.models.task_model import TaskModel, float32_logits


@keras.saving.register_keras_serializable(package="tfformer")
class CausalLM(TaskModel):
    """Next-token logits: the backbone's hidden states times the token
    embedding (tied) or the backbone's own output matrix.

    `{"token_ids": (batch, T)}` in, `(batch, T, vocabulary_size)` float32
    logits out; position t sees tokens 0..t only. Generate with
    `tfformer.decoding.Generator`.

    Args:
        backbone: a `GPTBackbone` (or `LlamaBackbone`).

    Example:
    >>> model = CausalLM(GPTBackbone.from_preset("gpt_tiny", 260))
    """

    def __init__(self, backbone, **kwargs):
        if not isinstance(backbone, GPTBackbone):
            raise InputTypeError(
                "CausalLM needs a GPTBackbone or LlamaBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        inputs = backbone.input
        logits = float32_logits(
            backbone.token_embedding(backbone(inputs), reverse=True)
        )
        kwargs.setdefault("name", "gpt_decoder")
        super().__init__(backbone, inputs, logits, **kwargs)
