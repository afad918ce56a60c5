"""WordPiece tokenize and detokenize with core TensorFlow ops only.

Training tokenizes with tensorflow-text's `FastWordpieceTokenizer`. Its ops
are custom ops: a SavedModel that contains them loads only where
tensorflow-text is imported, which stock TF Serving, `saved_model_cli` and
most serving stacks do not do. `CoreWordPiece` gives the same ids with ops
every TensorFlow binary has (string ops, a hash table, a while loop):

1. Invalid UTF-8 becomes U+FFFD; then, as training's tokenizer is set up:
   BERT's cleanup (`bert_cleanup`, RE2 rewrites), accent stripping (a
   table of every code point that canonical decomposition without the
   combining marks of `ACCENT_MARKS` changes, made at export time by
   `accent_table`; one code point at a time, so kept marks are not
   reordered) and
   lower-casing (`tf.strings.lower`).
2. Every code point gets a class: part of a word, whitespace (splits
   words), punctuation (a word of its own; CJK ideographs too) or dropped
   (control characters).
   The class table is not written by hand: `probe_character_classes` asks
   `FastWordpieceTokenizer` itself about every code point at export time,
   so both sides split text the same way.
3. Each word is cut greedily into the longest vocabulary pieces ("##" marks a
   piece that continues a word); a word with no such cut, or longer than
   `max_bytes_per_word`, is one `[UNK]`.

Detokenize joins "##" pieces to their word, words with spaces, and then
applies `JOIN_RULES`, the punctuation rewrites training's detokenizer uses
(one definition, in `tfformer.preprocessing.text`).
"""

import functools

import numpy as np
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.preprocessing.text import (
    RESERVED_TOKENS,
    SUFFIX,
    accent_mark_ranges,
    bert_cleanup,
    join_punctuation,
    lower,
    special_token_ids,
)
from tfformer.runs.files import read_lines

# Code-point classes.
WORD, SPACE, PUNCT, DROPPED = 0, 1, 2, 3
MAX_CODE_POINT = 0x10FFFF
# Every vocabulary Asset made in this process (see CoreWordPiece.__init__).
_LIVE_ASSETS = []


def probe_character_classes(max_code_point=MAX_CODE_POINT):
    """Code-point classes as ranges: `(starts, classes)`, int32 arrays.

    Range i covers code points starts[i] .. starts[i+1]-1. Each code point c
    is classed by how `FastWordpieceTokenizer` tokenizes "a" + c + "a" with the
    vocabulary {a, ##a}: [a, ##a] means c was dropped, [a, a] whitespace,
    three tokens punctuation, anything else a word character.
    """
    import tensorflow_text as tf_text

    vocabulary = [*RESERVED_TOKENS, "a", "##a"]
    tokenizer = tf_text.FastWordpieceTokenizer(
        vocab=vocabulary, token_out_type=tf.int32, unknown_token="[UNK]"
    )
    points = np.arange(max_code_point + 1)
    points = points[(points < 0xD800) | (points > 0xDFFF)]  # no surrogates
    a = ord("a")
    triples = np.stack([np.full_like(points, a), points, np.full_like(points, a)], 1)
    strings = tf.strings.unicode_encode(tf.constant(triples, tf.int32), "UTF-8")
    ids = tokenizer.tokenize(strings)
    lengths = ids.row_lengths().numpy()
    padded = ids.to_tensor(default_value=-1, shape=[None, 3]).numpy()
    a_id, suffix_a_id = 4, 5
    classes = np.full(len(points), WORD, np.int32)
    two = lengths == 2
    classes[two & (padded[:, 1] == suffix_a_id)] = DROPPED
    classes[two & (padded[:, 1] == a_id)] = SPACE
    classes[lengths == 3] = PUNCT
    classes[points == a] = WORD
    # Surrogates cannot occur in decoded text; class them as words.
    full = np.full(max_code_point + 1, WORD, np.int32)
    full[points] = classes
    change = np.flatnonzero(np.diff(full)) + 1
    starts = np.concatenate([[0], change]).astype(np.int32)
    return starts, full[starts]


