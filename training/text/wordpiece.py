"""Subword WordPiece tokenizer learned from the training data.

Built on tensorflow-text's `FastWordpieceTokenizer`, whose ops are TF graph ops
(and exist in TFLite), so the same tokenizer can later be placed inside an
exported model. It is saved as a plain vocabulary file, one token per line,
with the reserved tokens first.
"""

import os

import tensorflow as tf
import tensorflow_text as tf_text

from tfformer.errors import InputError, InputTypeError
from tfformer.preprocessing.text import (
    RESERVED_TOKENS,
    accent_mark_ranges,
    bert_cleanup,
    join_punctuation,
    lower,
    special_token_ids,
)
from tfformer.runs.files import atomic_write_text, read_text

# `ACCENT_MARKS` as an RE2 character class (RE2's own \p{Mn} is a newer
# Unicode's than the Hugging Face tokenizers converted checkpoints use).
ACCENT_MARKS_CLASS = (
    "[" + "".join(rf"\x{{{a:X}}}-\x{{{b:X}}}" for a, b in accent_mark_ranges()) + "]"
)


class WordPieceTokenizer:
    """Strings to int32 WordPiece ids and back.

    A vocabulary tfformer learns reserves ids 0-3: 0 padding, 1 unknown, 2
    start, 3 end. A converted checkpoint's vocabulary names its own special
    tokens (`special_tokens`, e.g. BERT's [CLS] as start and [SEP] as end);
    padding is id 0 either way. Text is split on whitespace and punctuation,
    then each word greedily into the longest vocabulary pieces ("##" marks a
    piece that continues a word).

    Args:
        vocabulary: list of tokens; starts with the reserved tokens unless
            `special_tokens` is given.
        lower_case: lower-case text before tokenizing (`tf.strings.lower`
            on UTF-8, a core op, so exported models can do the same).
        special_tokens: {role: token} for "pad", "unk", "start", "end" (and
            optionally "mask"); None: the reserved tokens.
        normalizer: None, or "bert": BERT's cleanup first (control
            characters removed, whitespace made spaces, spaces around CJK
            ideographs; Hugging Face's `BertNormalizer`).
        strip_accents: remove the combining marks of `ACCENT_MARKS`
            (Hugging Face's table) after canonical decomposition (NFD), as
            `BertNormalizer` does when lower-casing by default.

    Example:
    >>> tokenizer = WordPieceTokenizer.learn(["a dog runs", "two dogs"], 100)
    >>> ids = tokenizer.tokenize(["a dog"])       # RaggedTensor, int32
    >>> tokenizer.detokenize(ids)                  # [b"a dog"]
    """

    def __init__(
        self,
        vocabulary,
        *,
        lower_case=False,
        special_tokens=None,
        normalizer=None,
        strip_accents=False,
    ):
        vocabulary = list(vocabulary)
        ids = special_token_ids(vocabulary, special_tokens)
        if normalizer not in (None, "bert"):
            raise InputError(
                f"normalizer must be None or 'bert'. Received: {normalizer!r}"
            )
        if len(set(vocabulary)) != len(vocabulary):
            raise InputError("vocabulary has duplicate tokens.")
        bad = [t for t in vocabulary if not t or any(c in t for c in "\n\r")]
        if bad:
            raise InputError(f"vocabulary has empty or multi-line tokens: {bad[:3]}")
        self.vocabulary = vocabulary
        self.lower_case = bool(lower_case)
        self.special_tokens = (
            dict(special_tokens) if special_tokens is not None else None
        )
        self.normalizer = normalizer
        self.strip_accents = bool(strip_accents)
        self.pad_id, self.unk_id = ids["pad"], ids["unk"]
        self.start_id, self.end_id = ids["start"], ids["end"]
        self.mask_id = ids.get("mask")
        # Dropped by detokenize (a learned vocabulary's: the reserved ids).
        self.special_ids = sorted(set(ids.values()))
        self._tokenizer = tf_text.FastWordpieceTokenizer(
            vocab=vocabulary,
            token_out_type=tf.int32,
            unknown_token=vocabulary[self.unk_id],
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
            raise InputTypeError(
                f"vocabulary_size must be an int. Received: {vocabulary_size!r}"
            )
        reserved = [*RESERVED_TOKENS, *extra_tokens]
        if vocabulary_size <= len(reserved):
            raise InputError(
                f"vocabulary_size must exceed {len(reserved)}. "
                f"Received: vocabulary_size={vocabulary_size}"
            )
        sentences = list(sentences)
        if not sentences:
            raise InputError("sentences is empty: nothing to learn a vocabulary from.")
        dataset = tf.data.Dataset.from_tensor_slices(sentences).batch(1024)
        if lower_case:
            # Lower-cased here, the way `tokenize` does it (the learner's own
            # lower_case would also strip accents).
            dataset = dataset.map(lower)
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
    def load(cls, path, *, lower_case=False, **options):
        """Reads a vocabulary file written by `save` (`options`: the
        constructor's special_tokens, normalizer, strip_accents)."""
        if not os.path.isfile(path):
            raise InputError(f"Vocabulary file not found. Received: path={path!r}")
        vocabulary = read_text(path).split("\n")
        if vocabulary and vocabulary[-1] == "":
            vocabulary.pop()
        try:
            return cls(vocabulary, lower_case=lower_case, **options)
        except ValueError as e:
            raise InputError(f"{path}: {e}") from None

    def tokenize(self, strings):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor (no start/end)."""
        return self._tokenizer.tokenize(self.normalize(strings))

    def normalize(self, strings):
        """The text WordPiece splits: cleaned up ("bert" normalizer), accents
        stripped and lower-cased as configured (`BertNormalizer`'s order)."""
        strings = tf.convert_to_tensor(strings, tf.string)
        if self.normalizer == "bert":
            strings = bert_cleanup(strings)
        if self.strip_accents:
            strings = tf.strings.regex_replace(
                tf_text.normalize_utf8(strings, "NFD"), ACCENT_MARKS_CLASS, ""
            )
        if self.lower_case:
            strings = lower(strings)
        return strings

    def options(self):
        """The manifest fields beyond kind and lower_case (empty for a
        learned vocabulary)."""
        out = {}
        if self.special_tokens is not None:
            out["special_tokens"] = dict(self.special_tokens)
        if self.normalizer is not None:
            out["normalizer"] = self.normalizer
        if self.strip_accents:
            out["strip_accents"] = True
        return out

    def detokenize(self, ids):
        """Ids (Ragged or dense, reserved ids dropped) back to `(batch,)` strings,
        with punctuation joined to its word (`join_punctuation`)."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids, tf.int32))
        ids = tf.cast(ids, tf.int32)
        special = tf.constant(self.special_ids, tf.int32)
        keep = tf.reduce_all(ids.flat_values[:, None] != special[None, :], axis=1)
        ids = tf.ragged.boolean_mask(ids, ids.with_flat_values(keep))
        return join_punctuation(self._tokenizer.detokenize(ids))
