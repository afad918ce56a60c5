"""Keras preprocessing layers: raw strings to the inputs tfformer's models
read, as training builds them, so a model can be fitted and asked for
predictions on strings like any Keras model.

- `Tokenizer`: any of the product's tokenizers (WordPiece, byte, byte-level
  BPE as GPT-2's and Llama 3's, SentencePiece, token ids) as a layer.
- `BertPacker`, `Seq2SeqPacker`, `CausalLMPacker`: ids to each family's
  inputs (and labels, for training).

Each runs eagerly, inside `tf.data.Dataset.map` and inside a traced graph,
and is saved with a `.keras` model (its config, and the tokenizer's file
among the archive's assets). TensorFlow directly, not `keras.ops`: text
preprocessing is `tf.data` code, as in keras-hub.
"""

from tfformer.training.preprocessors.packers import (
    BertPacker,
    CausalLMPacker,
    Seq2SeqPacker,
)
from tfformer.training.preprocessors.tokenizer import Tokenizer

__all__ = ["BertPacker", "CausalLMPacker", "Seq2SeqPacker", "Tokenizer"]
