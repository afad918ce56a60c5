"""GPT-2's byte-level BPE tokenizer in core TensorFlow ops, so the same code
tokenizes in a tf.data pipeline and inside an exported SavedModel.

Hugging Face's tokenizers do three things, reproduced here:
1. Pre-tokenization with GPT-2's pattern
   `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+`
   (special tokens such as `<|endoftext|>` are cut out first). RE2 has no
   lookahead: a first rewrite splits the last character off every run of
   two or more whitespace characters that a non-space follows (what
   `\\s+(?!\\S)` does by backtracking), then one rewrite marks where every
   piece starts, and `tf.strings.split` cuts there. `\\s` is Unicode's
   White_Space (RE2's own is ASCII).
2. Bytes to GPT-2's 256 printable characters (`bytes_to_unicode`).
3. BPE: in each piece, the adjacent pair with the lowest merge rank is
   merged, every occurrence of it left to right, pass after pass, in one
   `tf.while_loop` over every piece at once (the result of Hugging Face's
   Rust `BPE::merge_word`, which merges the leftmost lowest-rank pair one
   at a time).

A NUL character marks piece boundaries while the pieces are cut, so the
text's own NULs (and the noncharacter U+FDD0 used to escape them) travel
escaped: NUL as U+FDD0 U+FDD2, U+FDD0 as U+FDD0 U+FDD1. Like NUL, both are
neither space, letter nor number, so the cut falls where it falls around the
NUL; each piece is unescaped before its bytes are looked up, and a NUL is
byte 0 as in Hugging Face.

Llama 3's tokenizer is the same machine with another pattern (its
tokenizer.json's `Split` pre-tokenizer, then `ByteLevel` without a regex):
`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|
 ?[^\\s\\p{L}\\p{N}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+` (`pre_tokenizer="llama3"`).
There `\\s*[\r\n]+` comes before the lookahead: a whitespace run that ends
in a line break is one piece, and only a run ending in other whitespace
gives its last character to the next piece, and the one character that
may lead a run of letters may be an escaped NUL. Its `ignore_merges` (a piece
that is a token of the vocabulary is that token, whatever the merges
would make of it) is an option too.

Limits: BPE dropout and `continuing_subword_prefix` are not reproduced
(conversions refuse them).
"""

import json

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.preprocessing.text import read_tokenizer_json
from tfformer.runs.files import atomic_write_text

# Unicode's White_Space, what Hugging Face's `\s` matches.
WHITESPACE = (
    r"\t\n\x0b\x0c\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}"
    r"\x{202f}\x{205f}\x{3000}"
)
SEP = "\x00"
# The escape of the text's NULs and of itself (see the module's docstring).
ESCAPE = "\ufdd0"
ESCAPES = ((ESCAPE, ESCAPE + "\ufdd1"), (SEP, ESCAPE + "\ufdd2"))
# A run of two or more whitespace characters before a non-space: the last
# one is split off (it starts the next piece, as `\s+(?!\S)` leaves it).
SPLIT_LAST_SPACE = rf"([{WHITESPACE}]+)([{WHITESPACE}])([^{WHITESPACE}\x00])"
PIECE = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
    rf"| ?[^{WHITESPACE}\p{{L}}\p{{N}}\x00]+|[{WHITESPACE}]+"
)
# Llama 3's pre-tokenizer pattern as its tokenizer.json writes it (for
# Hugging Face's fancy-regex, with a lookahead).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Llama 3's pattern in RE2 (see the module's docstring): the run of
# whitespace before a non-space gives its last character away only when
# that character is no line break.
NOT_LINE_BREAK = WHITESPACE.replace(r"\n", "").replace(r"\r", "")
SPLIT_LAST_SPACE_LLAMA3 = rf"([{WHITESPACE}]+)([{NOT_LINE_BREAK}])([^{WHITESPACE}\x00])"
# The one character that may lead letters can be an escaped NUL or U+FDD0
# (two characters here, one in the text).
PIECE_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    r"|(?:\x{fdd0}[\x{fdd1}\x{fdd2}]|[^\r\n\p{L}\p{N}\x00\x{fdd0}])?\p{L}+|\p{N}{1,3}"
    rf"| ?[^{WHITESPACE}\p{{L}}\p{{N}}\x00]+[\r\n]*|[{WHITESPACE}]*[\r\n]+"
    rf"|[{WHITESPACE}]+"
)
# Qwen2's pattern (Qwen2.5's and Qwen3's tokenizer.json): Llama 3's with
# one digit a piece.
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
PIECE_QWEN2 = PIECE_LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
PRE_TOKENIZERS = {
    "gpt2": (SPLIT_LAST_SPACE, PIECE),
    "llama3": (SPLIT_LAST_SPACE_LLAMA3, PIECE_LLAMA3),
    "qwen2": (SPLIT_LAST_SPACE_LLAMA3, PIECE_QWEN2),
}
NORMALIZERS = (None, "nfc")
NO_MERGE = 2**31 - 1


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


