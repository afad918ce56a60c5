"""Text conventions shared by training and export: reserved ids, WordPiece's
continuation prefix, the detokenizer's punctuation rules, and the byte
tokenizer (core TensorFlow ops only, so the same code runs inside an exported
SavedModel)."""

import json

import tensorflow as tf

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.files import read_text

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
RESERVED_TOKENS = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = 0, 1, 2, 3
# A WordPiece piece that continues a word.
SUFFIX = "##"
# The roles of a vocabulary's special tokens. A vocabulary tfformer learns
# starts with RESERVED_TOKENS; one converted from a checkpoint names its own
# (BERT's: [PAD] [UNK] [CLS] [SEP] [MASK], at ids 0, 100, 101, 102, 103).
SPECIAL_ROLES = ("pad", "unk", "start", "end", "mask")


def special_token_ids(vocabulary, special_tokens=None):
    """{role: id} of `special_tokens` ({role: token}; None: the reserved
    tokens, which must then open the vocabulary) in `vocabulary`.

    Padding must be id 0 (tfformer's models mask id 0) and pad, unk, start
    and end must be given. ValueError naming the role and token otherwise.
    """
    vocabulary = list(vocabulary)
    if special_tokens is None:
        if tuple(vocabulary[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
            raise InputError(
                f"vocabulary must start with {list(RESERVED_TOKENS)} (or name "
                "its special tokens). Received: "
                f"{vocabulary[: len(RESERVED_TOKENS)]}"
            )
        return {"pad": PAD_ID, "unk": UNK_ID, "start": START_ID, "end": END_ID}
    if not isinstance(special_tokens, dict):
        raise InputTypeError(
            "special_tokens must be a dict {role: token}. "
            f"Received: {special_tokens!r}"
        )
    unknown = sorted(set(special_tokens) - set(SPECIAL_ROLES))
    missing = [r for r in SPECIAL_ROLES[:4] if r not in special_tokens]
    if unknown or missing:
        raise InputError(
            f"special_tokens must name {list(SPECIAL_ROLES[:4])} (and may name "
            f"'mask'). Received: {special_tokens!r}"
        )
    index = {token: i for i, token in enumerate(vocabulary)}
    ids = {}
    for role, token in special_tokens.items():
        if token not in index:
            raise InputError(
                f"special_tokens[{role!r}]={token!r} is not in the vocabulary."
            )
        ids[role] = index[token]
    if ids["pad"] != 0:
        raise InputError(
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
    try:
        spec = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(spec, dict) or spec.get("tokenizer") != kind:
        raise InputError(f"{path} does not describe a {kind} tokenizer: {spec}")
    return spec
