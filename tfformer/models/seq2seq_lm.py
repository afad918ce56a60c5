"""An encoder-decoder language model: a `Seq2SeqBackbone` and its output
projection."""

import keras

from tfformer.errors import InputTypeError
from tfformer.models.seq2seq_backbone import Seq2SeqBackbone
from tfformer.models.task_model import TaskModel, float32_logits


@keras.saving.register_keras_serializable(package="tfformer")
class Seq2SeqLM(TaskModel):
    """Teacher-forced translation model: the backbone's decoder states times
    the decoder embedding (tied, the paper, or its own output matrix).

    `{"encoder_token_ids": (batch, S), "decoder_token_ids": (batch, T)}` in,
    `(batch, T, decoder_vocabulary_size)` float32 logits out. Decode it with
    `tfformer.decoding.Generator` (greedy, beam, sampling over a key/value
    cache, see `CachedDecoder`).

    Args:
        backbone: a `Seq2SeqBackbone`.

    Example:
    >>> model = Seq2SeqLM(Seq2SeqBackbone.from_preset("transformer_tiny", 8000, 8000))
    """

    def __init__(self, backbone, **kwargs):
        if not isinstance(backbone, Seq2SeqBackbone):
            raise InputTypeError(
                "Seq2SeqLM needs a Seq2SeqBackbone. "
                f"Received: backbone={type(backbone).__name__}"
            )
        inputs = backbone.input
        hidden = backbone(inputs)["decoder_sequence_output"]
        logits = float32_logits(backbone.decoder_embedding(hidden, reverse=True))
        kwargs.setdefault("name", "transformer_seq2seq")
        super().__init__(backbone, inputs, logits, **kwargs)
