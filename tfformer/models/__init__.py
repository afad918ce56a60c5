"""Functional model builders: encoder-decoder, BERT, GPT and ViT."""

from tfformer.models.bert_encoder import (
    bert_classifier,
    bert_embedder,
    bert_encoder,
    bert_masked_lm,
)
from tfformer.models.cached_decoder import CachedDecoder
from tfformer.models.gpt_decoder import gpt_decoder
from tfformer.models.presets import PRESETS, from_preset
from tfformer.models.transformer_seq2seq import transformer_seq2seq
from tfformer.models.vit import vit

__all__ = [
    "PRESETS",
    "CachedDecoder",
    "bert_classifier",
    "bert_embedder",
    "bert_encoder",
    "bert_masked_lm",
    "from_preset",
    "gpt_decoder",
    "transformer_seq2seq",
    "vit",
]
