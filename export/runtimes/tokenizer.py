r"""On-device tokenize / detokenize for a tfformer TFLite model (translator
or text generator), in plain Python (standard library only): the reference to
port to Kotlin, Swift or C++.

A TFLite export directory holds `text.json` and, for WordPiece, the
vocabularies it names (`source_vocabulary` and `target_vocabulary`; a
translator's are `source_vocab.txt` and `target_vocab.txt`, a generator's
one `text_vocab.txt` for both) next to the model. The steps:

tokenize(sentence) -> source ids
  1. Decode UTF-8 (invalid bytes become U+FFFD). With `normalizer`
     "bert" (a converted BERT checkpoint): drop U+0000, U+FFFD and "other"
     characters (categories Cc, Cf, Co, Cs) except tab, newline and
     carriage return;
     make whitespace (those three and category Zs) a space; put spaces
     around CJK ideographs (`CJK_RANGES`). With `strip_accents`: decompose
     (NFD) and drop the combining marks of `ACCENT_MARKS` (Hugging Face's
     table: an older Unicode's category Mn). Lower-case if
     `lower_case` is set (capital sigma (U+03A3) becomes U+03C3 first, as
     Hugging Face lower-cases one character at a time).
  2. Class every code point with `character_classes` (ranges: `starts[i]`
     up to the next start have class `class[i]`): 0 word, 1 space,
     2 punctuation, 3 dropped. Drop class 3; spaces end a word; each
     punctuation character is a word of its own.
  3. Split each word greedily into the longest vocabulary pieces, left to
     right; pieces after the first are looked up with the "##" prefix. A word
     with no such split, or longer than `max_bytes_per_word` UTF-8 bytes, is
     one [UNK] (`special_ids["unk"]`: 1, or a converted vocabulary's own).
  4. Cut to `source_length` ids and pad with 0 (the model's input shape).
     `ids()` stops before this step (a generator cuts from the left).

detokenize(generated ids) -> text
  1. Drop the special ids ([PAD], [UNK], [START], [END]: 0-3 unless
     `special_ids` says otherwise) and ids outside the vocabulary; stop at
     the first [END].
  2. Glue "##" pieces to the piece before them (the first piece keeps its
     "##"); join words with spaces.
  3. Apply `join_rules` (RE2 regular expressions, ASCII \w) to attach
     punctuation.

A converted decoder's export (`tokenizer` "bpe" or "ids") holds
`text_tokenizer.json`, the run's own tokenizer file, instead:
  "bpe" (GPT-2's byte-level BPE; `ByteLevelBPE`): special tokens are cut out
     first (longest first); with `add_prefix_space` each text between them
     that does not start with a space gets one; GPT-2's pre-tokenizer
     pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
     ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` (`\s`: Unicode White_Space); bytes
     to GPT-2's 256 characters; BPE by merge rank; ids are vocabulary indices plus
     `id_offset`. Detokenize: stop at the first end id; drop padding and ids
     outside the vocabulary; tokens joined, GPT-2's characters back to bytes.
     A Llama 3-style file (`pre_tokenizer` "llama3") cuts pieces with Llama
     3's pattern `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
     \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
     instead, and a Qwen2-style one ("qwen2") the same with one digit a
     piece (`\p{N}` for `\p{N}{1,3}`); with `ignore_merges` a piece that
     is a vocabulary token is that token; with `add_start_token` every
     text's ids start with the start token's; with `normalizer` "nfc" each
     text between special tokens is first put in Unicode's normalization
     form C (`unicodedata`'s: its Unicode knows combining marks that the
     checkpoint's tokenizer, and so the SavedModel's, reads as starters;
     text with one of those may read otherwise).
  "ids" (`TokenIds`): the text is whitespace-separated checkpoint ids;
     the model's are those plus `id_offset`, and back.

Example:
>>> tokenizer = DeviceTokenizer("export_dir")
>>> ids = tokenizer.tokenize("Ein Hund rennt.")   # list of source_length ints
>>> tokenizer.detokenize(model_output_ids)        # "A dog runs."
"""

import bisect
import itertools
import json
import os
import re
import unicodedata

