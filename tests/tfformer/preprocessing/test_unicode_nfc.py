"""`UnicodeNFC` (normalization form C in core TensorFlow ops) against
Hugging Face's `NFC` normalizer (what Qwen2's tokenizer.json applies) on
5,000 random strings thick with combining marks, precomposed and
decomposable characters, Hangul jamo and syllables; against Python's
`unicodedata` where the two Unicodes agree; and the lists of what
`tokenizers` does not know, probed from `tokenizers` itself."""

import random
import unicodedata

import pytest
import tensorflow as tf

from tfformer.preprocessing.unicode_nfc import (
    TOKENIZERS_LACKS_COMPOSITE,
    UnicodeNFC,
    lacked_marks,
    tables,
)

tokenizers = pytest.importorskip("tokenizers")

FIXED = [
    "",
    "plain ASCII",
    "e\u0301",  # composes
    "\u0301e",  # a mark first composes with nothing
    "A\u030a\u0323",  # reordered (below 220 before above 230), then composed
    "a\u0323\u0301\u0302",
    "\u1100\u1161\u11a8",  # Hangul L V T
    "\uac00\u11a8",  # LV syllable + T
    "<\u0338 =\u0338",  # not-less-than, not-equal
    "\u212b \u2126",  # singletons: Angstrom, Ohm
    "\u0344",  # excluded: decomposes and stays so
    "\x00\u0301 \ufdd0\u0301",  # NUL and noncharacters compose with nothing
    "q\u0307\u0323",  # no composite: only reordered
    "\u00c5\u0301",  # precomposed plus a mark
]


def random_texts(n, seed):
    decompositions, classes, compositions, _ = tables()
    marks = sorted(set(classes) | lacked_marks())
    seconds = sorted({b for _, b in compositions})
    composed = sorted(decompositions)
    assigned = [
        cp for cp in range(0x30000) if unicodedata.category(chr(cp)) not in ("Cn", "Cs")
    ]
    rng = random.Random(seed)

    def one():
        out = []
        for _ in range(rng.randint(0, 12)):
            r = rng.random()
            if r < 0.3:
                out.append(chr(rng.choice(marks)))
            elif r < 0.5:
                out.append(chr(rng.choice(composed)))
            elif r < 0.6:
                out.append(chr(rng.choice(seconds)))
            elif r < 0.7:
                out.append(chr(rng.randint(0x1100, 0x1112)))
            elif r < 0.8:
                out.append(chr(rng.randint(0xAC00, 0xD7A3)))
            elif r < 0.9:
                out.append(rng.choice("aeiouAEIOU <=>\x00"))
            else:
                out.append(chr(rng.choice(assigned)))
        return "".join(out)

    return [one() for _ in range(n)]


def normalized(texts):
    out = UnicodeNFC()(tf.constant([t.encode("utf-8") for t in texts]))
    return [t.decode("utf-8") for t in out.numpy()]


def test_the_normal_form_of_hugging_faces_nfc():
    hf = tokenizers.normalizers.NFC()
    texts = [*FIXED, *random_texts(5000, seed=0)]
    got = normalized(texts)
    mismatched = [
        (ascii(t), ascii(g))
        for t, g in zip(texts, got, strict=True)
        if g != hf.normalize_str(t)
    ]
    assert not mismatched, mismatched[:3]
    # Something happened: a fifth or more of the strings changed.
    assert sum(g != t for t, g in zip(texts, got, strict=True)) > len(texts) / 5
    assert got[2] == "\u00e9" and got[6] == "\uac01" and got[9] == "\u00c5 \u03a9"


def test_unicodedatas_nfc_where_tokenizers_knows_the_characters():
    lacked = lacked_marks() | {TOKENIZERS_LACKS_COMPOSITE}
    texts = [
        t for t in random_texts(2000, seed=1) if not any(ord(c) in lacked for c in t)
    ]
    got = normalized(texts)
    assert got == [unicodedata.normalize("NFC", t) for t in texts]


def test_what_tokenizers_does_not_know_is_listed():
    """Each mark with a combining class in Python's Unicode is ordered by
    `tokenizers` unless it is in TOKENIZERS_LACKS; Dives Akuru's pair is
    the one composition it lacks."""
    hf_nfd = tokenizers.normalizers.NFD()
    _, classes, compositions, _ = tables()
    unordered = set()
    for mark in set(classes) | lacked_marks():
        k = unicodedata.combining(chr(mark))
        # A mark of a lower class than U+0345's (240) goes before it.
        text = f"b\u0345{chr(mark)}" if k < 240 else f"b{chr(mark)}\u0316"
        if hf_nfd.normalize_str(text) != unicodedata.normalize("NFD", text):
            unordered.add(mark)
    assert unordered == lacked_marks()
    hf = tokenizers.normalizers.NFC()
    pair = chr(0x11935) + chr(0x11930)
    assert unicodedata.normalize("NFC", pair) == chr(TOKENIZERS_LACKS_COMPOSITE)
    assert hf.normalize_str(pair) == pair
    assert (0x11935, 0x11930) not in compositions
    missed = [
        pair
        for pair, composite in compositions.items()
        if hf.normalize_str(chr(pair[0]) + chr(pair[1])) != chr(composite)
    ]
    assert not missed


def test_bytes_that_are_not_utf8_become_replacement_characters():
    """As Python's `decode(errors="replace")` reads them, one U+FFFD per
    maximal bad subsequence, whether the text needs normalizing or not."""
    raw = [b"e\xcc\x81\xff", b"ok\xff\xe2\x82", b"\xf0\x9f\x98\xc3\xa9"]
    out = UnicodeNFC()(tf.constant(raw)).numpy()
    want = [unicodedata.normalize("NFC", b.decode("utf-8", "replace")) for b in raw]
    assert [o.decode("utf-8") for o in out] == want
    assert want[0] == "\u00e9\ufffd"
