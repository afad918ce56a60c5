"""The BERT checkpoint writers under their former name, for the tests
outside tests/training/convert/ that still import them from here
(tests/export/test_embedding_export.py); the conversion tests themselves
live in tests/training/convert/huggingface/. No tests of its own."""

from tests.training.convert.huggingface.test_bert import (
    bert_tensors,
    hf_tokenizer,
    write_checkpoint,
)

__all__ = ["bert_tensors", "hf_tokenizer", "write_checkpoint"]
