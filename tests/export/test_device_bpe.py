"""The plain-Python byte-level BPE of `export/runtimes/tokenizer.py` (what a
converted GPT-2's TFLite export ships as `tokenizer.py`) against Hugging
Face's `tokenizers`, on the fixed cases and random strings of
tests/tfformer/preprocessing/test_bpe_tokenizer.py: the same ids, text back unchanged,
`add_prefix_space`, special tokens, and detokenize's stopping rules."""

import json

import pytest

from tests.testing import END_OF_TEXT as END
from tests.testing import train_byte_level_bpe
from tests.tfformer.preprocessing.test_bpe_tokenizer import (
    CASES,
    ours_from,
    random_texts,
)
from tfformer.export.runtimes.tokenizer import (
    DeviceTokenizer,
    gpt2_pieces,
    llama3_pieces,
)

pytest.importorskip("tokenizers")


def device_from(hf, path, add_prefix_space=False):
    """A `DeviceTokenizer` over `ByteLevelBPETokenizer`'s file of `hf`
    (ids shifted by one, as a converted GPT-2's are)."""
    return device_of(ours_from(hf, add_prefix_space=add_prefix_space), path)


def device_of(ours, path, kind="bpe"):
    """A `DeviceTokenizer` over the file of the run tokenizer `ours` (a
    `ByteLevelBPETokenizer`, or the tokenizer of another `kind` of
    `text.json`), written into `path` with its `text.json`."""
    ours.save(str(path / "text_tokenizer.json"))
    settings = {
        "tokenizer": kind,
        "tokenizer_file": "text_tokenizer.json",
        "special_ids": {"pad": 0, "start": ours.start_id, "end": ours.end_id},
        "source_length": 8,
    }
    (path / "text.json").write_text(json.dumps(settings))
    return DeviceTokenizer(str(path))


@pytest.fixture(scope="module")
def hf():
    return train_byte_level_bpe()


def test_the_same_ids_as_hugging_faces_tokenizers(hf, tmp_path):
    device = device_from(hf, tmp_path)
    texts = CASES + random_texts(1000) + ["=" * 3000, " " * 500 + "x", "aaaa" * 300]
    want = [[i + 1 for i in hf.encode(t).ids] for t in texts]
    got = [device.ids(t) for t in texts]
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]
    # Merges happened, and the special token is one id.
    assert sum(map(len, want)) < 0.85 * sum(len(t.encode()) for t in texts)
    assert device.ids(f"a{END}b")[1] == device.end == hf.token_to_id(END) + 1
    # tokenize: cut or padded to source_length.
    assert device.tokenize("Hello") == device.ids("Hello") + [0] * (
        8 - len(device.ids("Hello"))
    )
    assert len(device.tokenize("the cat " * 20)) == 8


def test_text_comes_back_and_detokenize_stops_at_the_end_id(hf, tmp_path):
    device = device_from(hf, tmp_path)
    texts = [t for t in CASES + random_texts(300, seed=1) if END not in t]
    assert [device.detokenize(device.ids(t)) for t in texts] == texts
    ids = [*device.ids("ab"), device.end, *device.ids("cd")]
    assert device.detokenize(ids) == "ab"
    assert device.detokenize([device.end, *device.ids("cd")]) == ""
    # Padding and ids outside the vocabulary are dropped.
    assert device.detokenize([0, *device.ids("Hello world"), 10**6]) == "Hello world"
    # A token cut inside a UTF-8 character decodes to U+FFFD.
    emoji = device.ids("🙂")  # not in the BPE's training text: four bytes
    assert len(emoji) > 1 and device.detokenize(emoji[:1]) == "\ufffd"


def test_add_prefix_space_as_hugging_faces(tmp_path):
    hf = train_byte_level_bpe(add_prefix_space=True)
    device = device_from(hf, tmp_path, add_prefix_space=True)
    texts = ["Hello", " Hello", "\nHello", "", END, f"{END}x", *random_texts(200, 2)]
    assert [device.ids(t) for t in texts] == [
        [i + 1 for i in hf.encode(t).ids] for t in texts
    ]


def test_gpt2_pieces_by_hand():
    """GPT-2's pattern on cases worked out from the regex by hand."""
    assert gpt2_pieces("I'm  don't") == ["I", "'m", " ", " don", "'t"]
    assert gpt2_pieces("a \n\n b") == ["a", " \n\n", " b"]
    assert gpt2_pieces("x 's 2024!!") == ["x", " '", "s", " 2024", "!!"]
    assert gpt2_pieces("\tab\u3000cd  ") == ["\t", "ab", "\u3000", "cd", "  "]


