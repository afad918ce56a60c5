"""The token-id tokenizer of a checkpoint converted without a text
tokenizer: text of whitespace-separated ids in, ids out, in core TensorFlow
ops."""

import json

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.preprocessing.text import read_tokenizer_json
from tfformer.runs.files import atomic_write_text


class TokenIdTokenizer(tf.Module):
    """Text of whitespace-separated token ids ("1 450 4996") to int32 ids and
    back ("450 4996"): the tokenizer of a checkpoint converted without its
    own (Llama-style decoders), so prompts are the ids its Hugging Face
    tokenizer gives and outputs are ids for it to decode.

    With `id_offset` k the model's ids are the checkpoint's plus k (a GPT-2
    conversion shifts them by one to keep id 0 for padding): the text holds
    the checkpoint's ids, `tokenize` adds k and `detokenize` subtracts it.
    `vocabulary_size`, `start_id`, `end_id` and `pad_id` are the model's.

    `tokenize` refuses (ValueError naming the text) anything but ids below
    `vocabulary_size - id_offset`; `detokenize` writes every id but padding.
    """

    unk_id = None

    def __init__(self, vocabulary_size, start_id, end_id, pad_id=0, id_offset=0):
        super().__init__()
        if (
            isinstance(id_offset, bool)
            or not isinstance(id_offset, int)
            or not 0 <= id_offset < vocabulary_size
        ):
            raise InputError(
                f"id_offset must be an int in [0, {vocabulary_size}). "
                f"Received: {id_offset!r}"
            )
        for name, value in (
            ("start_id", start_id),
            ("end_id", end_id),
            ("pad_id", pad_id),
        ):
            if not isinstance(value, int) or not 0 <= value < vocabulary_size:
                raise InputError(
                    f"{name} must be an id below {vocabulary_size}. Received: {value!r}"
                )
        self.vocabulary_size = vocabulary_size
        self.start_id, self.end_id, self.pad_id = start_id, end_id, pad_id
        self.id_offset = id_offset

    def tokenize(self, strings):
        """`(batch,)` strings of ids to a `(batch, None)` int32 RaggedTensor."""
        strings = tf.convert_to_tensor(strings, tf.string)
        if tf.executing_eagerly():
            for text in strings.numpy().reshape(-1):
                words = text.decode("utf-8", "replace").split()
                limit = self.vocabulary_size - self.id_offset
                if not all(w.isascii() and w.isdigit() for w in words) or any(
                    int(w) >= limit for w in words
                ):
                    raise InputError(
                        "This run reads token ids: whitespace-separated integers "
                        f"below {limit}. Received: {text[:200]!r}"
                    )
        pieces = tf.strings.split(strings)
        ids = tf.strings.to_number(pieces.flat_values, tf.int32)
        limit = self.vocabulary_size - self.id_offset
        # In a graph (an exported model) too: an InvalidArgumentError.
        check = tf.debugging.Assert(
            tf.reduce_all(tf.logical_and(ids >= 0, ids < limit)),
            [f"token ids must be in [0, {limit}). Received:", ids],
            summarize=20,
        )
        with tf.control_dependencies([check]):
            ids = tf.identity(ids) + self.id_offset
        return pieces.with_flat_values(ids)

    def detokenize(self, ids):
        """Ids (Ragged or dense) to strings of ids; padding is dropped."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        ids = tf.cast(ids, tf.int32)
        ids = tf.ragged.boolean_mask(ids, tf.not_equal(ids, self.pad_id))
        return tf.strings.reduce_join(
            tf.strings.as_string(ids - self.id_offset), axis=-1, separator=" "
        )

    def save(self, path):
        atomic_write_text(
            path,
            json.dumps(
                {
                    "tokenizer": "ids",
                    "vocabulary_size": self.vocabulary_size,
                    "start_id": self.start_id,
                    "end_id": self.end_id,
                    "pad_id": self.pad_id,
                    "id_offset": self.id_offset,
                }
            )
            + "\n",
        )

    @classmethod
    def load(cls, path):
        spec = read_tokenizer_json(path, "ids")
        try:
            return cls(
                spec["vocabulary_size"],
                spec["start_id"],
                spec["end_id"],
                spec["pad_id"],
                spec.get("id_offset", 0),
            )
        except KeyError as e:
            raise InputError(f"{path} lacks {e}.") from None
        except (TypeError, AttributeError, ValueError) as e:  # a value of a wrong kind
            raise InputError(f"{path}: {e}") from None
