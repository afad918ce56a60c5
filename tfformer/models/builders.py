"""One-call builders of the task models, by family: what most code needs
(`gpt_decoder(vocabulary_size, num_layers=4, ...)`) without naming the
backbone and task classes. Each returns the classes' instances, so
`.backbone` and the typed handles are there."""

from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.causal_lm import CausalLM
from tfformer.models.gpt_backbone import GPTBackbone
from tfformer.models.image_classifier import ImageClassifier
from tfformer.models.masked_lm import MaskedLM
from tfformer.models.sentence_embedder import SentenceEmbedder
from tfformer.models.seq2seq_backbone import Seq2SeqBackbone
from tfformer.models.seq2seq_lm import Seq2SeqLM
from tfformer.models.text_classifier import TextClassifier
from tfformer.models.vit_backbone import ViTBackbone


def transformer_seq2seq(
    encoder_vocabulary_size,
    decoder_vocabulary_size,
    *,
    name="transformer_seq2seq",
    **backbone_arguments,
):
    """`Seq2SeqLM(Seq2SeqBackbone(...))`: the encoder-decoder Transformer of
    "Attention Is All You Need" with its output projection.

    `{"encoder_token_ids": (batch, S), "decoder_token_ids": (batch, T)}` in,
    `(batch, T, decoder_vocabulary_size)` float32 logits out; id 0 is
    padding. The keyword arguments are `Seq2SeqBackbone`'s (defaults: the
    paper's base model).

    Example:
    >>> model = transformer_seq2seq(8000, 8000, num_encoder_layers=2,
    ...     num_decoder_layers=2, hidden_dim=128, num_heads=4,
    ...     intermediate_dim=512)
    """
    backbone = Seq2SeqBackbone(
        encoder_vocabulary_size, decoder_vocabulary_size, **backbone_arguments
    )
    return Seq2SeqLM(backbone, name=name)


def gpt_decoder(vocabulary_size, *, name="gpt_decoder", **backbone_arguments):
    """`CausalLM(GPTBackbone(...))`: a causal language model.

    `{"token_ids": (batch, T)}` in, `(batch, T, vocabulary_size)` float32
    next-token logits out. The keyword arguments are `GPTBackbone`'s
    (defaults: GPT-2 small). Llama's decoder is `position="rotary",
    normalization="rms", gated_ffn=True, activation="silu", use_bias=False`
    (or `LlamaBackbone`).
    """
    return CausalLM(GPTBackbone(vocabulary_size, **backbone_arguments), name=name)


def bert_encoder(vocabulary_size, *, name="bert_encoder", **backbone_arguments):
    """A `BertBackbone` (defaults: BERT-base): `{"token_ids", "segment_ids"}`
    in, `{"sequence_output", "pooled_output"}` out. Add a head with
    `bert_masked_lm`, `bert_classifier` or `bert_embedder`."""
    return BertBackbone(vocabulary_size, name=name, **backbone_arguments)


def bert_masked_lm(encoder, *, next_sentence_prediction=False, name=None):
    """`MaskedLM(encoder)`: the masked-language-model head (with
    `next_sentence_prediction`, BERT's pre-training model). Shares the
    encoder's layers."""
    return MaskedLM(
        encoder, next_sentence_prediction=next_sentence_prediction, name=name
    )


def bert_classifier(encoder, num_classes, *, dropout=0.1, name="bert_classifier"):
    """`TextClassifier(encoder, num_classes)`: a classification head on the
    pooled [CLS] output. Shares the encoder's layers, so a pretrained
    encoder fine-tunes in place."""
    return TextClassifier(encoder, num_classes, dropout=dropout, name=name)


def bert_embedder(encoder, *, pooling="mean", normalize=True, name="bert_embedder"):
    """`SentenceEmbedder(encoder)`: sentence-transformers' pooling (mean over
    the real tokens and L2 normalization, by default)."""
    return SentenceEmbedder(encoder, pooling=pooling, normalize=normalize, name=name)


def vit(image_size, num_classes, *, pooling=None, name="vit", **backbone_arguments):
    """`ImageClassifier(ViTBackbone(...), num_classes, pooling)`: a ViT image
    classifier. The keyword arguments are `ViTBackbone`'s (defaults:
    ViT-B/16; `tokenizer="convolution"` makes it a CCT;
    `pixel_mean`/`pixel_std` make it take raw pixels)."""
    return ImageClassifier(
        ViTBackbone(image_size, **backbone_arguments),
        num_classes,
        pooling=pooling,
        name=name,
    )