def test_a_converted_llama3_tokenizer_gives_hugging_faces_ids(tmp_path):
    """A converted Llama 3 run's tokenizer file (Llama 3's pattern,
    ignore_merges, <|begin_of_text|> first): the device tokenizer's ids are
    Hugging Face's on the fixed cases and 1,000 random strings, and its text
    comes back unchanged."""
    from tokenizers import Regex, pre_tokenizers

    from tests.tfformer.preprocessing.test_bpe_tokenizer import (
        LLAMA3_CASES,
        LLAMA3_REGEX,
    )
    from tests.training.convert.huggingface.test_llama import converted_llama3_text
    from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer

    hf, _, run, _ = converted_llama3_text(tmp_path)
    ours = ByteLevelBPETokenizer.load(f"{run}/text_tokenizer.json")
    (tmp_path / "device").mkdir()
    device = device_of(ours, tmp_path / "device")
    long_s = "\u017f"  # an "s" under Unicode case folding
    folded = ["'S x", f"'{long_s} x", f"we'{long_s}", "'Ll'VE", f"'{long_s}t"]
    texts = [*CASES, *LLAMA3_CASES, *folded, *random_texts(1000, seed=7)]
    want = [[i + 1 for i in hf.encode(t).ids] for t in texts]
    got = [device.ids(t) for t in texts]
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]
    assert all(row[0] == device.start for row in got)  # the template's start
    texts = [t for t in texts if END not in t]
    assert [device.detokenize(device.ids(t)) for t in texts] == texts
    # With text.json's end_ids, detokenize stops at the first of any.
    settings = json.loads((tmp_path / "device" / "text.json").read_text())
    other = device.ids("cat")[-1]
    (tmp_path / "device" / "text.json").write_text(
        json.dumps({**settings, "end_ids": [device.end, other]})
    )
    ends = DeviceTokenizer(str(tmp_path / "device"))
    assert ends.detokenize([*ends.ids("the"), other, *ends.ids("dog")]) == "the"
    # Without them, that id is text.
    assert device.detokenize([*device.ids("the"), other]) == "the" + (
        device.detokenize([other])
    )
    # The pieces themselves are Hugging Face's Split's (ids can agree on
    # other pieces when no merge joins across them).
    split = pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated")
    want = [[p for p, _ in split.pre_tokenize_str(t)] for t in texts]
    assert [llama3_pieces(t) for t in texts] == want


def test_a_qwen2_tokenizer_gives_hugging_faces_ids(tmp_path):
    """A Qwen2-style tokenizer file (one digit a piece, NFC first): the
    device tokenizer's ids are Hugging Face's on its fixed cases and 1,000
    random strings of marks and composable characters (but those holding
    what `tokenizers`' older Unicode does not know), its text comes back in
    NFC."""
    import random
    import unicodedata

    from tests.tfformer.preprocessing.test_bpe_tokenizer import (
        LLAMA3_CASES,
        QWEN2_CASES,
        QWEN2_POOL,
        qwen2_style_hf,
    )
    from tfformer.preprocessing.unicode_nfc import lacked_marks

    hf = qwen2_style_hf()
    ours = ours_from(hf, pre_tokenizer="qwen2", normalizer="nfc")
    device = device_of(ours, tmp_path)
    rng = random.Random(3)
    texts = [
        *CASES,
        *LLAMA3_CASES,
        *QWEN2_CASES,
        *(
            "".join(rng.choice(QWEN2_POOL) for _ in range(rng.randint(0, 25)))
            for _ in range(1000)
        ),
    ]
    lacked = lacked_marks() | {0x11930, 0x11935}  # and Dives Akuru's pair
    texts = [t for t in texts if not any(ord(c) in lacked for c in t)]
    want = [[i + 1 for i in hf.encode(t).ids] for t in texts]
    got = [device.ids(t) for t in texts]
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]
    assert device.ids("2024") == [hf.token_to_id(c) + 1 for c in "2024"]
    texts = [t for t in texts if END not in t]
    back = [device.detokenize(device.ids(t)) for t in texts]
    assert back == [unicodedata.normalize("NFC", t) for t in texts]


def test_llama3_pieces_by_hand():
    """Llama 3's pattern on cases worked out from the regex by hand: line
    breaks end a whitespace run, numbers go by three with no space before
    them, one space or punctuation mark leads letters."""
    assert llama3_pieces("a\n\n  2024") == ["a", "\n\n", " ", " ", "202", "4"]
    assert llama3_pieces("I'LL x!!\n\ny") == ["I", "'LL", " x", "!!\n\n", "y"]
    assert llama3_pieces(" \tab") == [" ", "\tab"]
    assert llama3_pieces("(ab  ") == ["(ab", "  "]


def test_other_pre_tokenizers_are_refused_naming_the_setting(tmp_path):
    """A tokenizer file of a pre-tokenizer the device tokenizer does not
    reproduce is refused by name, not cut GPT-2's way."""
    path = tmp_path / "text_tokenizer.json"
    ours_from(train_byte_level_bpe()).save(str(path))
    spec = json.loads(path.read_text())
    path.write_text(json.dumps({**spec, "pre_tokenizer": "deepseek"}))
    settings = {
        "tokenizer": "bpe",
        "tokenizer_file": "text_tokenizer.json",
        "special_ids": {"pad": 0, "start": 1, "end": 1},
        "source_length": 8,
    }
    (tmp_path / "text.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match="pre_tokenizer='deepseek'"):
        DeviceTokenizer(str(tmp_path))
