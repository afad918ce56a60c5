import gzip
import re

import pytest

from tfformer.training.sources.text_files import (
    read_labelled_text,
    read_lines,
    read_parallel_text,
)


def write(path, data, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wb") as f:
        f.write(data)
    return str(path)


def test_plain_and_gzip_read_the_same(tmp_path):
    text = b"ein Hund\nzwei Katzen\n"
    plain = write(tmp_path / "a.txt", text)
    packed = write(tmp_path / "a.txt.gz", text, gz=True)
    assert read_lines(plain) == read_lines(packed) == ["ein Hund", "zwei Katzen"]


def test_parallel_pairs_and_line_count_mismatch(tmp_path):
    src = write(tmp_path / "s.de", b"a\nb\n")
    tgt = write(tmp_path / "t.en", b"x\ny\n")
    assert read_parallel_text(src, tgt) == [("a", "x"), ("b", "y")]
    short = write(tmp_path / "short.en", b"x\n")
    with pytest.raises(ValueError, match=r"short\.en' has 1"):
        read_parallel_text(src, short)


def test_errors_name_file_and_line(tmp_path):
    bad = write(tmp_path / "bad.txt", b"fine\nalso fine\nbroken \xff here\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3: bytes that are not UTF-8"):
        read_lines(bad)
    empty = write(tmp_path / "empty.txt", b"")
    with pytest.raises(ValueError, match=r"empty\.txt: the file is empty"):
        read_lines(empty)
    hole = write(tmp_path / "hole.txt", b"a\n\nb\n")
    with pytest.raises(ValueError, match=r"hole\.txt:2: empty line"):
        read_lines(hole)
    notgz = write(tmp_path / "fake.gz", b"not gzip at all")
    with pytest.raises(ValueError, match=r"fake\.gz: cannot be read"):
        read_lines(notgz)
    with pytest.raises(ValueError, match="File not found"):
        read_lines(str(tmp_path / "missing.txt"))


def test_labelled_text_uses_file_order_as_class(tmp_path):
    neg = write(tmp_path / "neg", b"bad\nawful\n")
    pos = write(tmp_path / "pos", b"good\n")
    assert read_labelled_text([neg, pos]) == [("bad", 0), ("awful", 0), ("good", 1)]


def test_labelled_tsv_rows_pairs_and_errors(tmp_path):
    from tfformer.training.sources.text_files import read_labelled_tsv

    single = tmp_path / "single.tsv"
    single.write_text("a fine film\tpos\na dull one\tneg\ngreat\tpos\n")
    rows, names = read_labelled_tsv(str(single))
    assert names == ["neg", "pos"]
    assert rows == [("a fine film", 1), ("a dull one", 0), ("great", 1)]
    rows, names = read_labelled_tsv(str(single), ["pos", "neg"])
    assert names == ["pos", "neg"] and [r[1] for r in rows] == [0, 1, 0]

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a man eats\ta person eats\tyes\na dog runs\ta cat sleeps\tno\n")
    rows, names = read_labelled_tsv(str(pairs))
    assert rows == [
        (("a man eats", "a person eats"), 1),
        (("a dog runs", "a cat sleeps"), 0),
    ]

    cases = {
        "a\tb\tc\td\n": "pairs.tsv:1: expected 2 columns",
        "a\tx\nb\tc\td\n": "bad.tsv:2: 3 column(s) where line 1 has 2",
        "a\tx\n\ty\n": "bad.tsv:2: an empty column",
        "a\tx\nb\tx\n": "needs at least 2 classes",
    }
    for text, message in cases.items():
        path = tmp_path / ("pairs.tsv" if "pairs" in message else "bad.tsv")
        path.write_text(text)
        with pytest.raises(ValueError, match=re.escape(message)):
            read_labelled_tsv(str(path))
    with pytest.raises(
        ValueError, match=re.escape("single.tsv:2: unknown label 'neg'")
    ):
        read_labelled_tsv(str(single), ["pos", "other"])


def test_labelled_tsv_header_is_skipped_when_asked_and_refused_otherwise(tmp_path):
    from tfformer.training.sources.text_files import read_labelled_tsv

    glue = tmp_path / "train.tsv"
    glue.write_text("sentence\tlabel\na fine film\t1\na dull one\t0\nmeh\tx\n")
    with pytest.raises(ValueError, match=re.escape("data.tsv_header=true")):
        read_labelled_tsv(str(glue))
    with pytest.raises(ValueError, match=re.escape("train.tsv:4: unknown label 'x'")):
        # Line numbers count the header.
        read_labelled_tsv(str(glue), ["0", "1"], header=True)
    glue.write_text("sentence\tlabel\na fine film\t1\na dull one\t0\n")
    rows, names = read_labelled_tsv(str(glue), header=True)
    assert names == ["0", "1"]
    assert rows == [("a fine film", 1), ("a dull one", 0)]
    glue.write_text("sentence\tlabel\n")
    with pytest.raises(ValueError, match="a header line and no rows"):
        read_labelled_tsv(str(glue), header=True)
