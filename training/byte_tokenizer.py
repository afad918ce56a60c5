"""Byte-level tokenizer: every UTF-8 byte is a token, so nothing is unknown."""

import json

import tensorflow as tf

from training.atomic import atomic_write_text
from training.wordpiece_tokenizer import RESERVED_TOKENS


class ByteTokenizer:
    """Strings to int32 byte ids (byte value + 4) and back.

    Ids 0-3 are the same reserved ids as `WordPieceTokenizer` (padding, unknown,
    start, end); byte b is id b + 4, so the vocabulary has 260 entries. Any
    byte string round-trips exactly, including bytes that are not UTF-8.
    """

    pad_id, unk_id, start_id, end_id = 0, 1, 2, 3
    offset = len(RESERVED_TOKENS)

    @property
    def vocabulary_size(self):
        return 256 + self.offset

    def tokenize(self, strings):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor."""
        strings = tf.convert_to_tensor(strings, tf.string)
        # bytes_split gives one-byte strings; decode_raw of each is its value.
        pieces = tf.strings.bytes_split(strings)
        values = tf.io.decode_raw(pieces.flat_values, tf.uint8)[:, 0]
        ids = tf.cast(values, tf.int32) + self.offset
        return pieces.with_flat_values(ids)

    def detokenize(self, ids):
        """Ids (Ragged or dense; reserved ids are dropped) back to strings."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids, tf.int32))
        ids = tf.ragged.boolean_mask(ids, ids >= self.offset)
        table = tf.constant([bytes([b]) for b in range(256)])
        return tf.strings.reduce_join(tf.gather(table, ids - self.offset), axis=-1)

    def save(self, path):
        atomic_write_text(path, json.dumps({"tokenizer": "byte"}) + "\n")

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        if spec.get("tokenizer") != "byte":
            raise ValueError(f"{path} does not describe a byte tokenizer: {spec}")
        return cls()
