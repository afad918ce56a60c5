"""SentencePiece's BPE model (a `tokenizer.model`, as Llama 2 and Gemma ship
it) in core TensorFlow ops, so the same code tokenizes in a tf.data pipeline
and inside an exported SavedModel.

What `sentencepiece`'s encoder does with a BPE model, reproduced here:
1. Normalization: with `remove_extra_whitespaces`, spaces (U+0020 only: the
   `identity` normalizer maps nothing) are stripped at both ends and runs of
   them cut to one; with `add_dummy_prefix`, a space goes before any text
   that is not empty; every space becomes "▁" (U+2581).
2. User-defined pieces are matched first, longest first, and never merged.
3. The rest is cut into characters, and BPE merges adjacent symbols whose
   concatenation is a piece of the model: the highest-scoring first, the
   leftmost among equals. Here each pass merges, in every text, every
   occurrence of the highest score left to right (`merge_symbols`, the same
   result: the pieces a model learns later score lower and contain the
   earlier ones).
4. A symbol that is no piece becomes the pieces of its UTF-8 bytes
   (`<0x41>`: `byte_fallback`).

`tokenize(..., special=True)` also finds the model's control and unknown
pieces (`<s>`, `</s>`, `<bos>`, `<unk>`) written as text, as Hugging Face's
tokenizers split their added tokens out of a rendered chat template before
normalizing the text between them: each special token becomes its id, and
with `add_dummy_prefix` the text before the first one gets the dummy
prefix, and so does the text after each (`prefix_after_special`, as the
legacy Llama tokenizer's `Prepend` normalizer does) or not (`legacy: false`,
or a `Metaspace` pre-tokenizer that prepends to the first piece only); a
text that starts with a space gets one too unless `prefix_before_space` is
off (a `Metaspace` pre-tokenizer prepends to no text that starts with one).
`sentencepiece` itself never does this: it cuts `<s>` into characters.
Control pieces that hold "▁" (which text never holds once normalized) are
not looked for.

Decoding writes the pieces back (bytes for byte pieces, nothing for control
pieces, " ⁇ " for the unknown one, "▁" as a space) and drops the leading
space the dummy prefix added.

Refused by name, never tokenized differently: models other than BPE
(Unigram: T5, ALBERT), normalizers that map characters (a
`precompiled_charsmap`, as `nmt_nfkc`), `treat_whitespace_as_suffix`,
unescaped whitespace, models without byte fallback, pieces holding a space,
and unused pieces that a merge could form (which `sentencepiece` takes apart
again).
"""

import json
import struct

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.preprocessing.bpe_tokenizer import (
    ESCAPES,
    NO_MERGE,
    SEP,
    _escape_re2,
    is_one_of,
    merge_symbols,
    split_at_marks,
    whole_or_split,
)
from tfformer.preprocessing.text import read_tokenizer_json
from tfformer.runs.files import atomic_write_text

# sentencepiece_model.proto's piece types and model types.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
TYPE_NAMES = {
    NORMAL: "normal",
    UNKNOWN: "unknown",
    CONTROL: "control",
    USER_DEFINED: "user_defined",
    UNUSED: "unused",
    BYTE: "byte",
}
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
SPACE = "\u2581"
UNKNOWN_SURFACE = " \u2047 "
# The pieces BPE merges into and looks up (sentencepiece's `pieces_`).
MERGEABLE = (NORMAL, USER_DEFINED, UNUSED)


# -- tokenizer.model -------------------------------------------------------------


def _fields(data, where):
    """(field number, wire type, value) of a protobuf message's fields:
    ints for varints and fixed32/64, bytes for length-delimited ones."""
    i, end = 0, len(data)

    def varint():
        nonlocal i
        value, shift = 0, 0
        while True:
            if i >= end or shift > 63:
                raise InputError(f"{where} is damaged (a varint runs past its end).")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while i < end:
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if i + size > end:
                raise InputError(f"{where} is damaged (a field runs past its end).")
            value = int.from_bytes(data[i : i + size], "little")
            i += size
        elif wire == 2:
            size = varint()
            if i + size > end:
                raise InputError(f"{where} is damaged (a field runs past its end).")
            value = data[i : i + size]
            i += size
        else:
            raise InputError(f"{where} is damaged (wire type {wire}).")
        yield number, wire, value


