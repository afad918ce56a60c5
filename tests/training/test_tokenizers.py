import os

import numpy as np
import pytest

from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.training.text.wordpiece import RESERVED_TOKENS, WordPieceTokenizer

SENTENCES = [
    "a dog runs in the park .",
    "two dogs run in the park .",
    "a man rides a horse .",
    "the horses run .",
] * 5


def test_learned_vocabulary_has_reserved_ids_and_round_trips(tmp_path):
    tok = WordPieceTokenizer.learn(SENTENCES, vocabulary_size=60)
    assert tok.vocabulary[:4] == list(RESERVED_TOKENS)
    assert (tok.pad_id, tok.unk_id, tok.start_id, tok.end_id) == (0, 1, 2, 3)
    assert tok.vocabulary_size <= 60
    ids = tok.tokenize(["a dog runs in the park ."])
    assert ids.dtype.name == "int32"
    assert np.all(ids.flat_values.numpy() >= 4)
    assert tok.detokenize(ids).numpy().tolist() == [b"a dog runs in the park."]
    # Unknown characters map to [UNK] (id 1), never to a crash.
    assert 1 in tok.tokenize(["a \u4e2d dog"]).flat_values.numpy()
    path = str(tmp_path / "vocab.txt")
    tok.save(path)
    with open(path, encoding="utf-8") as f:
        assert f.read().split("\n")[:4] == list(RESERVED_TOKENS)
    again = WordPieceTokenizer.load(path)
    assert again.vocabulary == tok.vocabulary
    np.testing.assert_array_equal(
        again.tokenize(SENTENCES).flat_values.numpy(),
        tok.tokenize(SENTENCES).flat_values.numpy(),
    )
    # Reserved ids inside dense, padded ids are dropped on detokenize.
    padded = np.array([[2, *ids.flat_values.numpy(), 3, 0, 0]])
    assert tok.detokenize(padded).numpy().tolist() == [b"a dog runs in the park."]


def test_learning_twice_gives_the_same_vocabulary():
    """The learner is deterministic in its arguments: what lets the test
    session learn each vocabulary once (tests/conftest.py) and a resumed run
    learn the vocabulary it started with. Calls the learner itself, not the
    session's cache."""
    learn = getattr(WordPieceTokenizer.learn.__func__, "__wrapped__", None)
    learn = learn or WordPieceTokenizer.learn.__func__
    sentences = [f"{s} {i} {i * 7 % 13}" for i, s in enumerate(SENTENCES * 4)]
    first = learn(WordPieceTokenizer, sentences, 90, lower_case=True)
    second = learn(WordPieceTokenizer, list(sentences), 90, lower_case=True)
    assert first.vocabulary == second.vocabulary
    assert first.vocabulary_size > len(RESERVED_TOKENS)


def test_lower_case_folds_before_lookup():
    tok = WordPieceTokenizer.learn(SENTENCES, vocabulary_size=60, lower_case=True)
    np.testing.assert_array_equal(
        tok.tokenize(["A DOG"]).flat_values.numpy(),
        tok.tokenize(["a dog"]).flat_values.numpy(),
    )


def test_bad_vocabulary_files_and_arguments(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.txt: vocabulary must start with"):
        WordPieceTokenizer.load(str(bad))
    with pytest.raises(ValueError, match="not found"):
        WordPieceTokenizer.load(str(tmp_path / "none.txt"))
    with pytest.raises(ValueError, match="vocabulary_size must exceed 4"):
        WordPieceTokenizer.learn(SENTENCES, vocabulary_size=4)
    with pytest.raises(ValueError, match="sentences is empty"):
        WordPieceTokenizer.learn([], vocabulary_size=50)
    with pytest.raises(ValueError, match="duplicate"):
        WordPieceTokenizer([*RESERVED_TOKENS, "a", "a"])


def test_failed_save_leaves_previous_file(tmp_path, monkeypatch):
    path = str(tmp_path / "vocab.txt")
    tok = WordPieceTokenizer.learn(SENTENCES, vocabulary_size=60)
    tok.save(path)
    before = open(path, encoding="utf-8").read()

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        WordPieceTokenizer([*RESERVED_TOKENS, "x"]).save(path)
    assert open(path, encoding="utf-8").read() == before
    assert os.listdir(tmp_path) == ["vocab.txt"]


def test_byte_tokenizer_round_trips_any_bytes(tmp_path):
    tok = ByteTokenizer()
    assert tok.vocabulary_size == 260
    strings = ["hé", b"\xff\x00a", ""]
    ids = tok.tokenize(strings)
    assert ids.to_list() == [[104 + 4, 0xC3 + 4, 0xA9 + 4], [0xFF + 4, 4, 97 + 4], []]
    assert tok.detokenize(ids).numpy().tolist() == ["hé".encode(), b"\xff\x00a", b""]
    tok.save(str(tmp_path / "t.json"))
    assert isinstance(ByteTokenizer.load(str(tmp_path / "t.json")), ByteTokenizer)


def test_join_punctuation_undoes_the_detokenizer_spacing():
    from tfformer.training.text.wordpiece import join_punctuation

    spaced = [
        "a dog ( brown ) runs , fast .",
        "the man ' s hat , don ' t",
        "twenty - one",
        "a - b",
    ]
    assert join_punctuation(spaced).numpy().tolist() == [
        b"a dog (brown) runs, fast.",
        b"the man's hat, don't",
        b"twenty-one",
        b"a-b",
    ]
