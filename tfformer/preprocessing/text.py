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


# The combining marks accent stripping removes after canonical decomposition
# (NFD): Hugging Face `tokenizers`' table (`BertNormalizer(strip_accents=
# True)`), the reference for converted checkpoints. It is an older Unicode's
# category Mn, not this Python's or RE2's: 384 marks added since (U+07FD,
# U+0898-U+089F, Newa's U+11438, ...) are kept, and U+1734, Mn then, is
# removed. Hexadecimal code points and inclusive ranges; tests check the
# table against `tokenizers` itself.
ACCENT_MARKS = """
300-36F 483-487 591-5BD 5BF 5C1-5C2 5C4-5C5 5C7 610-61A 64B-65F 670 6D6-6DC
6DF-6E4 6E7-6E8 6EA-6ED 711 730-74A 7A6-7B0 7EB-7F3 816-819 81B-823 825-827
829-82D 859-85B 8E3-902 93A 93C 941-948 94D 951-957 962-963 981 9BC 9C1-9C4
9CD 9E2-9E3 A01-A02 A3C A41-A42 A47-A48 A4B-A4D A51 A70-A71 A75 A81-A82 ABC
AC1-AC5 AC7-AC8 ACD AE2-AE3 B01 B3C B3F B41-B44 B4D B56 B62-B63 B82 BC0 BCD
C00 C3E-C40 C46-C48 C4A-C4D C55-C56 C62-C63 C81 CBC CBF CC6 CCC-CCD CE2-CE3
D01 D41-D44 D4D D62-D63 DCA DD2-DD4 DD6 E31 E34-E3A E47-E4E EB1 EB4-EB9
EBB-EBC EC8-ECD F18-F19 F35 F37 F39 F71-F7E F80-F84 F86-F87 F8D-F97 F99-FBC
FC6 102D-1030 1032-1037 1039-103A 103D-103E 1058-1059 105E-1060 1071-1074 1082
1085-1086 108D 109D 135D-135F 1712-1714 1732-1734 1752-1753 1772-1773
17B4-17B5 17B7-17BD 17C6 17C9-17D3 17DD 180B-180D 18A9 1920-1922 1927-1928
1932 1939-193B 1A17-1A18 1A1B 1A56 1A58-1A5E 1A60 1A62 1A65-1A6C 1A73-1A7C
1A7F 1AB0-1ABD 1B00-1B03 1B34 1B36-1B3A 1B3C 1B42 1B6B-1B73 1B80-1B81
1BA2-1BA5 1BA8-1BA9 1BAB-1BAD 1BE6 1BE8-1BE9 1BED 1BEF-1BF1 1C2C-1C33
1C36-1C37 1CD0-1CD2 1CD4-1CE0 1CE2-1CE8 1CED 1CF4 1CF8-1CF9 1DC0-1DF5
1DFC-1DFF 20D0-20DC 20E1 20E5-20F0 2CEF-2CF1 2D7F 2DE0-2DFF 302A-302D
3099-309A A66F A674-A67D A69E-A69F A6F0-A6F1 A802 A806 A80B A825-A826 A8C4
A8E0-A8F1 A926-A92D A947-A951 A980-A982 A9B3 A9B6-A9B9 A9BC A9E5 AA29-AA2E
AA31-AA32 AA35-AA36 AA43 AA4C AA7C AAB0 AAB2-AAB4 AAB7-AAB8 AABE-AABF AAC1
AAEC-AAED AAF6 ABE5 ABE8 ABED FB1E FE00-FE0F FE20-FE2F 101FD 102E0 10376-1037A
10A01-10A03 10A05-10A06 10A0C-10A0F 10A38-10A3A 10A3F 10AE5-10AE6 11001
11038-11046 1107F-11081 110B3-110B6 110B9-110BA 11100-11102 11127-1112B
1112D-11134 11173 11180-11181 111B6-111BE 111CA-111CC 1122F-11231 11234
11236-11237 112DF 112E3-112EA 11300-11301 1133C 11340 11366-1136C 11370-11374
114B3-114B8 114BA 114BF-114C0 114C2-114C3 115B2-115B5 115BC-115BD 115BF-115C0
115DC-115DD 11633-1163A 1163D 1163F-11640 116AB 116AD 116B0-116B5 116B7
1171D-1171F 11722-11725 11727-1172B 16AF0-16AF4 16B30-16B36 16F8F-16F92
1BC9D-1BC9E 1D167-1D169 1D17B-1D182 1D185-1D18B 1D1AA-1D1AD 1D242-1D244
1DA00-1DA36 1DA3B-1DA6C 1DA75 1DA84 1DA9B-1DA9F 1DAA1-1DAAF 1E8D0-1E8D6
E0100-E01EF
"""