def _signed(value):
    """A varint read as a two's-complement int64 (an int32 field's -1)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def read_model_proto(data, where="tokenizer.model"):
    """The parts of a `sentencepiece` ModelProto that tokenizing needs:
    `{"pieces": [(piece, score, type)], "trainer": {...}, "normalizer":
    {...}}`, with the proto's defaults where a field is absent. `where`
    names the file in errors."""
    pieces = []
    trainer = {
        "model_type": 1,
        "byte_fallback": False,
        "treat_whitespace_as_suffix": False,
        "unk_id": 0,
        "bos_id": 1,
        "eos_id": 2,
        "pad_id": -1,
    }
    normalizer = {
        "name": "",
        "precompiled_charsmap": b"",
        "add_dummy_prefix": True,
        "remove_extra_whitespaces": True,
        "escape_whitespaces": True,
    }
    trainer_fields = {
        3: "model_type",
        24: "treat_whitespace_as_suffix",
        35: "byte_fallback",
        40: "unk_id",
        41: "bos_id",
        42: "eos_id",
        43: "pad_id",
    }
    normalizer_fields = {
        1: "name",
        2: "precompiled_charsmap",
        3: "add_dummy_prefix",
        4: "remove_extra_whitespaces",
        5: "escape_whitespaces",
    }
    for number, wire, value in _fields(bytes(data), where):
        if number == 1 and wire == 2:
            piece, score, kind = None, 0.0, NORMAL
            for n, w, v in _fields(value, where):
                if n == 1 and w == 2:
                    try:
                        piece = v.decode("utf-8")
                    except UnicodeDecodeError:
                        raise InputError(
                            f"{where}: piece {len(pieces)} is not UTF-8."
                        ) from None
                elif n == 2 and w == 5:
                    score = struct.unpack("<f", v.to_bytes(4, "little"))[0]
                elif n == 3 and w == 0:
                    kind = v
            if piece is None:
                raise InputError(f"{where}: piece {len(pieces)} has no text.")
            pieces.append((piece, score, kind))
        elif number == 2 and wire == 2:
            for n, w, v in _fields(value, where):
                if n in trainer_fields and w == 0:
                    name = trainer_fields[n]
                    trainer[name] = (
                        bool(v) if isinstance(trainer[name], bool) else _signed(v)
                    )
        elif number == 3 and wire == 2:
            for n, w, v in _fields(value, where):
                if n in normalizer_fields:
                    name = normalizer_fields[n]
                    if name == "name" and w == 2:
                        normalizer[name] = v.decode("utf-8", "replace")
                    elif name == "precompiled_charsmap" and w == 2:
                        normalizer[name] = v
                    elif w == 0:
                        normalizer[name] = bool(v)
    if not pieces:
        raise InputError(f"{where} holds no pieces (not a sentencepiece model?).")
    return {"pieces": pieces, "trainer": trainer, "normalizer": normalizer}


def _varint(value):
    value &= (1 << 64) - 1  # an int32 field's -1 as ten bytes, as protobuf does
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number, value):
    """One protobuf field: an int as a varint, a float as fixed32, bytes or a
    str as length-delimited."""
    if isinstance(value, float):
        return _varint(number << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, (bool, int)):
        return _varint(number << 3) + _varint(int(value))
    if isinstance(value, str):
        value = value.encode("utf-8")
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def write_model_proto(pieces, *, add_dummy_prefix, remove_extra_whitespaces, ids):
    """A `sentencepiece` ModelProto (the bytes of a `tokenizer.model`) of a
    BPE model with byte fallback and the identity normalizer: `pieces` as
    `(piece, score, type)` in id order, and `ids` the `unk`, `bos`, `eos`
    and `pad` ids (-1 for none). `read_model_proto` reads back what it
    wrote."""
    out = [
        _field(1, _field(1, piece) + _field(2, float(score)) + _field(3, kind))
        for piece, score, kind in pieces
    ]
    trainer = _field(3, 2) + _field(4, len(pieces)) + _field(35, True)
    for offset, name in enumerate(("unk", "bos", "eos", "pad")):
        i = ids[name]
        trainer += _field(40 + offset, i)
        if i >= 0:  # sentencepiece finds these pieces by name
            trainer += _field(45 + offset, pieces[i][0])
    normalizer = (
        _field(1, "identity")
        + _field(3, bool(add_dummy_prefix))
        + _field(4, bool(remove_extra_whitespaces))
        + _field(5, True)
    )
    return b"".join(out) + _field(2, trainer) + _field(3, normalizer)


def read_model_file(path):
    """`read_model_proto` of the file at `path`."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path} cannot be read: {e.strerror}.") from None
    return read_model_proto(data, path)


