"""The model library's networks: a backbone per family and the task models
that put a head on one.

Backbones (`Backbone`): `Seq2SeqBackbone` (the encoder-decoder of "Attention
Is All You Need"), `BertBackbone`, `GPTBackbone` (GPT-2 and any decoder),
`LlamaBackbone`, `GemmaBackbone`, `ViTBackbone`. Task models (`TaskModel`): `Seq2SeqLM`,
`CausalLM`, `TextClassifier`, `MaskedLM`, `SentenceEmbedder`,
`ImageClassifier`. One-call builders (`transformer_seq2seq`, `gpt_decoder`,
`bert_encoder` and its heads, `vit`), named sizes (`PRESETS`,
`from_preset`), `CachedDecoder` for step-by-step decoding, and
`upgrade_legacy_model` for models saved before the backbones existed.
"""

from tfformer.models.backbone import Backbone
from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.builders import (
    bert_classifier,
    bert_embedder,
    bert_encoder,
    bert_masked_lm,
    gpt_decoder,
    transformer_seq2seq,
    vit,
)
from tfformer.models.cached_decoder import CachedDecoder
from tfformer.models.causal_lm import CausalLM
from tfformer.models.gemma_backbone import GemmaBackbone
from tfformer.models.gpt_backbone import GPTBackbone
from tfformer.models.image_classifier import ImageClassifier
from tfformer.models.legacy import upgrade_legacy_model
from tfformer.models.llama_backbone import LlamaBackbone
from tfformer.models.masked_lm import MaskedLM
from tfformer.models.presets import PRESETS, from_preset
from tfformer.models.sentence_embedder import SentenceEmbedder
from tfformer.models.seq2seq_backbone import Seq2SeqBackbone
from tfformer.models.seq2seq_lm import Seq2SeqLM
from tfformer.models.task_model import TaskModel
from tfformer.models.text_classifier import TextClassifier
from tfformer.models.vit_backbone import ViTBackbone

__all__ = [
    "PRESETS",
    "Backbone",
    "BertBackbone",
    "CachedDecoder",
    "CausalLM",
    "GPTBackbone",
    "GemmaBackbone",
    "ImageClassifier",
    "LlamaBackbone",
    "MaskedLM",
    "SentenceEmbedder",
    "Seq2SeqBackbone",
    "Seq2SeqLM",
    "TaskModel",
    "TextClassifier",
    "ViTBackbone",
    "bert_classifier",
    "bert_embedder",
    "bert_encoder",
    "bert_masked_lm",
    "from_preset",
    "gpt_decoder",
    "transformer_seq2seq",
    "upgrade_legacy_model",
    "vit",
]
