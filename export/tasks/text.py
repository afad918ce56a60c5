"""Pieces every text exporter uses: the core-op tokenizer of a run's
`TokenizerSpec`, id clamping, the input cap and `text.json` for devices."""

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.export.wordpiece import CoreWordPiece, probe_character_classes
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.text import (
    JOIN_RULES,
    RESERVED_TOKENS,
    SUFFIX,
    UNK_ID,
    special_token_ids,
)
from tfformer.runs.files import read_text

# Raw inputs are cut to this many bytes before tokenizing; the tokens any
# model reads come from far fewer.
MAX_INPUT_BYTES = 16384


def refuse_token_ids(spec):
    """The tokenizers of converted decoders (token ids; byte-level or
    SentencePiece BPE) have their own classes
    (`causal_lm.run.converted_tokenizer`): refused by the WordPiece and byte
    helpers here."""
    if spec.kind in ("ids", "bpe", "sentencepiece"):
        raise InputError(
            f"{spec.path} is a converted decoder's tokenizer ({spec.kind!r}): "
            "only causal_lm exports read it."
        )


def make_tokenizer(spec, character_classes=None):
    """The core-op tokenizer of a `TokenizerSpec`."""
    refuse_token_ids(spec)
    if spec.kind == "byte":
        return ByteTokenizer()
    return CoreWordPiece(
        spec.path,
        lower_case=spec.lower_case,
        character_classes=character_classes or probe_character_classes(),
        **spec.options,
    )


def special_ids(spec, *roles):
    """The ids of `roles` (default start and end) in a `TokenizerSpec`'s
    vocabulary: the reserved ids, or a converted vocabulary's own."""
    refuse_token_ids(spec)
    if spec.kind == "byte":
        ids = {"pad": 0, "unk": UNK_ID, "start": 2, "end": 3}
    else:
        vocabulary = read_text(spec.path).split("\n")
        if vocabulary and vocabulary[-1] == "":
            vocabulary.pop()
        ids = special_token_ids(vocabulary, spec.options.get("special_tokens"))
    return [ids[role] for role in roles or ("start", "end")]


def clamp_ids(ids, vocabulary_size, unk_id=UNK_ID):
    """Ids outside `[0, vocabulary_size)` become [UNK] (`unk_id`)."""
    ids = tf.cast(ids, tf.int32)
    inside = tf.logical_and(ids >= 0, ids < vocabulary_size)
    return tf.where(inside, ids, unk_id)


def valid_utf8(text):
    """`text` with every invalid UTF-8 sequence replaced by U+FFFD."""
    return tf.strings.unicode_transcode(
        text,
        input_encoding="UTF-8",
        output_encoding="UTF-8",
        errors="replace",
        replacement_char=0xFFFD,
    )


def device_text_settings(
    kind, lower_case, character_classes=None, spec=None, **lengths
):
    """What `tokenizer.py` reads from `text.json`, plus `lengths`;
    with the run's `spec` (a `TokenizerSpec`), a converted vocabulary's
    special ids and normalization too."""
    settings = {
        "tokenizer": kind,
        "lower_case": lower_case,
        **lengths,
        "reserved_tokens": list(RESERVED_TOKENS),
        "suffix": SUFFIX,
        "max_bytes_per_word": 100,
        "join_rules": [list(rule) for rule in JOIN_RULES],
    }
    if spec is not None and spec.options:
        roles = ("pad", "unk", "start", "end", "mask")
        roles = roles if "mask" in spec.options.get("special_tokens", {}) else roles[:4]
        settings["special_ids"] = dict(
            zip(roles, special_ids(spec, *roles), strict=True)
        )
        settings["normalizer"] = spec.options.get("normalizer")
        settings["strip_accents"] = bool(spec.options.get("strip_accents", False))
    if kind == "wordpiece":
        starts, classes = character_classes
        settings["character_classes"] = {
            "classes": ["word", "space", "punctuation", "dropped"],
            "starts": [int(s) for s in starts],
            "class": [int(c) for c in classes],
        }
    return settings