@functools.lru_cache(maxsize=2)
def accent_table(max_code_point=MAX_CODE_POINT):
    """(code points, replacements): every code point that accent stripping
    changes (canonical decomposition, NFD, then the combining marks of
    `ACCENT_MARKS` removed, as Hugging Face's `BertNormalizer` does) and its
    UTF-8 replacement, possibly empty. NFD from Python's `unicodedata`, at
    export time."""
    import unicodedata

    marks = frozenset(
        point for a, b in accent_mark_ranges() for point in range(a, b + 1)
    )
    keys, values = [], []
    for point in range(max_code_point + 1):
        if 0xD800 <= point <= 0xDFFF:
            continue
        char = chr(point)
        stripped = "".join(
            c for c in unicodedata.normalize("NFD", char) if ord(c) not in marks
        )
        if stripped != char:
            keys.append(point)
            values.append(stripped.encode("utf-8"))
    return np.array(keys, np.int32), np.array(values, object)


class CoreWordPiece(tf.Module):
    """Strings to WordPiece ids and back, with core TensorFlow ops only.

    Args:
        vocabulary_file: one token per line, the reserved tokens first (the
            file training writes). It becomes a SavedModel asset.
        lower_case: lower-case text first (as the training tokenizer did).
        special_tokens, normalizer, strip_accents: as training's
            `WordPieceTokenizer` (a converted checkpoint's vocabulary).
        character_classes: `(starts, classes)` from
            `probe_character_classes` (computed when omitted).
        max_bytes_per_word: longer words become `[UNK]` (FastWordpiece's
            default, 100).

    Example:
    >>> wordpiece = CoreWordPiece("run/target_vocab.txt")
    >>> ids = wordpiece.tokenize(tf.constant(["a dog."]))   # RaggedTensor
    >>> wordpiece.detokenize(ids.to_tensor())               # [b"a dog."]
    """

    def __init__(
        self,
        vocabulary_file,
        *,
        lower_case=False,
        special_tokens=None,
        normalizer=None,
        strip_accents=False,
        character_classes=None,
        max_bytes_per_word=100,
        name=None,
    ):
        super().__init__(name=name)
        vocabulary = read_lines(vocabulary_file)
        if vocabulary and vocabulary[-1] == "":
            vocabulary.pop()
        try:
            ids = special_token_ids(vocabulary, special_tokens)
        except ValueError as e:
            raise InputError(f"{vocabulary_file}: {e}") from None
        if normalizer not in (None, "bert"):
            raise InputError(
                f"normalizer must be None or 'bert'. Received: {normalizer!r}"
            )
        self.unk_id = ids["unk"]
        # Dropped by detokenize (a learned vocabulary's: the reserved ids).
        self.special_ids = sorted(set(ids.values()))
        self.normalizer = normalizer
        self.strip_accents = bool(strip_accents)
        if self.strip_accents:
            keys, values = accent_table()
            self.accents = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(keys, tf.int32), tf.constant(values, tf.string)
                ),
                default_value="\x00",
            )
        self.vocabulary_size = len(vocabulary)
        self.lower_case = bool(lower_case)
        self.max_bytes_per_word = int(max_bytes_per_word)
        # Longest piece in characters: candidates longer than it cannot match.
        self.max_piece_chars = max(
            len(t[len(SUFFIX) :] if t.startswith(SUFFIX) else t) for t in vocabulary
        )
        self.vocabulary_asset = tf.saved_model.Asset(vocabulary_file)
        # TextFileInitializer names the table after the Asset's repr, its
        # memory address, and a named table lives on in the process after
        # its Python objects: a new tokenizer whose Asset landed where a
        # freed one lived read the old vocabulary. Kept alive, no Asset's
        # address is reused. (Anonymous tables would avoid the names, but
        # TF1-style loaders, saved_model_cli and TF Serving, do not
        # initialize them.)
        _LIVE_ASSETS.append(self.vocabulary_asset)
        self.token_to_id = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocabulary_asset,
                tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE,
                tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER,
            ),
            default_value=-1,
        )
        self.id_to_token = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocabulary_asset,
                tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER,
                tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE,
            ),
            default_value="",
        )
        starts, classes = (
            character_classes
            if character_classes is not None
            else probe_character_classes()
        )
        self._class_starts = tf.constant(np.asarray(starts, np.int32))
        self._classes = tf.constant(np.asarray(classes, np.int32))

    # -- tokenize ----------------------------------------------------------

    def _words(self, strings):
        """(words `(N,)` strings, their lengths in characters, words per string)."""
        strings = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        if self.normalizer == "bert":
            strings = bert_cleanup(strings)
        if self.strip_accents:
            strings = self._strip_accents(strings)
        if self.lower_case:
            strings = lower(strings)
        chars = tf.strings.unicode_decode(strings, "UTF-8", errors="replace")
        flat = chars.flat_values
        index = tf.searchsorted(self._class_starts, flat, side="right") - 1
        classes = chars.with_flat_values(tf.gather(self._classes, index))
        keep = tf.not_equal(classes, DROPPED)
        chars = tf.ragged.boolean_mask(chars, keep)
        classes = tf.ragged.boolean_mask(classes, keep)
        flat_classes = classes.flat_values
        # The class before each character, SPACE at the start of a string.
        first = tf.RaggedTensor.from_tensor(
            tf.fill(tf.stack([classes.nrows(), 1]), SPACE)
        )
        previous = tf.concat([first, classes], axis=1)[:, :-1].flat_values
        in_word = tf.not_equal(flat_classes, SPACE)
        starts_word = tf.logical_and(
            in_word,
            tf.logical_or(tf.equal(flat_classes, PUNCT), tf.not_equal(previous, WORD)),
        )
        word_of_char = tf.cumsum(tf.cast(starts_word, tf.int64)) - 1
        words = tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(chars.flat_values, in_word),
            tf.boolean_mask(word_of_char, in_word),
            nrows=tf.reduce_sum(tf.cast(starts_word, tf.int64)),
        )
        words_per_string = tf.reduce_sum(
            classes.with_flat_values(tf.cast(starts_word, tf.int64)), axis=1
        )
        return (
            tf.strings.unicode_encode(words, "UTF-8"),
            tf.cast(words.row_lengths(), tf.int32),
            words_per_string,
        )

    def _strip_accents(self, strings):
        """Each code point in `accent_table` replaced by its entry."""
        chars = tf.strings.unicode_decode(strings, "UTF-8", errors="replace")
        flat = chars.flat_values
        replaced = self.accents.lookup(flat)
        own = tf.strings.unicode_encode(flat[:, None], "UTF-8")
        pieces = tf.where(tf.equal(replaced, "\x00"), own, replaced)
        return tf.strings.reduce_join(chars.with_flat_values(pieces), axis=1)

    def _word_pieces(self, words, lengths):
        """Greedy longest-match-first pieces of each word: `(N, None)` ids."""
        count = tf.shape(words)[0]
        width = self.max_piece_chars
        tries = tf.range(width, 0, -1)  # candidate lengths, longest first
        too_long = tf.strings.length(words) > self.max_bytes_per_word

        def cond(position, failed, pieces):
            return tf.reduce_any(tf.logical_and(position < lengths, ~failed))

        def body(position, failed, pieces):
            active = tf.logical_and(position < lengths, ~failed)
            starts = tf.broadcast_to(position[:, None], [count, width])
            sizes = tf.broadcast_to(tries[None, :], [count, width])
            candidates = tf.strings.substr(
                tf.broadcast_to(words[:, None], [count, width]),
                starts,
                sizes,
                unit="UTF8_CHAR",
            )
            candidates = tf.where(
                starts > 0, tf.strings.join([SUFFIX, candidates]), candidates
            )
            ids = self.token_to_id.lookup(candidates)
            fits = sizes <= (lengths - position)[:, None]
            found = tf.logical_and(ids >= 0, fits)
            best = tf.argmax(tf.cast(found, tf.int32), axis=1, output_type=tf.int32)
            any_found = tf.reduce_any(found, axis=1)
            chosen = tf.gather(ids, best, batch_dims=1)
            step = tf.gather(tries, best)
            failed = tf.logical_or(failed, tf.logical_and(active, ~any_found))
            emit = tf.logical_and(active, any_found)
            pieces = pieces.write(pieces.size(), tf.where(emit, chosen, -1))
            position = tf.where(emit, position + step, position)
            return position, failed, pieces

        _, failed, pieces = tf.while_loop(
            cond,
            body,
            (
                tf.zeros([count], tf.int32),
                too_long,
                # One row of -1 first: stacking an empty list of unknown
                # shape fails (no words at all).
                tf.TensorArray(
                    tf.int64, size=0, dynamic_size=True, element_shape=[None]
                ).write(0, tf.fill([count], tf.constant(-1, tf.int64))),
            ),
        )
        pieces = tf.transpose(tf.reshape(pieces.stack(), [-1, count]))  # (N, steps)
        pieces = tf.ragged.boolean_mask(pieces, pieces >= 0)
        return _replace_rows(pieces, failed, self.unk_id)

    def tokenize(self, strings):
        """`(batch,)` strings to a `(batch, None)` int32 RaggedTensor."""
        strings = tf.convert_to_tensor(strings, tf.string)
        words, lengths, per_string = self._words(strings)
        pieces = self._word_pieces(words, lengths)
        by_string = tf.RaggedTensor.from_row_lengths(pieces, per_string)
        return tf.cast(by_string.merge_dims(1, 2), tf.int32)

    # -- detokenize --------------------------------------------------------

    def detokenize(self, ids):
        """`(batch, length)` ids to `(batch,)` strings; reserved and
        out-of-range ids are dropped."""
        ids = tf.cast(ids, tf.int64)
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        special = tf.constant(self.special_ids, tf.int64)
        real = tf.logical_and(
            tf.reduce_all(ids.flat_values[:, None] != special[None, :], axis=1),
            ids.flat_values < self.vocabulary_size,
        )
        real = ids.with_flat_values(tf.logical_and(real, ids.flat_values >= 0))
        ids = tf.ragged.boolean_mask(ids, real)
        tokens = ids.with_flat_values(self.id_to_token.lookup(ids.flat_values))
        flat = tokens.flat_values
        # A "##" piece glues to the piece before it; a row's first piece has
        # none and keeps its "##" (as FastWordpiece's detokenizer does).
        first = tf.ragged.range(tokens.row_lengths()).flat_values == 0
        is_suffix = tf.logical_and(
            tf.strings.substr(flat, 0, len(SUFFIX)) == SUFFIX, tf.logical_not(first)
        )
        flat = tf.where(
            is_suffix,
            tf.strings.regex_replace(flat, "^" + SUFFIX, ""),
            tf.strings.join([" ", flat]),
        )
        text = tf.strings.reduce_join(tokens.with_flat_values(flat), axis=1)
        text = tf.strings.regex_replace(text, "^ ", "")  # before the first word
        return join_punctuation(text)


def _replace_rows(ragged, rows, value):
    """`ragged` with every row where `rows` is True replaced by `[value]`."""
    keep = tf.repeat(tf.logical_not(rows), ragged.row_lengths())
    row_ids = tf.concat(
        [tf.boolean_mask(ragged.value_rowids(), keep), tf.where(rows)[:, 0]], 0
    )
    values = tf.concat(
        [
            tf.boolean_mask(ragged.flat_values, keep),
            tf.fill(tf.shape(tf.where(rows))[:1], tf.cast(value, ragged.dtype)),
        ],
        0,
    )
    order = tf.argsort(row_ids, stable=True)
    return tf.RaggedTensor.from_value_rowids(
        tf.gather(values, order), tf.gather(row_ids, order), nrows=ragged.nrows()
    )
