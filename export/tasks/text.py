"""Pieces every text exporter uses: the core-op tokenizer of a run's
`TokenizerSpec`, id clamping, the input cap and `text.json` for devices."""

import os

import tensorflow as tf

from tfformer.export.wordpiece import CoreWordPiece, probe_character_classes
from tfformer.rundir.text import (
    JOIN_RULES,
    RESERVED_TOKENS,
    SUFFIX,
    UNK_ID,
    ByteTokenizer,
)

# Raw inputs are cut to this many bytes before tokenizing; the tokens any
# model reads come from far fewer.
MAX_INPUT_BYTES = 16384
DEVICE_TOKENIZER = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "device_tokenizer.py"
)


def make_tokenizer(spec, character_classes=None):
    """The core-op tokenizer of a `TokenizerSpec`."""
    if spec.kind == "byte":
        return ByteTokenizer()
    return CoreWordPiece(
        spec.path,
        lower_case=spec.lower_case,
        character_classes=character_classes or probe_character_classes(),
    )


def clamp_ids(ids, vocabulary_size):
    """Ids outside `[0, vocabulary_size)` become [UNK]."""
    ids = tf.cast(ids, tf.int32)
    inside = tf.logical_and(ids >= 0, ids < vocabulary_size)
    return tf.where(inside, ids, UNK_ID)


def valid_utf8(text):
    """`text` with every invalid UTF-8 sequence replaced by U+FFFD."""
    return tf.strings.unicode_transcode(
        text,
        input_encoding="UTF-8",
        output_encoding="UTF-8",
        errors="replace",
        replacement_char=0xFFFD,
    )


def device_text_settings(kind, lower_case, character_classes=None, **lengths):
    """What `device_tokenizer.py` reads from `text.json`, plus `lengths`."""
    settings = {
        "tokenizer": kind,
        "lower_case": lower_case,
        **lengths,
        "reserved_tokens": list(RESERVED_TOKENS),
        "suffix": SUFFIX,
        "max_bytes_per_word": 100,
        "join_rules": [list(rule) for rule in JOIN_RULES],
    }
    if kind == "wordpiece":
        starts, classes = character_classes
        settings["character_classes"] = {
            "classes": ["word", "space", "punctuation", "dropped"],
            "starts": [int(s) for s in starts],
            "class": [int(c) for c in classes],
        }
    return settings