def accent_mark_ranges():
    """`ACCENT_MARKS` as (first, last) code point pairs."""
    pairs = []
    for item in ACCENT_MARKS.split():
        first, _, last = item.partition("-")
        pairs.append((int(first, 16), int(last or first, 16)))
    return tuple(pairs)


def lower(strings):
    """`tf.strings.lower` (ICU's full lower-casing), one character at a
    time as Hugging Face's `Lowercase` and `BertNormalizer` do: capital
    sigma first becomes U+03C3, never ICU's final sigma at a word's end
    (its one rule that looks at the characters around)."""
    strings = tf.strings.regex_replace(strings, "\u03a3", "\u03c3")
    # ICU's lower-casing ends a string at its first NUL: NUL travels as
    # U+FDD0 U+FDD2 (and U+FDD0 as U+FDD0 U+FDD1), which it leaves alone.
    strings = tf.strings.regex_replace(strings, "\ufdd0", "\ufdd0\ufdd1")
    strings = tf.strings.regex_replace(strings, "\\x00", "\ufdd0\ufdd2")
    strings = tf.strings.lower(strings, encoding="utf-8")
    strings = tf.strings.regex_replace(strings, "\ufdd0\ufdd2", "\x00")
    return tf.strings.regex_replace(strings, "\ufdd0\ufdd1", "\ufdd0")


def bert_cleanup(strings):
    """`BERT_CLEANUP_RULES` applied to a string tensor."""
    for pattern, rewrite in BERT_CLEANUP_RULES:
        strings = tf.strings.regex_replace(strings, pattern, rewrite)
    return strings


# Detokenized words are joined by spaces, punctuation included ("a dog ." ,
# "twenty - one"). These RE2 rewrites (graph ops, so an exported model can
# apply them too) undo the common cases. A rewrite consumes the word
# character on each side of the space it removes, so in "a - b - c" one
# pass joins "a-b" and skips "b - c": the two such rules run twice (the
# second pass joins every gap the first skipped; skipped gaps are never
# next to each other), which is what one pass of lookarounds does
# (`tfformer.export.tokenizer_json.JOIN_REPLACEMENTS`).
_APOSTROPHE = (r"(\w) ' (s|t|re|ve|ll|d|m)\b", r"\1'\2")
_HYPHEN = (r"(\w) - (\w)", r"\1-\2")
JOIN_RULES = (
    (r" ([.,!?;:%)\]}])", r"\1"),
    (r"([(\[{]) ", r"\1"),
    _APOSTROPHE,
    _APOSTROPHE,
    _HYPHEN,
    _HYPHEN,
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


# BERT's input packing, in the graph: shared by the exported serving graphs
# (`tfformer.export.tasks.bert_text`) and the Keras packing layer
# (`tfformer.training.preprocessors.BertPacker`).
def pair_lengths(first, second, budget):
    """Token counts kept of a pair, as BERT's longest-first loop keeps them
    (the longer text loses a token until both fit `budget`; on a tie the
    second): closed form, int32 tensors."""
    half_up = (budget + 1) // 2
    half_down = budget // 2
    return (
        tf.minimum(first, tf.maximum(budget - second, half_up)),
        tf.minimum(second, tf.maximum(budget - first, half_down)),
    )


def row_heads(ragged, counts):
    """The first `counts[r]` values of each row of `ragged` (ragged rank 1):
    a gather of ranges, a tenth of the graph `tf.ragged.boolean_mask` builds."""
    starts = tf.cast(ragged.row_starts(), tf.int32)
    keep = tf.minimum(counts, tf.cast(ragged.row_lengths(), tf.int32))
    return tf.gather(ragged.values, tf.ragged.range(starts, starts + keep))
