"""Unicode normalization form C (NFC) in core TensorFlow ops, as Qwen2's
`tokenizer.json` applies it (Hugging Face's `NFC` normalizer) before its
byte-level BPE, so that the SavedModel normalizes in its graph too.

NFC is canonical decomposition, canonical ordering of combining marks, then
canonical composition (UAX #15). Most text is in NFC already: a string with
no character that NFC could change (a combining mark, a character that
composes with the one before it, one that NFC replaces) is passed through;
the others are decoded to code points and
1. decomposed by a table of each character's full canonical decomposition
   (Hangul syllables included);
2. ordered: a stable sort by (run of marks since the last starter, combining
   class), which moves marks only within their run;
3. composed in one `tf.while_loop` over the columns of all such strings at
   once: each character joins the last starter when the pair has a primary
   composite and no character between blocks it (the UAX #15 sample code).

The tables come from Python's `unicodedata` (its Unicode version is
`UNICODE_VERSION`: 14.0 on Python 3.11) less what Hugging Face's
`tokenizers` does not know: its Rust tables are an older Unicode's, without
the combining classes of the marks in `TOKENIZERS_LACKS` (which it reads as
starters) and Dives Akuru's composition. Tests probe `tokenizers` for both
lists, on Python 3.11; a Python of a later Unicode (3.12: 15.0) gets a
warning, since what that Unicode added is not in the lists. Characters a
later Unicode than Python's assigns are starters here.
Bytes that are not UTF-8 become U+FFFD (Hugging Face takes only valid
UTF-8; Python's `decode(errors="replace")` replaces as TensorFlow does).
"""

import functools
import unicodedata
import warnings

import tensorflow as tf

UNICODE_VERSION = unicodedata.unidata_version
# The Unicode of the Python that `TOKENIZERS_LACKS` was probed on.
CHECKED_UNICODE = "14.0.0"
# Hangul syllables (UAX #15's arithmetic).
S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
N_COUNT = V_COUNT * T_COUNT
CODE_POINTS = 0x110000
# Marks with a combining class in Unicode 14.0 that `tokenizers` (0.2x)
# reads as starters, as hexadecimal code points and inclusive ranges.
TOKENIZERS_LACKS = """
7FD 898-89F 8CA-8D3 9FE C3C D3B-D3C EBA 1715 1ABF-1ACE 1DF6-1DFA A82C
10D24-10D27 10EAB-10EAC 10F46-10F50 10F82-10F85 11070 1133B 1145E 11839-1183A
1193D-1193E 11943 119E0 11A34 11A47 11A99 11D42 11D44-11D45 11D97 16FF0-16FF1
1E130-1E136 1E2AE 1E2EC-1E2EF
"""
# Dives Akuru's U+11938, which `tokenizers` neither composes nor decomposes.
TOKENIZERS_LACKS_COMPOSITE = 0x11938


def lacked_marks():
    """The code points of `TOKENIZERS_LACKS`."""
    points = set()
    for item in TOKENIZERS_LACKS.split():
        first, _, last = item.partition("-")
        points.update(range(int(first, 16), int(last or first, 16) + 1))
    return points


@functools.cache
def tables():
    """(decompositions {code point: tuple of code points}, combining classes
    {code point: class > 0}, compositions {(first, second): composite},
    the code points NFC may change a string at), from `unicodedata`."""
    if UNICODE_VERSION != CHECKED_UNICODE:
        warnings.warn(
            f"This Python's unicodedata is Unicode {UNICODE_VERSION}; tfformer's "
            f"NFC tables are checked against tokenizers on Unicode "
            f"{CHECKED_UNICODE} (Python 3.11): marks and compositions added since "
            "may normalize otherwise than in tokenizers.",
            stacklevel=2,
        )
    decompositions, classes, compositions, changing = {}, {}, {}, set()
    lacked = lacked_marks()
    for cp in range(CODE_POINTS):
        if 0xD800 <= cp < 0xE000 or cp == TOKENIZERS_LACKS_COMPOSITE:
            continue
        c = chr(cp)
        nfd = unicodedata.normalize("NFD", c)
        if nfd != c:
            decompositions[cp] = tuple(map(ord, nfd))
        k = unicodedata.combining(c)
        if k and cp not in lacked:
            classes[cp] = k
            changing.add(cp)
        if unicodedata.normalize("NFC", c) != c:
            changing.add(cp)
        one = unicodedata.decomposition(c)
        if one and not one.startswith("<"):
            parts = [int(x, 16) for x in one.split()]
            if (
                len(parts) == 2
                and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == c
            ):
                compositions[tuple(parts)] = cp
    for s in range(L_COUNT * N_COUNT):
        syllable, l_part = S_BASE + s, L_BASE + s // N_COUNT
        v_part, t_part = V_BASE + (s % N_COUNT) // T_COUNT, T_BASE + s % T_COUNT
        if s % T_COUNT == 0:
            compositions[(l_part, v_part)] = syllable
        else:
            compositions[(syllable - s % T_COUNT, t_part)] = syllable
    # What composes with the character before it may change a string too.
    changing.update(second for _, second in compositions)
    return decompositions, classes, compositions, frozenset(changing)


