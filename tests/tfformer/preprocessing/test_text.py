"""The shared text conventions: byte tokenizer and punctuation joining, on
hand-computed values (training and export both use these, so one test)."""

import pytest

tf = pytest.importorskip("tensorflow")

from tfformer.preprocessing.byte_tokenizer import ByteTokenizer  # noqa: E402
from tfformer.preprocessing.text import join_punctuation  # noqa: E402


def test_byte_tokenizer_of_empty_strings_only():
    # No bytes in the whole batch (an empty prompt) is an empty row, not an
    # error.
    assert ByteTokenizer().tokenize([""]).to_list() == [[]]
    assert ByteTokenizer().tokenize([b"", b""]).to_list() == [[], []]


def test_byte_ids_are_the_byte_values_plus_four():
    ids = ByteTokenizer().tokenize([b"AB", "ß".encode(), b"\xff", b""]).to_list()
    # "A" = 65, "B" = 66; "ß" is C3 9F in UTF-8; 0xff is not UTF-8 at all.
    assert ids == [[69, 70], [0xC3 + 4, 0x9F + 4], [259], []]


def test_detokenize_drops_reserved_and_out_of_range_ids():
    tokenizer = ByteTokenizer()
    ids = tf.constant([[2, 69, 70, 3, 0, 0], [69, 1, 260, 999, -5, 70]])
    assert tokenizer.detokenize(ids).numpy().tolist() == [b"AB", b"AB"]


def test_any_bytes_round_trip():
    data = [bytes(range(256)), b"", "straße".encode()]
    tokenizer = ByteTokenizer()
    assert tokenizer.detokenize(tokenizer.tokenize(data)).numpy().tolist() == data


def test_save_and_load(tmp_path):
    ByteTokenizer().save(str(tmp_path / "t.json"))
    assert ByteTokenizer.load(str(tmp_path / "t.json")).vocabulary_size == 260
    (tmp_path / "bad.json").write_text('{"tokenizer": "wordpiece"}')
    with pytest.raises(ValueError, match="not describe a byte tokenizer"):
        ByteTokenizer.load(str(tmp_path / "bad.json"))


def test_join_punctuation_undoes_the_detokenizers_spaces():
    """Hand-written cases: chains of hyphens and clitics are joined whole
    (one RE2 pass consumes the word character between two gaps and would
    leave "a-b - c"), a lone hyphen or quote stays spaced."""
    text = tf.constant(
        [
            "a dog . ( yes ) it ' s twenty - one !",
            "x , y",
            "a - b - c - d - e",
            "it ' s ' s",
            "- x - ' s",
        ]
    )
    assert join_punctuation(text).numpy().tolist() == [
        b"a dog. (yes) it's twenty-one!",
        b"x, y",
        b"a-b-c-d-e",
        b"it's's",
        b"- x - ' s",
    ]
