"""Hugging Face `tokenizer.json` files equivalent to a run's tokenizer, in
the model's ids: what a `.litertlm` bundle carries for LiteRT-LM's Hugging
Face tokenizer (`tfformer.export.litertlm`). Tests read each with
Hugging Face's `tokenizers` against the run's own tokenizer."""

import re

from tfformer.errors import InputError
from tfformer.preprocessing.bpe_tokenizer import (
    LLAMA3_SPLIT,
    QWEN2_SPLIT,
    bytes_to_unicode,
)
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.text import RESERVED_TOKENS

# The token a converted run's bundle puts at id 0, which the model reads as
# padding (never produced from text: the byte-level pre-tokenizers cut "<|"
# off, and a SentencePiece model holds it as a control piece).
BUNDLE_PADDING = "<|tfformer_padding|>"


def byte_tokenizer_json():
    """tfformer's byte tokenizer (ids 0-3 reserved, byte b is id b + 4) as a
    Hugging Face `tokenizer.json`: a byte-level BPE without merges, so each
    byte is one token. The reserved tokens are in the vocabulary but not
    "added tokens", which Hugging Face would match in the text itself: a
    prompt holding "[END]" is five bytes, as in tfformer."""
    alphabet = bytes_to_unicode()
    vocabulary = {token: i for i, token in enumerate(RESERVED_TOKENS)}
    vocabulary.update({alphabet[b]: b + ByteTokenizer.offset for b in range(256)})
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": False,
    }
    return hf_bpe_json(vocabulary, [], byte_level, byte_level)