def _escape_re2(text):
    """`text` as an RE2 literal: printable ASCII punctuation backslashed, any
    other non-alphanumeric character as \\x{HHHH} (RE2 refuses a backslash
    before a non-ASCII character)."""

    def one(c):
        if c.isascii() and c.isalnum():
            return c
        if c.isascii() and c.isprintable():
            return "\\" + c
        return f"\\x{{{ord(c):x}}}"

    return "".join(one(c) for c in text)


def split_at_marks(strings):
    """`(batch,)` strings cut at the `SEP` marks put in them, empty pieces
    dropped and the text's own NULs (and U+FDD0s) unescaped: `(batch,
    None)`."""
    pieces = tf.strings.split(strings, sep=SEP)
    pieces = tf.ragged.boolean_mask(pieces, tf.strings.length(pieces) > 0)
    values = pieces.flat_values
    for plain, escaped in reversed(ESCAPES):
        values = tf.strings.regex_replace(values, _escape_re2(escaped), plain)
    return pieces.with_flat_values(values)


def is_one_of(values, tokens):
    """Whether each of the flat string `values` is one of `tokens` (a list;
    empty: none is)."""
    if not tokens:
        return tf.zeros_like(values, tf.bool)
    table = tf.constant(tokens)
    return tf.reduce_any(tf.equal(values[:, None], table[None, :]), axis=1)


def whole_or_split(split, whole, is_whole):
    """Row `i` is `[whole[i]]` where `is_whole[i]`, else row `i` of the
    ragged `split` (values of the same dtype): a ragged `(rows, None)`."""
    lengths = tf.where(is_whole, 1, tf.cast(split.row_lengths(), tf.int32))
    starts = tf.where(
        is_whole,
        tf.size(split.flat_values, out_type=tf.int32)
        + tf.range(tf.size(whole, out_type=tf.int32)),
        tf.cast(split.row_starts(), tf.int32),
    )
    take = tf.ragged.range(lengths) + starts[:, None]
    values = tf.gather(tf.concat([split.flat_values, whole], 0), take.flat_values)
    return tf.RaggedTensor.from_row_splits(
        values, tf.cast(take.row_splits, tf.int64), validate=False
    )


def merge_symbols(values, splits, merge_rank):
    """BPE over every piece at once: `values` (symbols, flat) in rows cut
    at `splits`, and `merge_rank` a table of "left right" to the pair's rank
    (lower first; `NO_MERGE` for a pair that does not merge); returns the
    merged symbols the same way.

    Each pass merges, in every row, every occurrence of the row's
    lowest-rank pair, left to right without overlap (GPT-2's own
    `bpe()`; Hugging Face's heap merges them one at a time, leftmost
    first, to the same result: a pair involving a merged token always
    ranks after the merge that made it). The passes are as many as the
    distinct merges of the longest piece, not its merges.
    """

    def body(values, splits, _):
        rows = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
        row_of = rows.value_rowids()
        count = tf.size(values, out_type=tf.int64)
        index = tf.range(count)
        position = index - tf.gather(splits, row_of)
        length = tf.gather(rows.row_lengths(), row_of)
        following = tf.concat([values, [""]], 0)[1:]
        has_pair = position + 1 < length
        rank = merge_rank.lookup(tf.strings.join([values, following], " "))
        rank = tf.where(has_pair, rank, NO_MERGE)
        best = tf.math.unsorted_segment_min(rank, row_of, rows.nrows())
        is_best = tf.logical_and(rank < NO_MERGE, rank == tf.gather(best, row_of))
        # In a run of consecutive occurrences ("a a a" and the pair
        # "a a"), the 1st, 3rd, ... start a merge. Runs never cross rows
        # (a row's last symbol has no pair).
        run = tf.cumsum(tf.cast(tf.logical_not(is_best), tf.int64))
        run_start = tf.math.unsorted_segment_min(
            tf.where(is_best, index, tf.int64.max), run, count + 1
        )
        offset = index - tf.gather(run_start, run)
        merge_here = tf.logical_and(is_best, offset % 2 == 0)
        dropped = tf.concat([[False], merge_here], 0)[:-1]
        values = tf.where(merge_here, tf.strings.join([values, following]), values)
        kept = tf.logical_not(dropped)
        new_lengths = tf.math.unsorted_segment_sum(
            tf.cast(kept, tf.int64), row_of, rows.nrows()
        )
        splits = tf.concat([[0], tf.cumsum(new_lengths)], 0)
        return (
            tf.boolean_mask(values, kept),
            splits,
            tf.reduce_any(rank < NO_MERGE),
        )

    values, splits, _ = tf.while_loop(
        lambda values, splits, merged: merged,
        body,
        (values, splits, tf.constant(True)),
        shape_invariants=(
            tf.TensorShape([None]),
            tf.TensorShape([None]),
            tf.TensorShape([]),
        ),
    )
    return values, splits