def _character_class(code_points):
    """An RE2 character class of `code_points`, as ranges."""
    ranges, points = [], sorted(code_points)
    start = previous = points[0]
    for cp in [*points[1:], None]:
        if cp is not None and cp == previous + 1:
            previous = cp
            continue
        ranges.append(
            rf"\x{{{start:X}}}" + (rf"-\x{{{previous:X}}}" if previous > start else "")
        )
        if cp is not None:
            start = previous = cp
    return "[" + "".join(ranges) + "]"


def _table(keys, values, default):
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(keys, tf.int64), tf.constant(values, tf.int32)
        ),
        default_value=default,
    )


class UnicodeNFC(tf.Module):
    """Strings to their NFC, with core ops (see the module's docstring).

    >>> nfc = UnicodeNFC()
    >>> nfc(tf.constant(["e\\u0301", "A\\u030a"]))   # [b"\\xc3\\xa9", b"\\xc3\\x85"]
    """

    def __init__(self):
        super().__init__()
        decompositions, classes, compositions, changing = tables()
        self._may_change = f"(?s).*{_character_class(changing)}.*"
        flat, starts, lengths = [], [], []
        for _, parts in sorted(decompositions.items()):
            starts.append(len(flat))
            lengths.append(len(parts))
            flat.extend(parts)
        keys = sorted(decompositions)
        self._decomposition_start = _table(keys, starts, -1)
        self._decomposition_length = _table(keys, lengths, 1)
        self._decompositions = tf.constant(flat, tf.int32)
        self._class = _table(list(classes), list(classes.values()), 0)
        self._changing = _table(sorted(changing), [1] * len(changing), 0)
        self._composite = _table(
            [a * CODE_POINTS + b for a, b in compositions],
            list(compositions.values()),
            -1,
        )

    def __call__(self, strings):
        """`(batch,)` UTF-8 strings to their NFC."""
        strings = tf.convert_to_tensor(strings, tf.string)
        # Text: bad bytes become U+FFFD (RE2 matches no invalid UTF-8).
        strings = tf.strings.unicode_transcode(
            strings,
            "UTF-8",
            "UTF-8",
            errors="replace",
            replace_control_characters=False,
        )
        changes = tf.strings.regex_full_match(strings, self._may_change)
        rows = tf.where(changes)
        normalized = self._normalize(tf.gather_nd(strings, rows))
        return tf.tensor_scatter_nd_update(strings, rows, normalized)

    def _normalize(self, strings):
        """NFC of `strings`, cut into segments that normalize alone: a
        character NFC may not change (a starter that composes onto nothing
        before it) and the run of characters after it that NFC may change.
        Nothing composes or reorders across such a starter, so the loop of
        `_compose` runs over the longest segment, not the longest string."""
        points = tf.strings.unicode_decode(strings, "UTF-8")
        flat = points.flat_values
        changing = self._changing.lookup(tf.cast(flat, tf.int64)) > 0
        first = tf.equal(tf.ragged.range(points.row_lengths()).flat_values, 0)
        starts = tf.logical_or(tf.logical_not(changing), first)
        segment_of = tf.cumsum(tf.cast(starts, tf.int64)) - 1
        segments = tf.RaggedTensor.from_value_rowids(
            flat,
            segment_of,
            nrows=tf.reduce_sum(tf.cast(starts, tf.int64)),
            validate=False,
        )
        row_of_segment = tf.boolean_mask(points.value_rowids(), starts)
        segments = self._decompose(segments)
        segments, classes = self._order(segments)
        return tf.strings.unsorted_segment_join(
            self._compose(segments, classes),
            row_of_segment,
            num_segments=tf.shape(strings, out_type=tf.int64)[0],
        )

    def _decompose(self, points):
        """Each code point replaced by its full canonical decomposition."""
        flat = tf.cast(points.flat_values, tf.int64)
        lengths = self._decomposition_length.lookup(flat)
        starts = self._decomposition_start.lookup(flat)
        source = tf.repeat(tf.range(tf.size(flat)), lengths)
        offsets = tf.cumsum(lengths, exclusive=True)
        k = tf.range(tf.reduce_sum(lengths)) - tf.gather(offsets, source)
        start = tf.gather(starts, source)
        part = tf.gather(self._decompositions, tf.maximum(start + k, 0))
        values = tf.where(start >= 0, part, tf.gather(points.flat_values, source))
        row_lengths = tf.math.segment_sum(lengths, points.value_rowids())
        row_lengths = tf.concat(
            [
                row_lengths,
                tf.zeros(
                    points.nrows(out_type=tf.int32) - tf.size(row_lengths), tf.int32
                ),
            ],
            0,
        )
        return tf.RaggedTensor.from_row_lengths(values, row_lengths, validate=False)

    def _order(self, points):
        """Canonical ordering: each run of marks (class > 0) sorted by class,
        stably, by one sort of the whole batch on (run, class)."""
        classes = self._class.lookup(tf.cast(points.flat_values, tf.int64))
        first = tf.equal(tf.ragged.range(points.row_lengths()).flat_values, 0)
        runs = tf.cumsum(tf.cast(tf.logical_or(classes == 0, first), tf.int64))
        order = tf.argsort(runs * 256 + tf.cast(classes, tf.int64), stable=True)
        return (
            points.with_flat_values(tf.gather(points.flat_values, order)),
            points.with_flat_values(tf.gather(classes, order)),
        )

    def _compose(self, points, classes):
        """Canonical composition of ordered decomposed strings (UAX #15)."""
        lengths = tf.cast(points.row_lengths(), tf.int32)
        out = points.to_tensor(default_value=0)
        cls = classes.to_tensor(default_value=0)
        batch, width = tf.shape(out)[0], tf.shape(out)[1]
        rows = tf.range(batch)
        keep = tf.sequence_mask(lengths, width)
        starter = tf.zeros([batch], tf.int32)
        starter_char = tf.cond(
            width > 0, lambda: out[:, 0], lambda: tf.zeros([batch], tf.int32)
        )
        # A string that starts with a mark has no starter to compose with.
        last_class = tf.cond(
            width > 0,
            lambda: tf.where(cls[:, 0] != 0, 256, 0),
            lambda: tf.zeros([batch], tf.int32),
        )

        def body(j, out, keep, starter, starter_char, last_class):
            active = j < lengths
            char, char_class = out[:, j], cls[:, j]
            key = tf.cast(starter_char, tf.int64) * CODE_POINTS + tf.cast(
                char, tf.int64
            )
            composite = self._composite.lookup(key)
            joins = (
                active
                & (composite >= 0)
                & ((last_class < char_class) | (last_class == 0))
            )
            at = tf.stack([rows, starter], axis=1)
            out = tf.tensor_scatter_nd_update(
                out, at, tf.where(joins, composite, tf.gather_nd(out, at))
            )
            column = tf.stack([rows, tf.fill([batch], j)], axis=1)
            keep = tf.tensor_scatter_nd_update(
                keep, column, tf.logical_and(tf.gather_nd(keep, column), ~joins)
            )
            stays = active & ~joins
            new_starter = stays & (char_class == 0)
            starter = tf.where(new_starter, j, starter)
            starter_char = tf.where(
                joins, composite, tf.where(new_starter, char, starter_char)
            )
            last_class = tf.where(stays, char_class, last_class)
            return j + 1, out, keep, starter, starter_char, last_class

        _, out, keep, *_ = tf.while_loop(
            lambda j, *_: j < width,
            body,
            (tf.constant(1), out, keep, starter, starter_char, last_class),
        )
        kept = tf.ragged.boolean_mask(out, keep)
        return tf.strings.unicode_encode(kept, "UTF-8")