def hf_bpe_json(
    vocabulary, merges, pre_tokenizer, decoder, added=(), normalizer=None, **model
):
    """A Hugging Face `tokenizer.json` of a byte-level BPE: `vocabulary`
    ({token: id}), `merges` ([left, right] pairs), the given pre-tokenizer,
    decoder and normalizer, `added` tokens, no post-processor; `model`
    overrides BPE options (`ignore_merges`)."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": list(added),
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            **model,
            "vocab": vocabulary,
            "merges": merges,
        },
    }


def token_id_tokenizer_json(tokenizer):
    """A converted run's `TokenIdTokenizer` (text of whitespace-separated
    checkpoint ids) as a Hugging Face `tokenizer.json`: each checkpoint id
    k is the word "k" (model id k + `id_offset`, `BUNDLE_PADDING` below
    them), text split on whitespace, and each token decoded with a space
    before it (so a continuation reads as `tfformer-predict` prints it
    after the prompt, token by token). A word that is no id (or one with a
    leading zero) becomes id 0, which the device model does not mask in a
    prompt: such text changes the continuation (`tfformer-predict` refuses
    it)."""
    offset = tokenizer.id_offset
    if offset != 1:  # what conversions write; id 0 is the unknown word's
        raise InputError(f"id_offset must be 1. Received: {offset!r}")
    vocabulary = {BUNDLE_PADDING: 0}
    vocabulary.update(
        {f"\u2581{k}": k + offset for k in range(tokenizer.vocabulary_size - offset)}
    )
    metaspace = {
        "type": "Metaspace",
        "replacement": "\u2581",
        "prepend_scheme": "always",
        "split": True,
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace],
        },
        "post_processor": None,
        "decoder": {
            "type": "Replace",
            "pattern": {"String": "\u2581"},
            "content": " ",
        },
        "model": {
            "type": "WordLevel",
            "vocab": vocabulary,
            "unk_token": BUNDLE_PADDING,
        },
    }


def bpe_tokenizer_json(tokenizer):
    """A converted run's `ByteLevelBPETokenizer` as a Hugging Face
    `tokenizer.json` in the model's ids (the checkpoint's plus
    `id_offset`, `BUNDLE_PADDING` below them): the same pieces, merges,
    special tokens, `ignore_merges` and NFC normalizer (Qwen2's); no
    post-processor (LiteRT-LM puts the metadata's start token first)."""
    offset = tokenizer.id_offset
    if offset not in (0, 1):
        raise InputError(f"id_offset must be 0 or 1. Received: {offset!r}")
    vocabulary = {BUNDLE_PADDING: 0} if offset else {}
    vocabulary.update({t: i + offset for i, t in enumerate(tokenizer.vocabulary)})
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": tokenizer.add_prefix_space,
        "trim_offsets": True,
        "use_regex": tokenizer.pre_tokenizer == "gpt2",
    }
    pre_tokenizer = byte_level
    if tokenizer.pre_tokenizer in ("llama3", "qwen2"):
        pattern = LLAMA3_SPLIT if tokenizer.pre_tokenizer == "llama3" else QWEN2_SPLIT
        split = {
            "type": "Split",
            "pattern": {"Regex": pattern},
            "behavior": "Isolated",
            "invert": False,
        }
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [split, byte_level]}
    added = [
        {
            "id": vocabulary[token],
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for token in tokenizer.special_tokens
    ]
    return hf_bpe_json(
        vocabulary,
        [[a, b] for a, b in tokenizer.merges],
        pre_tokenizer,
        {**byte_level, "use_regex": True},
        added,
        {"type": "NFC"} if tokenizer.normalizer == "nfc" else None,
        ignore_merges=tokenizer.ignore_merges,
    )


def _code_point_class(ranges):
    """An Oniguruma character class of inclusive code-point `ranges`."""
    return "[" + "".join(rf"\x{{{a:X}}}-\x{{{b:X}}}" for a, b in ranges) + "]"


def _class_ranges(character_classes, wanted):
    """The inclusive ranges of `probe_character_classes` ranges whose class
    is `wanted`."""
    from tfformer.export.wordpiece import MAX_CODE_POINT

    starts, classes = (list(map(int, x)) for x in character_classes)
    ends = [s - 1 for s in starts[1:]] + [MAX_CODE_POINT]
    spans = zip(starts, ends, classes, strict=True)
    return [(a, b) for a, b, c in spans if c == wanted]


# `JOIN_RULES` for a Hugging Face decoder: a `Replace` takes no back
# references, so each rule replaces only the spaces it removes, with the
# characters around them as lookarounds (ASCII word characters, as RE2's
# \w). JOIN_RULES applies the two rules with a word character on each side
# twice, which equals the lookarounds' one pass (see its comment).
WORD = "[0-9A-Za-z_]"
JOIN_REPLACEMENTS = (
    (r" (?=[.,!?;:%)\]}])", ""),
    (r"(?<=[(\[{]) ", ""),
    (rf"(?<={WORD}) ' (?=(?:s|t|re|ve|ll|d|m)(?!{WORD}))", "'"),
    (rf"(?<={WORD}) - (?={WORD})", "-"),
)


def wordpiece_tokenizer_json(
    vocabulary,
    special_ids,
    unk_id,
    character_classes,
    *,
    lower_case=False,
    normalizer=None,
    strip_accents=False,
    max_bytes_per_word=100,
):
    """A WordPiece run's tokenizer (`training`'s `WordPieceTokenizer`, or
    export's `CoreWordPiece`) as a Hugging Face `tokenizer.json`, in its own
    ids (id 0 is its padding already).

    Args:
        vocabulary: the tokens in id order.
        special_ids: the ids detokenize drops ([PAD], [UNK], [START],
            [END]); the decoder drops their tokens (and the space before).
        unk_id: the id of the unknown word ([UNK]).
        character_classes: `probe_character_classes()`: which code points
            `FastWordpieceTokenizer` drops, splits at (whitespace) or makes
            words of their own (punctuation, CJK ideographs).
        lower_case, normalizer ("bert" or None), strip_accents: the run's.
        max_bytes_per_word: `CoreWordPiece`'s.

    The text is normalized as the run's tokenizer does (BERT's cleanup,
    accents and lower case as `BertNormalizer`, or `Lowercase`), the dropped code
    points removed, cut at whitespace and around punctuation by the probed
    classes, and split by WordPiece; decoding drops the special tokens,
    glues "##" pieces, joins words with spaces and applies
    `JOIN_REPLACEMENTS`. (The special tokens are no added tokens: a prompt
    that holds "[END]" reads it as text, as the run does; and where the
    run's detokenize keeps the "##" of a piece that follows a dropped first
    token, the decoder glues it.) `max_input_chars_per_word`
    counts characters where `FastWordpieceTokenizer` counts UTF-8 bytes: a
    word of more than 100 bytes but at most 100 characters is one [UNK]
    there and pieces here.
    """
    from tfformer.export.wordpiece import DROPPED, PUNCT, SPACE

    steps = []
    if normalizer == "bert":
        steps.append(
            {
                "type": "BertNormalizer",
                "clean_text": True,
                "handle_chinese_chars": True,
                "strip_accents": strip_accents,
                "lowercase": lower_case,
            }
        )
    elif normalizer is not None or strip_accents:
        raise InputError(
            "A WordPiece tokenizer.json reproduces the 'bert' normalizer (and "
            "accent stripping only with it). Received: "
            f"normalizer={normalizer!r}, strip_accents={strip_accents}"
        )
    elif lower_case:
        steps.append({"type": "Lowercase"})
    dropped = _class_ranges(character_classes, DROPPED)
    if dropped:
        steps.append(
            {
                "type": "Replace",
                "pattern": {"Regex": _code_point_class(dropped)},
                "content": "",
            }
        )
    special = "|".join(re.escape(vocabulary[i]) for i in sorted(set(special_ids)))
    spaces = _code_point_class(_class_ranges(character_classes, SPACE))
    punctuation = _code_point_class(_class_ranges(character_classes, PUNCT))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": steps},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": spaces + "+"},
                    "behavior": "Removed",
                    "invert": False,
                },
                {
                    "type": "Split",
                    "pattern": {"Regex": punctuation},
                    "behavior": "Isolated",
                    "invert": False,
                },
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "WordPiece", "prefix": "##", "cleanup": False},
                {  # token by token: a special token and its space
                    "type": "Replace",
                    "pattern": {"Regex": f"^ ?(?:{special})$"},
                    "content": "",
                },
                {"type": "Fuse"},
                # The first word's space, after special tokens before it.
                {"type": "Replace", "pattern": {"Regex": "^ "}, "content": ""},
                *(
                    {"type": "Replace", "pattern": {"Regex": p}, "content": c}
                    for p, c in JOIN_REPLACEMENTS
                ),
            ],
        },
        "model": {
            "type": "WordPiece",
            "unk_token": vocabulary[unk_id],
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": int(max_bytes_per_word),
            "vocab": {token: i for i, token in enumerate(vocabulary)},
        },
    }