PAD, UNK, START, END = 0, 1, 2, 3
WORD, SPACE, PUNCT, DROPPED = 0, 1, 2, 3
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


# "Other" characters the cleanup drops: control, format, private use,
# surrogate; not unassigned ones (Hugging Face's tokenizers and RE2 keep
# those, as any Unicode table older than the text would).
OTHER = ("Cc", "Cf", "Co", "Cs")


def bert_cleanup(text):
    """Step 1's "bert" normalizer (BERT's `_clean_text` and CJK spacing)."""
    out = []
    for char in text:
        point = ord(char)
        if char in "\t\n\r" or unicodedata.category(char) == "Zs":
            out.append(" ")
        elif point in (0, 0xFFFD) or unicodedata.category(char) in OTHER:
            continue
        elif any(low <= point <= high for low, high in CJK_RANGES):
            out.append(f" {char} ")
        else:
            out.append(char)
    return "".join(out)


# The combining marks accent stripping drops (hexadecimal code points and
# inclusive ranges): tfformer.preprocessing.text.ACCENT_MARKS, copied so this
# file needs nothing but the standard library.
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
ACCENT_MARK_POINTS = frozenset(
    point
    for first, _, last in (item.partition("-") for item in ACCENT_MARKS.split())
    for point in range(int(first, 16), int(last or first, 16) + 1)
)


def strip_accents(text):
    """Step 1's accent stripping: NFD, then `ACCENT_MARKS` dropped."""
    return "".join(
        c
        for c in unicodedata.normalize("NFD", text)
        if ord(c) not in ACCENT_MARK_POINTS
    )


# Unicode's White_Space: what the pre-tokenizer's \s matches.
WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)
CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")
# Llama 3's contractions match case-insensitively, as Unicode folds case:
# U+017F (long s) is an "s" there.
FOLDED = {"\u017f": "s"}
LINE_BREAKS = "\r\n"


def bytes_to_unicode():
    """GPT-2's map of the 256 byte values to printable characters: the
    printable Latin-1 ones to themselves, the others to U+0100 onwards."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _kind(char):
    """ "L" letter, "N" number, "S" White_Space, "O" anything else."""
    if char in WHITE_SPACE:
        return "S"
    category = unicodedata.category(char)[0]
    return category if category in "LN" else "O"


def gpt2_pieces(text):
    """GPT-2's pre-tokenization of `text` (no special tokens)."""
    pieces, i, n = [], 0, len(text)
    while i < n:
        char = text[i]
        if char == "'":
            suffix = next((x for x in CONTRACTIONS if text.startswith(x, i + 1)), None)
            if suffix:
                pieces.append(text[i : i + 1 + len(suffix)])
                i += 1 + len(suffix)
                continue
        j = i + 1 if char == " " and i + 1 < n else i
        kind = _kind(text[j])
        if kind != "S":
            # ' ?\p{L}+', ' ?\p{N}+' or ' ?[^\s\p{L}\p{N}]+'
            end = j + 1
            while end < n and _kind(text[end]) == kind:
                end += 1
        else:
            end = i + 1
            while end < n and _kind(text[end]) == "S":
                end += 1
            # '\s+(?!\S)': a run before a non-space leaves its last one.
            if end < n and end - i > 1:
                end -= 1
        pieces.append(text[i:end])
        i = end
    return pieces


def _contraction(text, i):
    """The length of Llama 3's case-insensitive contraction at `text[i]`
    ("'" and one of `CONTRACTIONS`), or 0."""
    if text[i] != "'":
        return 0
    for suffix in CONTRACTIONS:
        got = text[i + 1 : i + 1 + len(suffix)]
        if len(got) == len(suffix) and all(
            FOLDED.get(c, c.lower() if c.isascii() else c) == s
            for c, s in zip(got, suffix, strict=True)
        ):
            return 1 + len(suffix)
    return 0


