"""The run directory reader: the typed manifest, config and metrics go
through it, and every broken directory is refused with the file named."""

import json

import pytest

from tfformer.runs.directory import RunDirectory, TokenizerSpec, tokenizer_file
from tfformer.runs.manifest import TokenizerEntry, TranslationManifest


def written(tmp_path, max_length=32):
    run = RunDirectory(tmp_path)
    run.write_manifest(
        TranslationManifest(
            tokenizers={
                "source": TokenizerEntry("wordpiece", lower_case=True),
                "target": TokenizerEntry("byte"),
            },
            max_length=max_length,
        )
    )
    (tmp_path / "source_vocab.txt").write_text("[PAD]\n[UNK]\n[START]\n[END]\na\n")
    (tmp_path / "target_tokenizer.json").write_text('{"tokenizer": "byte"}')
    return RunDirectory(tmp_path)


def test_manifest_round_trip(tmp_path):
    run = written(tmp_path, max_length=32)
    assert run.task == "translation"
    assert isinstance(run.manifest, TranslationManifest)
    assert run.manifest.max_length == 32
    assert run.tokenizer("source") == TokenizerSpec(
        "wordpiece", str(tmp_path / "source_vocab.txt"), True
    )
    assert run.tokenizer("source").vocabulary_file == str(tmp_path / "source_vocab.txt")
    assert run.tokenizer("target").vocabulary_file is None
    # The layout on disk is the one every earlier tfformer wrote.
    assert json.loads((tmp_path / "run.json").read_text()) == {
        "format_version": 1,
        "task": "translation",
        "tokenizers": {
            "source": {"kind": "wordpiece", "lower_case": True},
            "target": {"kind": "byte", "lower_case": False},
        },
        "settings": {"max_length": 32},
    }


def test_config_and_metrics_go_through_the_directory(tmp_path):
    run = RunDirectory(tmp_path)
    assert run.read_metrics() is None
    run.write_config({"task": "translation", "train": {"epochs": 2}})
    run.write_metrics({"epochs": [], "summary": {"loss": 1.5}})
    assert run.read_config() == {"task": "translation", "train": {"epochs": 2}}
    assert run.read_metrics()["summary"] == {"loss": 1.5}
    assert json.loads((tmp_path / "config.json").read_text())["train"]["epochs"] == 2
    with pytest.raises(TypeError, match="manifest must be a RunManifest"):
        run.write_manifest({"task": "translation"})


def test_tokenizer_file_names():
    assert tokenizer_file("wordpiece", "source") == "source_vocab.txt"
    assert tokenizer_file("byte", "text") == "text_tokenizer.json"
    assert tokenizer_file("bpe", "text") == "text_tokenizer.json"
    assert tokenizer_file("sentencepiece", "text") == "text_tokenizer.json"
    with pytest.raises(ValueError, match=r"tokenizer must be one of.*'unigram'"):
        tokenizer_file("unigram", "text")


def test_broken_directories_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        RunDirectory(tmp_path / "nope")
    run = RunDirectory(tmp_path)
    with pytest.raises(ValueError, match=r"run\.json is missing"):
        run.task  # noqa: B018
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"run\.json is not valid JSON"):
        RunDirectory(tmp_path).task  # noqa: B018
    (tmp_path / "run.json").write_bytes(b'{"task": "\xff"}')
    with pytest.raises(ValueError, match=r"run\.json is not UTF-8 text"):
        RunDirectory(tmp_path).task  # noqa: B018
    (tmp_path / "run.json").write_text('{"format_version": 9, "task": "x"}')
    with pytest.raises(ValueError, match="format_version 9 is not supported"):
        RunDirectory(tmp_path).task  # noqa: B018
    (tmp_path / "run.json").write_text(
        '{"format_version": 1, "task": "translation", "tokenizers": [], "settings": {}}'
    )
    with pytest.raises(ValueError, match="'tokenizers' must be a dict"):
        RunDirectory(tmp_path).task  # noqa: B018


def test_missing_tokenizer_and_model(tmp_path):
    run = written(tmp_path)
    (tmp_path / "source_vocab.txt").unlink()
    with pytest.raises(ValueError, match=r"source_vocab\.txt is missing"):
        run.tokenizer("source")
    with pytest.raises(ValueError, match=r"a translation run has no 'text' tokenizer"):
        run.tokenizer("text")
    with pytest.raises(ValueError, match=r"model\.keras is missing"):
        run.checkpoint_path()
    with pytest.raises(ValueError, match="checkpoint file must be one of"):
        run.checkpoint_path("last.h5")
