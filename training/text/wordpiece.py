"""Subword WordPiece tokenizer learned from the training data.

Built on tensorflow-text's `FastWordpieceTokenizer`, whose ops are TF graph ops
(and exist in TFLite), so the same tokenizer can later be placed inside an
exported model. It is saved as a plain vocabulary file, one token per line,
with the reserved tokens first.
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from tfformer.rundir.files import atomic_write_text
from tfformer.rundir.text import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK,
    UNK_ID,
    join_punctuation,
)


class WordPieceTokenizer:
    """Strings to int32 WordPiece ids and back.

    Ids 0-3 are reserved: 0 padding, 1 unknown, 2 start, 3 end. Text is split
    on whitespace and punctuation, then each word greedily into the longest
    vocabulary pieces ("##" marks a piece that continues a word).

    Args:
        vocabulary: list of tokens; must start with the reserved tokens.
        lower_case: lower-case text before tokenizing (`tf.strings.lower`
            on UTF-8, a core op, so exported models can do the same).

    Example:
    >>> tokenizer = WordPieceTokenizer.learn(["a dog runs", "two dogs"], 100)
    >>> ids = tokenizer.tokenize(["a dog"])       # RaggedTensor, int32
    >>> tokenizer.detokenize(ids)                  # [b"a dog"]
    """

    pad_id, unk_id, start_id, end_id = PAD_ID, UNK_ID, START_ID, END_ID

    def __init__(self, vocabulary, *, lower_case=False):
        vocabulary = list(vocabulary)
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"vocabulary must start with {list(RESERVED_TOKENS)}. "
                f"Received: {vocabulary[: len(RESERVED_TOKENS)]}"
            )
        if len(set(vocabulary)) != len(vocabulary):
            raise ValueError("vocabulary has duplicate tokens.")
        bad = [t for t in vocabulary if not t or any(c in t for c in "\n\r")]
        if bad:
            raise ValueError(f"vocabulary has empty or multi-line tokens: {bad[:3]}")
        self.vocabulary = vocabulary
        self.lower_case = bool(lower_case)
        self._tokenizer = tf_text.FastWordpieceTokenizer(
            vocab=vocabulary,
            token_out_type=tf.int32,
            unknown_token=UNK,
            support_detokenization=True,
        )

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    @classmethod
    def learn(cls, sentences, vocabulary_size, *, lower_case=False, extra_tokens=()):
        """Learns a vocabulary of at most `vocabulary_size` tokens from
        sentences. `extra_tokens` (such as "[MASK]") follow the reserved
        tokens, before the learned ones."""
        from tensorflow_text.tools.wordpiece_vocab import (
            bert_vocab_from_dataset as learner,
        )

        if isinstance(vocabulary_size, bool) or not isinstance(vocabulary_size, int):
            raise TypeError(
                f"vocabulary_size must be an int. Received: {vocabulary_size!r}"
            )
        reserved = [*RESERVED_TOKENS, *extra_tokens]
        if vocabulary_size <= len(reserved):
            raise ValueError(
                f"vocabulary_size must exceed {len(reserved)}. "
                f"Received: vocabulary_size={vocabulary_size}"
            )
        sentences = list(sentences)
        if not sentences:
            raise ValueError("sentences is empty: nothing to learn a vocabulary from.")
        dataset = tf.data.Dataset.from_tensor_slices(sentences).batch(1024)
        if lower_case:
            # Lower-cased here, the way `tokenize` does it (the learner's own
            # lower_case would also strip accents).
            dataset = dataset.map(lambda s: tf.strings.lower(s, encoding="utf-8"))
        vocabulary = learner.bert_vocab_from_dataset(
            dataset,
            vocab_size=vocabulary_size,
            reserved_tokens=reserved,
            bert_tokenizer_params={"lower_case": False},
            learn_params={},
        )
        return cls(vocabulary[:vocabulary_size], lower_case=lower_case)

    def save(self, path):
        """Writes the vocabulary file atomically: whole or not at all."""
        atomic_write_text(path, "".join(f"{token}\n" for token in self.vocabulary))

    @classmethod
    def load(cls, path, *, lower_case=False):
        """Reads a vocabulary file written by `save`."""
        if not os.path.isfile(path):
            raise ValueError(f"Vocabulary file not found. Received: path={path!r}")
        with open(path, encoding="utf-8") as f:
            vocabulary = f.read().split("\n")
        if vocabulary and vocabulary[-1] == "":
            vocabulary.pop()
        try:
            return cls(vocabulary, lower_case=lower_case)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def tokenize(self, strings):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor (no start/end)."""
        strings = tf.convert_to_tensor(strings, tf.string)
        if self.lower_case:
            strings = tf.strings.lower(strings, encoding="utf-8")
        return self._tokenizer.tokenize(strings)

    def detokenize(self, ids):
        """Ids (Ragged or dense, reserved ids dropped) back to `(batch,)` strings,
        with punctuation joined to its word (`join_punctuation`)."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids, tf.int32))
        ids = tf.ragged.boolean_mask(ids, ids >= len(RESERVED_TOKENS))
        return join_punctuation(self._tokenizer.detokenize(ids))