def llama3_pieces(text, digits=3):
    """Llama 3's pre-tokenization of `text` (no special tokens): the
    pattern's alternatives tried in order at each position, as a
    backtracking regex engine does (Qwen2's: `digits` 1)."""
    pieces, i, n = [], 0, len(text)
    while i < n:
        end = i + _contraction(text, i)
        kind = _kind(text[i])
        lead = text[i] not in LINE_BREAKS and kind in "SO"
        if end > i:
            pass
        elif kind == "L" or (lead and i + 1 < n and _kind(text[i + 1]) == "L"):
            # '[^\r\n\p{L}\p{N}]?\p{L}+'
            end = i + 1
            while end < n and _kind(text[end]) == "L":
                end += 1
        elif kind == "N":  # '\p{N}{1,3}' (Qwen2: '\p{N}')
            end = i + 1
            while end < n and end - i < digits and _kind(text[end]) == "N":
                end += 1
        elif _kind(text[i + 1 if text[i] == " " and i + 1 < n else i]) == "O":
            # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
            end = i + 1 if text[i] == " " else i
            while end < n and _kind(text[end]) == "O":
                end += 1
            while end < n and text[end] in LINE_BREAKS:
                end += 1
        else:  # a run of White_Space
            run = i
            while run < n and _kind(text[run]) == "S":
                run += 1
            breaks = [k for k in range(i, run) if text[k] in LINE_BREAKS]
            if breaks:  # '\s*[\r\n]+': up to its last line break
                end = breaks[-1] + 1
            elif run < n and run - i > 1:  # '\s+(?!\S)' leaves its last one
                end = run - 1
            else:  # '\s+'
                end = run
        pieces.append(text[i:end])
        i = end
    return pieces


PIECES = {
    "gpt2": gpt2_pieces,
    "llama3": llama3_pieces,
    "qwen2": lambda text: llama3_pieces(text, digits=1),
}


def merge_pass(symbols, best):
    """One BPE pass: each pair `k` whose `best[k]` is true merges, left to
    right without overlap."""
    merged, k = [], 0
    while k < len(symbols):
        if k + 1 < len(symbols) and best[k]:
            merged.append(symbols[k] + symbols[k + 1])
            k += 2
        else:
            merged.append(symbols[k])
            k += 1
    return merged


class ByteLevelBPE:
    """A byte-level BPE (GPT-2's or Llama 3's) from a run's
    `text_tokenizer.json`."""

    def __init__(self, spec):
        pre_tokenizer = spec.get("pre_tokenizer", "gpt2")
        if pre_tokenizer not in PIECES:
            raise ValueError(
                f"tokenizer.py reads GPT-2's, Llama 3's and Qwen2's byte-level BPE. "
                "Received: "
                f"a tokenizer file with pre_tokenizer={pre_tokenizer!r}"
            )
        self.pieces = PIECES[pre_tokenizer]
        self.nfc = spec.get("normalizer") == "nfc"
        self.ignore_merges = bool(spec.get("ignore_merges", False))
        self.vocabulary = spec["vocabulary"]
        self.index = {token: i for i, token in enumerate(self.vocabulary)}
        self.ranks = {
            tuple(m.split(" ")): rank for rank, m in enumerate(spec["merges"])
        }
        self.offset = spec["id_offset"]
        self.add_prefix_space = spec["add_prefix_space"]
        self.specials = sorted(spec["special_tokens"], key=len, reverse=True)
        self.start = None
        if spec.get("add_start_token", False):
            self.start = self.index[spec["start_token"]] + self.offset
        self.symbols = bytes_to_unicode()
        self.byte_of = {c: b for b, c in self.symbols.items()}
        self.cache = {}

    def segments(self, text):
        """(segment, is_special) in order: special tokens cut out."""
        out, start, i = [], 0, 0
        while i < len(text):
            found = next((t for t in self.specials if text.startswith(t, i)), None)
            if found is None:
                i += 1
                continue
            out.append((text[start:i], False))
            out.append((found, True))
            i = start = i + len(found)
        out.append((text[start:], False))
        return [(t, special) for t, special in out if t]

    def merge(self, piece):
        """The BPE tokens of one piece (as GPT-2's characters)."""
        if piece in self.cache:
            return self.cache[piece]
        if self.ignore_merges and piece in self.index:
            self.cache[piece] = [piece]
            return [piece]
        word = list(piece)
        while len(word) > 1:
            pairs = set(itertools.pairwise(word))
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            word = merge_pass(word, [p == best for p in itertools.pairwise(word)])
        self.cache[piece] = word
        return word

    def ids(self, text):
        out = [] if self.start is None else [self.start]
        for segment, special in self.segments(text):
            if special:
                out.append(self.index[segment] + self.offset)
                continue
            if self.add_prefix_space and not segment.startswith(" "):
                segment = " " + segment
            if self.nfc:  # this Python's Unicode (see the module's docstring)
                segment = unicodedata.normalize("NFC", segment)
            for piece in self.pieces(segment):
                chars = "".join(self.symbols[b] for b in piece.encode("utf-8"))
                out.extend(self.index[t] + self.offset for t in self.merge(chars))
        return out

    def text(self, ids):
        """Special tokens are written as text (Hugging Face's `decode`), but
        for the start token that `add_start_token` puts first."""
        ids = list(ids)
        if self.start is not None and ids[:1] == [self.start]:
            ids = ids[1:]
        tokens = [
            self.vocabulary[i - self.offset]
            for i in ids
            if 0 <= i - self.offset < len(self.vocabulary)
        ]
        data = bytearray()
        for char in "".join(tokens):
            if char in self.byte_of:
                data.append(self.byte_of[char])
            else:  # a character of an added token
                data.extend(char.encode("utf-8"))
        return data.decode("utf-8", "replace")