class ByteLevelBPETokenizer(tf.Module):
    """GPT-2's byte-level BPE: strings to int32 ids and back, core ops only.

    Args:
        vocabulary: the tokens in id order (Hugging Face's ids).
        merges: (left, right) pairs, in rank order.
        special_tokens: tokens matched literally in the text before
            pre-tokenization (`<|endoftext|>`); each must be in `vocabulary`.
        start_token, end_token: tokens generation starts with and stops at.
        id_offset: the model's id of a token is its index plus this (a
            converted GPT-2 keeps id 0 for padding with 1).
        add_prefix_space: put a space before a text (each text between
            special tokens) that does not start with one (the tokenizer's
            `add_prefix_space`).
        pre_tokenizer: how text is cut into pieces before BPE: "gpt2",
            "llama3" or "qwen2" (see the module's docstring).
        normalizer: None, or "nfc": the text between special tokens in
            Unicode's normalization form C first (Qwen2's tokenizer.json;
            `tfformer.preprocessing.unicode_nfc`).
        ignore_merges: a piece that is a token of the vocabulary becomes that
            token without merges (Llama 3's `ignore_merges`).
        add_start_token: every text's ids begin with `start_token`'s (what
            Llama 3's post-processor template does: `<|begin_of_text|> $A`).

    Raises:
        ValueError: a special, start or end token not in the vocabulary, a
            merge of tokens the vocabulary lacks, a vocabulary without the
            256 byte characters, or repeated tokens.
    """

    unk_id = None

    def __init__(
        self,
        vocabulary,
        merges,
        *,
        special_tokens=(),
        start_token,
        end_token,
        id_offset=0,
        add_prefix_space=False,
        pre_tokenizer="gpt2",
        ignore_merges=False,
        add_start_token=False,
        normalizer=None,
    ):
        super().__init__()
        if normalizer not in NORMALIZERS:
            raise InputError(
                f"normalizer must be one of {NORMALIZERS}. Received: "
                f"normalizer={normalizer!r}"
            )
        if pre_tokenizer not in PRE_TOKENIZERS:
            raise InputError(
                f"pre_tokenizer must be one of {sorted(PRE_TOKENIZERS)}. "
                f"Received: pre_tokenizer={pre_tokenizer!r}"
            )
        if pre_tokenizer != "gpt2" and add_prefix_space:
            # Hugging Face's ByteLevel after a Split adds it to every piece.
            raise InputError(
                "add_prefix_space=True is an option of GPT-2's pieces only. "
                f"Received: pre_tokenizer={pre_tokenizer!r}, add_prefix_space=True"
            )
        vocabulary, merges = list(vocabulary), [tuple(m) for m in merges]
        index = {token: i for i, token in enumerate(vocabulary)}
        if len(index) != len(vocabulary):
            seen, repeated = set(), []
            for token in vocabulary:
                if token in seen:
                    repeated.append(token)
                seen.add(token)
            raise InputError(f"vocabulary repeats tokens: {repeated[:5]}")
        symbols = bytes_to_unicode()
        missing = [c for c in symbols.values() if c not in index]
        if missing:
            raise InputError(
                "vocabulary lacks byte characters (not a byte-level BPE "
                f"vocabulary?): {missing[:5]}"
            )
        for rank, merge in enumerate(merges):
            if (
                len(merge) != 2
                or merge[0] not in index
                or merge[1] not in index
                or merge[0] + merge[1] not in index
            ):
                raise InputError(
                    f"merges[{rank}]={merge!r}: its tokens and their merge must "
                    "be in the vocabulary."
                )
        for name, token in (("start_token", start_token), ("end_token", end_token)):
            if token not in index:
                raise InputError(f"{name}={token!r} is not in the vocabulary.")
        special_tokens = list(special_tokens)
        for token in special_tokens:
            if not isinstance(token, str) or not token or token not in index:
                raise InputError(
                    f"special_tokens: {token!r} is not a token of the vocabulary."
                )
        if (
            isinstance(id_offset, bool)
            or not isinstance(id_offset, int)
            or id_offset < 0
        ):
            raise InputError(f"id_offset must be an int >= 0. Received: {id_offset!r}")
        if not merges:
            raise InputError("merges is empty (a BPE without merges?).")
        seen = set()
        for rank, merge in enumerate(merges):
            if merge in seen:
                raise InputError(f"merges[{rank}]={merge!r} repeats an earlier merge.")
            seen.add(merge)
        self.vocabulary, self.merges = vocabulary, merges
        self.special_tokens = special_tokens
        self.start_token, self.end_token = start_token, end_token
        self.id_offset, self.add_prefix_space = id_offset, bool(add_prefix_space)
        self.pre_tokenizer, self.ignore_merges = pre_tokenizer, bool(ignore_merges)
        self.add_start_token = bool(add_start_token)
        self.normalizer = normalizer
        if normalizer == "nfc":
            from tfformer.preprocessing.unicode_nfc import UnicodeNFC

            self._nfc = UnicodeNFC()
        self._split_last_space, piece = PRE_TOKENIZERS[pre_tokenizer]
        self.pad_id = 0
        self.start_id = index[start_token] + id_offset
        self.end_id = index[end_token] + id_offset
        self.vocabulary_size = len(vocabulary) + id_offset
        # Longest first, so that one special token inside another is not cut.
        ordered = sorted(special_tokens, key=len, reverse=True)
        self._special_pattern = "|".join(_escape_re2(t) for t in ordered) or None
        if ordered:
            piece = self._special_pattern + "|" + piece
        self._piece_pattern = f"({piece})"
        self._token_to_id = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(vocabulary), tf.range(len(vocabulary), dtype=tf.int32)
            ),
            default_value=-1,
        )
        self._merge_rank = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant([f"{a} {b}" for a, b in merges]),
                tf.range(len(merges), dtype=tf.int32),
            ),
            default_value=NO_MERGE,
        )
        self._id_to_token = tf.constant(vocabulary)
        self._byte_symbols = tf.constant([symbols[b] for b in range(256)])
        # Code point -> its byte, for the 256 characters (others: -1).
        decoder = [-1] * (max(ord(c) for c in symbols.values()) + 1)
        for b, c in symbols.items():
            decoder[ord(c)] = b
        self._byte_of_code_point = tf.constant(decoder, tf.int32)
        self._bytes = tf.constant([bytes([b]) for b in range(256)])

    # -- tokenize --------------------------------------------------------------

    def pieces(self, strings):
        """`(batch,)` strings to their pre-tokenized pieces, `(batch, None)`."""
        strings = tf.convert_to_tensor(strings, tf.string)
        for plain, escaped in ESCAPES:
            strings = tf.strings.regex_replace(strings, _escape_re2(plain), escaped)
        if self._special_pattern:
            strings = tf.strings.regex_replace(
                strings, f"({self._special_pattern})", SEP + r"\1" + SEP
            )
        if self.normalizer == "nfc":
            # After the cut: NUL (and the escapes) compose with nothing, so
            # each text between special tokens is normalized alone, as
            # Hugging Face normalizes what its added tokens leave.
            strings = self._nfc(strings)
        if self.add_prefix_space:
            # As Hugging Face's ByteLevel, on each text between special
            # tokens that does not start with a space.
            after = f"(?:{self._special_pattern}){SEP}" if self._special_pattern else ""
            strings = tf.strings.regex_replace(
                strings, f"(^|{after or '^'})([^ {SEP}])", r"\1 \2"
            )
        strings = tf.strings.regex_replace(
            strings, self._split_last_space, r"\1" + SEP + r"\2\3"
        )
        strings = tf.strings.regex_replace(strings, self._piece_pattern, SEP + r"\1")
        return split_at_marks(strings)

    def tokenize(self, strings):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor."""
        pieces = self.pieces(strings)
        words = pieces.flat_values
        is_special = is_one_of(words, self.special_tokens)
        # Each piece's bytes as GPT-2's characters; a special token stays whole.
        raw = tf.strings.bytes_split(words)
        codes = tf.io.decode_raw(raw.flat_values, tf.uint8, fixed_length=1)
        characters = tf.gather(
            self._byte_symbols, tf.reshape(tf.cast(codes, tf.int32), [-1])
        )
        whole = words
        if self.ignore_merges:
            # A piece that is a token is taken whole (so is a special one).
            mapped = tf.strings.reduce_join(
                tf.RaggedTensor.from_row_splits(
                    characters, raw.row_splits, validate=False
                ),
                axis=1,
            )
            in_vocabulary = self._token_to_id.lookup(mapped) >= 0
            whole = tf.where(is_special, words, mapped)
            is_special = tf.logical_or(is_special, in_vocabulary)
        symbols = whole_or_split(raw.with_flat_values(characters), whole, is_special)
        values, splits = merge_symbols(
            symbols.flat_values, symbols.row_splits, self._merge_rank
        )
        ids = self._token_to_id.lookup(values) + self.id_offset
        per_piece = tf.RaggedTensor.from_row_splits(ids, splits, validate=False)
        nested = tf.RaggedTensor.from_row_splits(
            per_piece, pieces.row_splits, validate=False
        )
        ids = nested.merge_dims(1, 2)
        if self.add_start_token:
            start = tf.fill([ids.nrows(), 1], tf.constant(self.start_id, tf.int32))
            ids = tf.concat([tf.RaggedTensor.from_tensor(start), ids], axis=1)
        return ids

    # -- detokenize ------------------------------------------------------------

    def detokenize(self, ids):
        """Ids (Ragged or dense) back to strings (bytes; a token cut inside
        a UTF-8 character stays cut). Padding and ids outside the
        vocabulary are dropped; special tokens are written as text, as
        Hugging Face's `decode` does, but for the start token that
        `add_start_token` puts first (it is no part of the text)."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        ids = tf.cast(ids, tf.int32)
        keep = tf.logical_and(
            ids >= self.id_offset, ids < len(self.vocabulary) + self.id_offset
        )
        if self.add_start_token:
            first = tf.equal(
                tf.ragged.range(ids.row_lengths(), dtype=ids.row_splits.dtype), 0
            )
            keep = tf.logical_and(
                keep, tf.logical_not(tf.logical_and(first, ids == self.start_id))
            )
        ids = tf.ragged.boolean_mask(ids, keep) - self.id_offset
        text = tf.strings.reduce_join(tf.gather(self._id_to_token, ids), axis=-1)
        characters = tf.strings.unicode_split(text, "UTF-8", errors="replace")
        points = tf.strings.unicode_decode(text, "UTF-8", errors="replace")
        table_size = tf.shape(self._byte_of_code_point)[0]
        byte = tf.gather(
            self._byte_of_code_point,
            tf.minimum(points.flat_values, table_size - 1),
        )
        byte = tf.where(points.flat_values < table_size, byte, -1)
        # One of GPT-2's 256 characters is its byte; any other character
        # (in an added token) is itself.
        pieces = tf.where(
            byte >= 0,
            tf.gather(self._bytes, tf.maximum(byte, 0)),
            characters.flat_values,
        )
        return tf.strings.reduce_join(characters.with_flat_values(pieces), axis=-1)

    # -- files -----------------------------------------------------------------

    def save(self, path):
        atomic_write_text(
            path,
            json.dumps(
                {
                    "tokenizer": "bpe",
                    "start_token": self.start_token,
                    "end_token": self.end_token,
                    "special_tokens": self.special_tokens,
                    "id_offset": self.id_offset,
                    "add_prefix_space": self.add_prefix_space,
                    "pre_tokenizer": self.pre_tokenizer,
                    "ignore_merges": self.ignore_merges,
                    "add_start_token": self.add_start_token,
                    "normalizer": self.normalizer,
                    "vocabulary": self.vocabulary,
                    "merges": [f"{a} {b}" for a, b in self.merges],
                },
                ensure_ascii=False,
            )
            + "\n",
        )

    @classmethod
    def load(cls, path):
        spec = read_tokenizer_json(path, "bpe")
        try:
            return cls(
                spec["vocabulary"],
                [m.split(" ") for m in spec["merges"]],
                special_tokens=spec["special_tokens"],
                start_token=spec["start_token"],
                end_token=spec["end_token"],
                id_offset=spec["id_offset"],
                add_prefix_space=spec["add_prefix_space"],
                # Files written before Llama 3's tokenizer hold GPT-2's.
                pre_tokenizer=spec.get("pre_tokenizer", "gpt2"),
                ignore_merges=spec.get("ignore_merges", False),
                add_start_token=spec.get("add_start_token", False),
                normalizer=spec.get("normalizer"),
            )
        except KeyError as e:
            raise InputError(f"{path} lacks {e}.") from None
        except (TypeError, AttributeError, ValueError) as e:  # a value of a wrong kind
            raise InputError(f"{path}: {e}") from None
