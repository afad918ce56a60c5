"""Text conventions shared by training and export: reserved ids, WordPiece's
continuation prefix, the detokenizer's punctuation rules, and the byte
tokenizer (core TensorFlow ops only, so the same code runs inside an exported
SavedModel)."""

import json

import tensorflow as tf

from tfformer.rundir.files import atomic_write_text

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
RESERVED_TOKENS = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
# A WordPiece piece that continues a word.
SUFFIX = "##"
# The roles of a vocabulary's special tokens. A vocabulary tfformer learns
# starts with RESERVED_TOKENS; one converted from a checkpoint names its own
# (BERT's: [PAD] [UNK] [CLS] [SEP] [MASK], at ids 0, 100, 101, 102, 103).
SPECIAL_ROLES = ("pad", "unk", "start", "end", "mask")
DEFAULT_SPECIAL_TOKENS = {"pad": PAD, "unk": UNK, "start": START, "end": END}


def special_token_ids(vocabulary, special_tokens=None):
    """{role: id} of `special_tokens` ({role: token}; None: the reserved
    tokens, which must then open the vocabulary) in `vocabulary`.

    Padding must be id 0 (tfformer's models mask id 0) and pad, unk, start
    and end must be given. ValueError naming the role and token otherwise.
    """
    vocabulary = list(vocabulary)
    if special_tokens is None:
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise ValueError(
                f"vocabulary must start with {list(RESERVED_TOKENS)} (or name "
                "its special tokens). Received: "
                f"{vocabulary[: len(RESERVED_TOKENS)]}"
            )
        return {"pad": PAD_ID, "unk": UNK_ID, "start": START_ID, "end": END_ID}
    if not isinstance(special_tokens, dict):
        raise TypeError(
            "special_tokens must be a dict {role: token}. "
            f"Received: {special_tokens!r}"
        )
    unknown = sorted(set(special_tokens) - set(SPECIAL_ROLES))
    missing = [r for r in SPECIAL_ROLES[:4] if r not in special_tokens]
    if unknown or missing:
        raise ValueError(
            f"special_tokens must name {list(SPECIAL_ROLES[:4])} (and may name "
            f"'mask'). Received: {special_tokens!r}"
        )
    index = {token: i for i, token in enumerate(vocabulary)}
    ids = {}
    for role, token in special_tokens.items():
        if token not in index:
            raise ValueError(
                f"special_tokens[{role!r}]={token!r} is not in the vocabulary."
            )
        ids[role] = index[token]
    if ids["pad"] != 0:
        raise ValueError(
            f"special_tokens['pad']={special_tokens['pad']!r} must be the "
            "vocabulary's first token (id 0: tfformer's models mask id 0). "
            f"Received: id {ids['pad']}"
        )
    return ids


# BERT's text normalization (Hugging Face's `BertNormalizer`, Google's
# `BasicTokenizer`) before WordPiece: control characters removed, whitespace
# made spaces, spaces around CJK ideographs. RE2 rewrites, so an exported
# graph applies them with core ops too. (Lower-casing and accent stripping
# are the tokenizers' own steps.) The CJK ranges are Google's BERT's, which
# tensorflow-text's pre-tokenizer isolates too; Hugging Face's start the
# Extension E block at U+2B920 instead of U+2B820, so the 256 code points
# between are split apart here and not there (known, rare).
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
BERT_CLEANUP_RULES = (
    # U+0000, U+FFFD and "other" characters (control, format, private use)
    # but \t \n \r go.
    (r"[\x00\x{FFFD}]|[^\P{C}\t\n\r]", ""),
    (r"[\t\n\r\p{Zs}]", " "),
    (
        "([" + "".join(rf"\x{{{a:X}}}-\x{{{b:X}}}" for a, b in CJK_RANGES) + "])",
        r" \1 ",
    ),
)


def lower(strings, normalizer=None):
    """`tf.strings.lower` (ICU, which makes a word-final capital sigma a
    final sigma); with the "bert" normalizer, capital sigma first becomes
    U+03C3 (not the final form), as Hugging Face lower-cases one character
    at a time."""
    if normalizer == "bert":
        strings = tf.strings.regex_replace(strings, "\u03a3", "\u03c3")
    return tf.strings.lower(strings, encoding="utf-8")


def bert_cleanup(strings):
    """`BERT_CLEANUP_RULES` applied to a string tensor."""
    for pattern, rewrite in BERT_CLEANUP_RULES:
        strings = tf.strings.regex_replace(strings, pattern, rewrite)
    return strings


# Detokenized words are joined by spaces, punctuation included ("a dog ." ,
# "twenty - one"). These RE2 rewrites (graph ops, so an exported model can
# apply them too) undo the common cases.
JOIN_RULES = (
    (r" ([.,!?;:%)\]}])", r"\1"),
    (r"([(\[{]) ", r"\1"),
    (r"(\w) ' (s|t|re|ve|ll|d|m)\b", r"\1'\2"),
    (r"(\w) - (\w)", r"\1-\2"),
)


def join_punctuation(strings):
    """Removes the spaces the WordPiece detokenizer puts around punctuation."""
    for pattern, rewrite in JOIN_RULES:
        strings = tf.strings.regex_replace(strings, pattern, rewrite)
    return strings


def read_tokenizer_json(path, kind):
    """The settings a tokenizer's JSON file holds, checked to describe a
    `kind` tokenizer (ValueError naming the file otherwise)."""
    with open(path, encoding="utf-8") as f:
        try:
            spec = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(spec, dict) or spec.get("tokenizer") != kind:
        raise ValueError(f"{path} does not describe a {kind} tokenizer: {spec}")
    return spec


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
            raise ValueError(
                f"id_offset must be an int in [0, {vocabulary_size}). "
                f"Received: {id_offset!r}"
            )
        for name, value in (
            ("start_id", start_id),
            ("end_id", end_id),
            ("pad_id", pad_id),
        ):
            if not isinstance(value, int) or not 0 <= value < vocabulary_size:
                raise ValueError(
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
                    raise ValueError(
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
            raise ValueError(f"{path} lacks {e}.") from None