class SentencePieceBPE:
    """A SentencePiece BPE model (Llama 2's, Gemma's) from a run's
    `text_tokenizer.json`: its pieces as `[piece, score, type]` in id order
    (types 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)."""

    MERGEABLE = (1, 4, 5)
    # A text's first piece loses its leading space: a continuation's text is
    # the whole text's less the prompt's (`LiteRTGenerator.generate_text`).
    STARTS_TEXT_DIFFERENTLY = True

    def __init__(self, spec):
        self.pieces = [(p, float(s), int(t)) for p, s, t in spec["pieces"]]
        self.offset = spec["id_offset"]
        self.add_dummy_prefix = spec["add_dummy_prefix"]
        self.remove_extra_whitespaces = spec["remove_extra_whitespaces"]
        index = {p: i for i, (p, _, _) in enumerate(self.pieces)}
        self.mergeable = {
            p: i for p, i in index.items() if self.pieces[i][2] in self.MERGEABLE
        }
        # A pair merges when its concatenation is a piece: the highest score
        # first, the leftmost among equal scores.
        self.ranks = {}
        for piece, i in self.mergeable.items():
            for cut in range(1, len(piece)):
                left, right = piece[:cut], piece[cut:]
                if left in self.mergeable and right in self.mergeable:
                    self.ranks[(left, right)] = -self.pieces[i][1]
        user = sorted((p for p, _, t in self.pieces if t == 4), key=len, reverse=True)
        self.user = (
            re.compile("(" + "|".join(map(re.escape, user)) + ")") if user else None
        )
        self.byte_ids = [index[f"<0x{b:02X}>"] for b in range(256)]
        self.start = None
        if spec["add_start_token"]:
            self.start = index[spec["start_token"]] + self.offset

    def normalize(self, text):
        if self.remove_extra_whitespaces:
            text = re.sub(" +", " ", text.strip(" "))
        if self.add_dummy_prefix and text:
            text = " " + text
        return text.replace(" ", "\u2581")

    def merge(self, symbols):
        while True:
            ranks = [self.ranks.get(p) for p in itertools.pairwise(symbols)]
            known = [r for r in ranks if r is not None]
            if not known:
                return symbols
            best = min(known)
            symbols = merge_pass(symbols, [r == best for r in ranks])

    def ids(self, text):
        out = [] if self.start is None else [self.start]
        text = self.normalize(text)
        # User-defined pieces first (longest first), never merged.
        parts = self.user.split(text) if self.user else [text]
        for k, part in enumerate(parts):
            if not part:
                continue
            if k % 2:
                out.append(self.mergeable[part] + self.offset)
                continue
            for symbol in self.merge(list(part)):
                if symbol in self.mergeable:
                    out.append(self.mergeable[symbol] + self.offset)
                else:  # byte fallback
                    out.extend(self.byte_ids[b] + self.offset for b in symbol.encode())
        return out

    def text(self, ids):
        """Pieces back to text as `sentencepiece` decodes them: bytes for byte
        pieces, nothing for control ones, " \u2047 " for the unknown one,
        spaces for "\u2581"; while nothing is written yet, a piece's leading
        "\u2581" (the dummy prefix's) is dropped, once (with
        `remove_extra_whitespaces`, from each such piece)."""
        data, seen = bytearray(), False
        strip = self.add_dummy_prefix or self.remove_extra_whitespaces
        for i in ids:
            i -= self.offset
            if not 0 <= i < len(self.pieces):
                continue
            piece, _, kind = self.pieces[i]
            if kind == 3:
                continue
            if kind == 6:
                data.append(int(piece[3:5], 16))
                continue
            if kind == 2:
                data.extend(" \u2047 ".encode())
                continue
            if strip and not seen and not data and piece.startswith("\u2581"):
                piece = piece[1:]
                seen = not self.remove_extra_whitespaces
            data.extend(piece.replace("\u2581", " ").encode())
        return data.decode("utf-8", "replace")


