"""The byte tokenizer: any string to byte ids and back, in core TensorFlow
ops (the same code runs in a tf.data pipeline and inside an exported
SavedModel)."""

import json

import tensorflow as tf

from tfformer.preprocessing.text import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
    read_tokenizer_json,
)
from tfformer.runs.files import atomic_write_text


class ByteTokenizer(tf.Module):
    """Strings to int32 byte ids (byte value + 4) and back, in core ops.

    Ids 0-3 are the reserved ids (padding, unknown, start, end); byte b is id
    b + 4, so the vocabulary has 260 entries. Any byte string round-trips
    exactly, including bytes that are not UTF-8. A `tf.Module`, so an exported
    graph can track it like any other tokenizer.
    """

    pad_id, unk_id, start_id, end_id = PAD_ID, UNK_ID, START_ID, END_ID
    offset = len(RESERVED_TOKENS)
    vocabulary_size = 256 + offset

    def tokenize(self, strings):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor."""
        strings = tf.convert_to_tensor(strings, tf.string)
        # bytes_split gives one-byte strings; decode_raw of each is its value.
        pieces = tf.strings.bytes_split(strings)
        # (fixed_length 1 and a reshape: also right when there are no bytes.)
        values = tf.io.decode_raw(pieces.flat_values, tf.uint8, fixed_length=1)
        values = tf.reshape(values, [-1])
        return pieces.with_flat_values(tf.cast(values, tf.int32) + self.offset)

    def detokenize(self, ids):
        """Ids (Ragged or dense) back to strings; reserved and out-of-range
        ids are dropped."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        ids = tf.cast(ids, tf.int32)
        ids = tf.ragged.boolean_mask(
            ids, tf.logical_and(ids >= self.offset, ids < self.vocabulary_size)
        )
        table = tf.constant([bytes([b]) for b in range(256)])
        return tf.strings.reduce_join(tf.gather(table, ids - self.offset), axis=-1)

    def save(self, path):
        atomic_write_text(path, json.dumps({"tokenizer": "byte"}) + "\n")

    @classmethod
    def load(cls, path):
        read_tokenizer_json(path, "byte")
        return cls()