def check_model(model, where="tokenizer.model"):
    """Raises InputError naming what tfformer does not reproduce in `model`
    (a `read_model_proto` dict)."""
    trainer, normalizer = model["trainer"], model["normalizer"]
    kind = MODEL_TYPES.get(trainer["model_type"], str(trainer["model_type"]))
    problems = []
    if kind != "bpe":
        problems.append(f"model_type {kind!r} (tfformer reads BPE models)")
    if normalizer["precompiled_charsmap"]:
        problems.append(
            f"normalizer {normalizer['name']!r} maps characters "
            "(precompiled_charsmap); tfformer reads the identity normalizer"
        )
    if trainer["treat_whitespace_as_suffix"]:
        problems.append("treat_whitespace_as_suffix")
    if not normalizer["escape_whitespaces"]:
        problems.append("escape_whitespaces=false")
    if not trainer["byte_fallback"]:
        problems.append("byte_fallback=false (unknown characters as <unk>)")
    spaced = [p for p, _, _ in model["pieces"] if " " in p]
    if spaced:
        problems.append(f"pieces holding a space: {spaced[:3]}")
    if problems:
        raise InputError(
            f"{where}: tfformer does not reproduce this SentencePiece model's "
            + "; ".join(problems)
            + "."
        )


class SentencePieceTokenizer(tf.Module):
    """A SentencePiece BPE model: strings to int32 ids and back, core ops only.

    Args:
        pieces: the model's `(piece, score, type)` triples in id order
            (`read_model_proto`); its ids are the model's ids.
        add_dummy_prefix, remove_extra_whitespaces: the normalizer's options.
        start_token, end_token: pieces generation starts with and stops at.
        add_start_token: every text's ids begin with `start_token`'s (what
            Llama 2's Hugging Face tokenizer does).
        unknown_token: the unknown piece (decoded as " ⁇ ").
        id_offset: the model's id of a piece is its id plus this (a
            converted decoder keeps id 0 for padding with 1).
        prefix_after_special: with `add_dummy_prefix`, whether
            `tokenize(..., special=True)` puts the dummy prefix before text
            that follows a special token too (see the module's docstring).
        prefix_before_space: whether that prefix goes before a text that
            starts with a space too (sentencepiece, `Prepend`: yes;
            `Metaspace`: no).

    Raises:
        ValueError: repeated pieces, a missing byte piece, start/end/unknown
            tokens that are not pieces, pieces holding a space, or an unused
            piece that a merge could form.
    """

    pad_id = 0

    def __init__(
        self,
        pieces,
        *,
        add_dummy_prefix,
        remove_extra_whitespaces,
        start_token,
        end_token,
        unknown_token="<unk>",
        add_start_token=False,
        id_offset=0,
        prefix_after_special=True,
        prefix_before_space=True,
    ):
        super().__init__()
        if (
            isinstance(id_offset, bool)
            or not isinstance(id_offset, int)
            or id_offset < 0
        ):
            raise InputError(f"id_offset must be an int >= 0. Received: {id_offset!r}")
        pieces = [(str(p), float(s), int(t)) for p, s, t in pieces]
        index = {}
        for i, (piece, _, kind) in enumerate(pieces):
            if piece in index:
                raise InputError(f"pieces repeat {piece!r} (ids {index[piece]}, {i}).")
            if kind not in TYPE_NAMES:
                raise InputError(f"piece {i} ({piece!r}) has an unknown type {kind}.")
            if " " in piece:
                raise InputError(f"piece {i} ({piece!r}) holds a space.")
            index[piece] = i
        for name, token in (
            ("start_token", start_token),
            ("end_token", end_token),
            ("unknown_token", unknown_token),
        ):
            if token not in index:
                raise InputError(f"{name}={token!r} is not a piece of the model.")
        byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
        missing = [p for p in byte_pieces if pieces[index.get(p, 0)][2] != BYTE]
        if missing:
            raise InputError(
                f"the model lacks byte pieces (no byte fallback?): {missing[:3]}"
            )
        mergeable = {p: i for p, i in index.items() if pieces[i][2] in MERGEABLE}
        # Every split of a piece into two pieces merges, ranked by the
        # piece's score (equal scores share a rank: the leftmost goes first).
        scores = sorted({s for _, s, t in pieces if t in MERGEABLE}, reverse=True)
        rank_of_score = {s: r for r, s in enumerate(scores)}
        merge_keys, merge_ranks = [], []
        for piece, i in mergeable.items():
            for cut in range(1, len(piece)):
                left, right = piece[:cut], piece[cut:]
                if left in mergeable and right in mergeable:
                    if pieces[i][2] == UNUSED:
                        raise InputError(
                            f"the unused piece {piece!r} (id {i}) would be made by "
                            f"merging {left!r} and {right!r}; sentencepiece takes "
                            "such pieces apart again, which tfformer does not."
                        )
                    merge_keys.append(f"{left} {right}")
                    merge_ranks.append(rank_of_score[pieces[i][1]])
        self.pieces = pieces
        self.add_dummy_prefix = bool(add_dummy_prefix)
        self.remove_extra_whitespaces = bool(remove_extra_whitespaces)
        self.start_token, self.end_token = start_token, end_token
        self.unknown_token = unknown_token
        self.add_start_token = bool(add_start_token)
        self.id_offset = id_offset
        self.prefix_after_special = bool(prefix_after_special)
        self.prefix_before_space = bool(prefix_before_space)
        self.start_id = index[start_token] + id_offset
        self.end_id = index[end_token] + id_offset
        self.unknown_id = index[unknown_token] + id_offset
        self.vocabulary_size = len(pieces) + id_offset
        self.vocabulary = [p for p, _, _ in pieces]
        user_defined = sorted(
            (p for p, _, t in pieces if t == USER_DEFINED), key=len, reverse=True
        )
        self._user_defined = user_defined
        self._user_pattern = "|".join(_escape_re2(p) for p in user_defined) or None
        special = sorted(
            (
                p
                for p, _, t in pieces
                if t in (CONTROL, UNKNOWN) and p and SPACE not in p
            ),
            key=len,
            reverse=True,
        )
        self._special = special
        self._special_pattern = "|".join(_escape_re2(p) for p in special) or None
        self._special_to_id = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(special or [SEP]),
                tf.constant([index[p] for p in special] or [-1], tf.int32),
            ),
            default_value=-1,
        )
        self._piece_to_id = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(mergeable)),
                tf.constant(list(mergeable.values()), tf.int32),
            ),
            default_value=-1,
        )
        self._merge_rank = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(merge_keys or [SEP]),
                tf.constant(merge_ranks or [NO_MERGE], tf.int32),
            ),
            default_value=NO_MERGE,
        )
        self._byte_ids = tf.constant([index[p] for p in byte_pieces], tf.int32)
        # What each id decodes to: bytes for byte pieces, nothing for control
        # pieces, the surface for the unknown one, spaces for "▁".
        surfaces = []
        for piece, _, kind in pieces:
            if kind == BYTE:
                surfaces.append(bytes([int(piece[3:5], 16)]))
            elif kind == CONTROL:
                surfaces.append(b"")
            elif kind == UNKNOWN:
                surfaces.append(UNKNOWN_SURFACE.encode("utf-8"))
            else:
                surfaces.append(piece.replace(SPACE, " ").encode("utf-8"))
        self._surfaces = tf.constant(surfaces)
        self._starts_with_space = tf.constant(
            [
                t not in (BYTE, CONTROL, UNKNOWN) and p.startswith(SPACE)
                for p, _, t in pieces
            ]
        )
        self._is_control = tf.constant([t == CONTROL for _, _, t in pieces])
        self._is_control_or_lone_space = tf.constant(
            [t == CONTROL or (p == SPACE and t in MERGEABLE) for p, _, t in pieces]
        )

    @classmethod
    def from_model(
        cls, model, *, where="tokenizer.model", add_start_token=False, id_offset=0
    ):
        """The tokenizer of a `read_model_proto` dict (checked with
        `check_model`), its start, end and unknown tokens the model's."""
        check_model(model, where)
        pieces, trainer = model["pieces"], model["trainer"]

        def piece(name):
            i = trainer[name]
            if not 0 <= i < len(pieces):
                raise InputError(f"{where}: {name}={i} is not a piece's id.")
            return pieces[i][0]

        return cls(
            pieces,
            add_dummy_prefix=model["normalizer"]["add_dummy_prefix"],
            remove_extra_whitespaces=model["normalizer"]["remove_extra_whitespaces"],
            start_token=piece("bos_id"),
            end_token=piece("eos_id"),
            unknown_token=piece("unk_id"),
            add_start_token=add_start_token,
            id_offset=id_offset,
        )

    # -- tokenize --------------------------------------------------------------

    def normalize(self, strings):
        """`(batch,)` strings as the model's normalizer writes them."""
        strings = tf.convert_to_tensor(strings, tf.string)
        if self.remove_extra_whitespaces:
            strings = tf.strings.regex_replace(strings, "^ +| +$", "")
            strings = tf.strings.regex_replace(strings, " +", " ")
        if self.add_dummy_prefix:
            strings = tf.strings.regex_replace(strings, "(?s)^(.)", r" \1")
        return tf.strings.regex_replace(strings, " ", SPACE)

    def _normalize_around_special(self, strings):
        """`normalize` of the text between the special tokens, each of
        which is cut out between `SEP` marks (the text's own escaped)."""
        if self.remove_extra_whitespaces:
            raise InputError(
                "special=True needs a model that keeps whitespace: where "
                "remove_extra_whitespaces strips it around special tokens is "
                "not reproduced."
            )
        strings = tf.convert_to_tensor(strings, tf.string)
        for plain, escaped in ESCAPES:
            strings = tf.strings.regex_replace(strings, _escape_re2(plain), escaped)
        pattern = self._special_pattern
        if pattern:
            strings = tf.strings.regex_replace(
                strings, f"({pattern})", SEP + r"\1" + SEP
            )
        if self.add_dummy_prefix:
            after = (
                f"|(?:{pattern}){SEP}" if pattern and self.prefix_after_special else ""
            )
            first = SEP if self.prefix_before_space else SEP + " "
            strings = tf.strings.regex_replace(
                strings, f"(?s)(^{after})([^{first}])", r"\1 \2"
            )
        return tf.strings.regex_replace(strings, " ", SPACE)

    def pieces_of(self, strings, special=False):
        """The normalized strings cut around their user-defined pieces (and,
        with `special`, their special tokens), `(batch, None)`: what BPE
        merges inside, never across."""
        if special:
            strings = self._normalize_around_special(strings)
        else:
            strings = self.normalize(strings)
            for plain, escaped in ESCAPES:
                strings = tf.strings.regex_replace(strings, _escape_re2(plain), escaped)
        if self._user_pattern:
            strings = tf.strings.regex_replace(
                strings, f"({self._user_pattern})", SEP + r"\1" + SEP
            )
        return split_at_marks(strings)

    def tokenize(self, strings, special=False):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor; with
        `special`, control and unknown pieces written in the text are
        theirs (a rendered chat template's `<bos>`; see the module's
        docstring)."""
        pieces = self.pieces_of(strings, special)
        words = pieces.flat_values
        whole = is_one_of(words, self._user_defined)
        if special:
            whole = tf.logical_or(whole, is_one_of(words, self._special))
        characters = tf.strings.unicode_split(words, "UTF-8", errors="replace")
        symbols = whole_or_split(characters, words, whole)
        values, splits = merge_symbols(
            symbols.flat_values, symbols.row_splits, self._merge_rank
        )
        ids = self._piece_to_id.lookup(values)
        if special:
            # (A merge makes mergeable pieces only: a special token's value
            # is the token itself.)
            ids = tf.where(ids >= 0, ids, self._special_to_id.lookup(values))
        # Byte fallback: a symbol that is no piece becomes its bytes' pieces.
        raw = tf.strings.bytes_split(values)
        codes = tf.io.decode_raw(raw.flat_values, tf.uint8, fixed_length=1)
        byte_ids = tf.gather(self._byte_ids, tf.reshape(tf.cast(codes, tf.int32), [-1]))
        per_symbol = whole_or_split(raw.with_flat_values(byte_ids), ids, ids >= 0)
        per_piece = tf.RaggedTensor.from_row_splits(per_symbol, splits, validate=False)
        nested = tf.RaggedTensor.from_row_splits(
            per_piece, pieces.row_splits, validate=False
        )
        ids = nested.merge_dims(1, 3) + self.id_offset
        if self.add_start_token:
            start = tf.fill([ids.nrows(), 1], tf.constant(self.start_id, tf.int32))
            ids = tf.concat([tf.RaggedTensor.from_tensor(start), ids], axis=1)
        return ids

    # -- detokenize ------------------------------------------------------------

    def detokenize(self, ids):
        """Ids (Ragged or dense) back to strings, as `sentencepiece` decodes
        them: ids below `id_offset` (padding, with an offset) or past the
        model are dropped; while nothing is written yet, a piece's leading
        space (the dummy prefix's) is dropped, once (with
        `remove_extra_whitespaces`, from each such piece); bytes that are no
        UTF-8 stay as they are."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        ids = tf.cast(ids, tf.int32)
        ids = (
            tf.ragged.boolean_mask(
                ids, tf.logical_and(ids >= self.id_offset, ids < self.vocabulary_size)
            )
            - self.id_offset
        )
        surfaces = tf.gather(self._surfaces, ids)
        if self.add_dummy_prefix or self.remove_extra_whitespaces:
            # The pieces before the first that writes something: control
            # pieces, and (when extra whitespace is removed) lone "▁"s, whose
            # one space is dropped.
            silent = tf.gather(
                self._is_control_or_lone_space
                if self.remove_extra_whitespaces
                else self._is_control,
                ids,
            )
            written = tf.cumsum(tf.cast(tf.logical_not(silent), tf.int32), axis=1)
            first = tf.logical_and(written == 1, tf.logical_not(silent))
            strip = tf.logical_and(first, tf.gather(self._starts_with_space, ids))
            values = tf.where(
                strip.flat_values,
                tf.strings.regex_replace(surfaces.flat_values, "^ ", ""),
                surfaces.flat_values,
            )
            values = tf.where((written == 0).flat_values, "", values)
            surfaces = surfaces.with_flat_values(values)
        return tf.strings.reduce_join(surfaces, axis=-1)

    def model_proto(self, padding_piece=None):
        """This tokenizer as a `sentencepiece` ModelProto in the model's ids
        (what a runtime that reads `tokenizer.model` files, as LiteRT-LM
        does, loads): with an `id_offset` of 1, `padding_piece` is id 0, a
        control piece (never made from text, decoded as nothing)."""
        pieces = self.pieces
        if self.id_offset:
            if self.id_offset != 1 or not isinstance(padding_piece, str):
                raise InputError(
                    "a ModelProto shifts ids by one padding piece: id_offset must "
                    f"be 0 or 1 and padding_piece a string. Received: id_offset="
                    f"{self.id_offset!r}, padding_piece={padding_piece!r}"
                )
            if padding_piece in self.vocabulary or " " in padding_piece:
                raise InputError(
                    "padding_piece must be a new piece without spaces. "
                    f"Received: {padding_piece!r}"
                )
            pieces = [(padding_piece, 0.0, CONTROL), *pieces]
        return write_model_proto(
            pieces,
            add_dummy_prefix=self.add_dummy_prefix,
            remove_extra_whitespaces=self.remove_extra_whitespaces,
            ids={
                "unk": self.unknown_id,
                "bos": self.start_id,
                "eos": self.end_id,
                "pad": 0 if self.id_offset else -1,
            },
        )

    # -- files -----------------------------------------------------------------

    def save(self, path):
        atomic_write_text(
            path,
            json.dumps(
                {
                    "tokenizer": "sentencepiece",
                    "start_token": self.start_token,
                    "end_token": self.end_token,
                    "unknown_token": self.unknown_token,
                    "add_dummy_prefix": self.add_dummy_prefix,
                    "remove_extra_whitespaces": self.remove_extra_whitespaces,
                    "add_start_token": self.add_start_token,
                    "id_offset": self.id_offset,
                    "prefix_after_special": self.prefix_after_special,
                    "prefix_before_space": self.prefix_before_space,
                    "pieces": [list(p) for p in self.pieces],
                },
                ensure_ascii=False,
            )
            + "\n",
        )

    @classmethod
    def load(cls, path):
        spec = read_tokenizer_json(path, "sentencepiece")
        try:
            return cls(
                spec["pieces"],
                add_dummy_prefix=spec["add_dummy_prefix"],
                remove_extra_whitespaces=spec["remove_extra_whitespaces"],
                start_token=spec["start_token"],
                end_token=spec["end_token"],
                unknown_token=spec["unknown_token"],
                add_start_token=spec["add_start_token"],
                id_offset=spec["id_offset"],
                # (Runs written before it: the legacy Llama tokenizer's.)
                prefix_after_special=spec.get("prefix_after_special", True),
                prefix_before_space=spec.get("prefix_before_space", True),
            )
        except KeyError as e:
            raise InputError(f"{path} lacks {e}.") from None
        except (TypeError, AttributeError, ValueError) as e:
            raise InputError(f"{path}: {e}") from None
