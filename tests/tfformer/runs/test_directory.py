"""The run directory reader: the manifest round trip, and every broken
directory refused with the file named."""

import json

import pytest

from tfformer.runs.directory import RunDirectory, TokenizerSpec, tokenizer_file


def written(tmp_path, **settings):
    run = RunDirectory(tmp_path)
    run.write_manifest(
        "translation",
        {"source": ("wordpiece", True), "target": ("byte", False)},
        settings or {"max_length": 32},
    )
    (tmp_path / "source_vocab.txt").write_text("[PAD]\n[UNK]\n[START]\n[END]\na\n")
    (tmp_path / "target_tokenizer.json").write_text('{"tokenizer": "byte"}')
    return RunDirectory(tmp_path)


def test_manifest_round_trip(tmp_path):
    run = written(tmp_path, max_length=32, labels=["a", "b"])
    assert run.task == "translation"
    assert run.settings == {"max_length": 32, "labels": ["a", "b"]}
    assert run.tokenizer("source") == TokenizerSpec(
        "wordpiece", str(tmp_path / "source_vocab.txt"), True
    )
    assert run.tokenizer("source").vocabulary_file == str(tmp_path / "source_vocab.txt")
    assert run.tokenizer("target").vocabulary_file is None
    assert json.loads((tmp_path / "run.json").read_text())["format_version"] == 1


def test_tokenizer_file_names():
    assert tokenizer_file("wordpiece", "source") == "source_vocab.txt"
    assert tokenizer_file("byte", "text") == "text_tokenizer.json"
    assert tokenizer_file("bpe", "text") == "text_tokenizer.json"
    with pytest.raises(ValueError, match=r"tokenizer must be one of.*'sentencepiece'"):
        tokenizer_file("sentencepiece", "text")


def test_broken_directories_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        RunDirectory(tmp_path / "nope")
    run = RunDirectory(tmp_path)
    with pytest.raises(ValueError, match=r"run\.json is missing"):
        run.task  # noqa: B018
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"run\.json is not valid JSON"):
        RunDirectory(tmp_path).task  # noqa: B018
    (tmp_path / "run.json").write_text('{"format_version": 9, "task": "x"}')
    with pytest.raises(ValueError, match="format_version 9 is not supported"):
        RunDirectory(tmp_path).task  # noqa: B018
    (tmp_path / "run.json").write_text(
        '{"format_version": 1, "task": "x", "tokenizers": [], "settings": {}}'
    )
    with pytest.raises(ValueError, match="'tokenizers' must be a dict"):
        RunDirectory(tmp_path).task  # noqa: B018


def test_missing_tokenizer_model_and_setting(tmp_path):
    run = written(tmp_path)
    (tmp_path / "source_vocab.txt").unlink()
    with pytest.raises(ValueError, match=r"source_vocab\.txt is missing"):
        run.tokenizer("source")
    with pytest.raises(ValueError, match=r"tokenizers\.text must name a kind"):
        run.tokenizer("text")
    with pytest.raises(ValueError, match=r"model\.keras is missing"):
        run.checkpoint_path()
    with pytest.raises(ValueError, match="checkpoint file must be one of"):
        run.checkpoint_path("last.h5")
    with pytest.raises(ValueError, match="settings lack 'labels'"):
        run.setting("labels")