class TokenIds:
    """Whitespace-separated checkpoint ids from a run's `text_tokenizer.json`."""

    def __init__(self, spec):
        self.offset = spec.get("id_offset", 0)
        self.limit = spec["vocabulary_size"] - self.offset
        self.pad = spec["pad_id"]

    def ids(self, text):
        words = text.split()
        if not all(w.isascii() and w.isdigit() and int(w) < self.limit for w in words):
            raise ValueError(
                "This model reads token ids: whitespace-separated integers below "
                f"{self.limit}. Received: {text[:200]!r}"
            )
        return [int(w) + self.offset for w in words]

    def text(self, ids):
        return " ".join(str(i - self.offset) for i in ids if i != self.pad)


CONVERTED = {"bpe": ByteLevelBPE, "sentencepiece": SentencePieceBPE, "ids": TokenIds}


def read_json(path):
    """The JSON value in the file at `path`; ValueError naming the file if
    it is not UTF-8 JSON."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is damaged: not UTF-8 JSON ({e})") from None


class DeviceTokenizer:
    """The tokenizer of one TFLite export directory.

    Raises:
        ValueError: `text.json`, or the tokenizer file it names, is not
            JSON or lacks a setting (named).
    """

    def __init__(self, directory):
        path = os.path.join(directory, "text.json")
        try:
            self._read(directory, path)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{path} (or the tokenizer file it names) is damaged: "
                f"{type(e).__name__} {e}; export the model again"
            ) from None

    def _read(self, directory, path):
        self.settings = read_json(path)
        self.source_length = self.settings["source_length"]
        self.byte_level = self.settings["tokenizer"] == "byte"
        special = self.settings.get("special_ids") or {}
        self.pad = special.get("pad", PAD)
        self.unk = special.get("unk", UNK)
        self.start = special.get("start", START)
        self.end = special.get("end", END)
        # A converted checkpoint may end at several ids (text.json's end_ids).
        self.ends = set(self.settings.get("end_ids", ())) | {self.end}
        self.special = set(special.values()) if special else {PAD, UNK, START, END}
        self.converted = None
        if self.settings["tokenizer"] in CONVERTED:
            spec = read_json(os.path.join(directory, self.settings["tokenizer_file"]))
            self.converted = CONVERTED[self.settings["tokenizer"]](spec)
            return
        if self.byte_level:
            return
        files = (
            self.settings.get("source_vocabulary", "source_vocab.txt"),
            self.settings.get("target_vocabulary", "target_vocab.txt"),
        )
        self.source = _read_vocabulary(os.path.join(directory, files[0]))
        self.target = _read_vocabulary(os.path.join(directory, files[1]))
        self.source_ids = {token: i for i, token in enumerate(self.source)}
        classes = self.settings["character_classes"]
        self.starts, self.classes = classes["starts"], classes["class"]
        self.suffix = self.settings["suffix"]
        self.max_bytes = self.settings["max_bytes_per_word"]
        # Read when text is tokenized, so checked now.
        for key in ("lower_case", "join_rules"):
            if key not in self.settings:
                raise KeyError(key)
        self.max_piece = max(len(t.removeprefix(self.suffix)) for t in self.source)

    def _class(self, char):
        return self.classes[bisect.bisect_right(self.starts, ord(char)) - 1]

    def words(self, sentence):
        """The words and punctuation marks of a sentence (steps 1-2)."""
        if isinstance(sentence, bytes):
            sentence = sentence.decode("utf-8", "replace")
        if self.settings.get("normalizer") == "bert":
            sentence = bert_cleanup(sentence)
        if self.settings.get("strip_accents"):
            sentence = strip_accents(sentence)
        if self.settings["lower_case"]:
            # One character at a time, as Hugging Face does: U+03A3 is U+03C3
            # even at the end of a word (Python's lower makes it ς).
            sentence = sentence.replace("\u03a3", "\u03c3").lower()
        words, current = [], []
        for char in sentence:
            kind = self._class(char)
            if kind == DROPPED:
                continue
            if kind != WORD and current:
                words.append("".join(current))
                current = []
            if kind == PUNCT:
                words.append(char)
            elif kind == WORD:
                current.append(char)
        if current:
            words.append("".join(current))
        return words

    def word_pieces(self, word):
        """Greedy longest-match-first ids of one word (step 3)."""
        if len(word.encode("utf-8")) > self.max_bytes:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            for end in range(min(len(word), start + self.max_piece), start, -1):
                piece = word[start:end] if start == 0 else self.suffix + word[start:end]
                if piece in self.source_ids:
                    ids.append(self.source_ids[piece])
                    start = end
                    break
            else:
                return [self.unk]
        return ids

    def ids(self, sentence):
        """All the ids of a sentence (steps 1-3; bytes given to a byte
        tokenizer are taken as they are)."""
        if self.converted is not None:
            if isinstance(sentence, bytes):
                sentence = sentence.decode("utf-8", "replace")
            return self.converted.ids(sentence)
        if self.byte_level:
            data = sentence.encode("utf-8") if isinstance(sentence, str) else sentence
            return [b + 4 for b in data]
        return [i for word in self.words(sentence) for i in self.word_pieces(word)]

    def tokenize(self, sentence):
        """Source ids for the model: exactly `source_length` ints (step 4)."""
        ids = self.ids(sentence)[: self.source_length]
        return ids + [self.pad] * (self.source_length - len(ids))

    def detokenize(self, ids):
        """Text of the model's output ids."""
        ids = list(ids)
        if self.converted is not None:
            # A converted decoder's start may be its end (GPT-2): stop at
            # the first end id, wherever it is.
            cut = next((i for i, t in enumerate(ids) if t in self.ends), None)
            ids = ids[:cut]
            return self.converted.text(ids)
        if self.end in ids[1:]:
            ids = ids[: ids.index(self.end, 1)]
        if self.byte_level:
            data = bytes(i - 4 for i in ids if 4 <= i < 260)
            return data.decode("utf-8", "replace")
        tokens = [
            self.target[i]
            for i in ids
            if 0 <= i < len(self.target) and i not in self.special
        ]
        text = tokens[0] if tokens else ""
        for token in tokens[1:]:
            if token.startswith(self.suffix):
                text += token[len(self.suffix) :]
            else:
                text += " " + token
        for pattern, rewrite in self.settings["join_rules"]:
            # RE2 (which training and the SavedModel use) has ASCII \w and
            # \b; re.ASCII makes Python's re agree.
            text = re.sub(pattern, rewrite, text, flags=re.ASCII)
        return text


def _read_vocabulary(path):
    with open(path, encoding="utf-8") as f:
        tokens = f.read().split("\n")
    return tokens[:-1] if tokens and tokens[-1] == "" else tokens
