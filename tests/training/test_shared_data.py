"""The shipped configs on the real data in ../shared/data (skipped if absent)."""

import os

import numpy as np
import pytest

from tfformer.training.config import load_config
from tfformer.training.trainer import build_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")


def config_for(name, *overrides):
    path = os.path.join(ROOT, "training", "configs", name)
    config = load_config(path, overrides)
    return config


def needs(*parts):
    path = os.path.join(SHARED, *parts)
    if not os.path.exists(path):
        pytest.skip(f"shared data not found at {path}")


@pytest.fixture(autouse=True)
def _from_repository_root(monkeypatch):
    # The configs name ../shared/data relative to the repository root.
    monkeypatch.chdir(ROOT)


@pytest.mark.integration
def test_multi30k_reads_all_three_splits():
    needs("multi30k", "train.de.gz")
    config = config_for(
        "translate_de_en.json",
        "data.vocabulary_size=1000",
        "data.vocabulary_sample_size=1000",
    )
    data = build_dataset(config, None, progress=lambda *_: None)
    assert {k: len(v) for k, v in data.examples.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    source, target = data.raw["test"][0]
    assert source.startswith("Ein Mann") and target.startswith("A man")
    # Almost no unknown pieces on the test split with a vocabulary from train.
    ids = data.examples["test"].labels.flat_values.numpy()
    assert np.mean(ids == 1) < 0.01
    assert data.examples["train"].lengths.max() <= config.data.max_length


def test_tinyshakespeare_bytes_split_into_windows():
    needs("tinyshakespeare", "input.txt.gz")
    config = config_for("shakespeare_gpt.json")
    data = build_dataset(config, None, progress=lambda *_: None)
    train = data.examples["train"]
    assert train.features["token_ids"].to_tensor().shape[1] == config.data.max_length
    # ~1.1M characters, 90% train, in windows of 128.
    assert 7000 < len(train) < 8500
    text = (
        data.tokenizers["text"].detokenize(train.features["token_ids"][:1]).numpy()[0]
    )
    assert text.startswith(b"First Citizen")


@pytest.mark.integration
def test_sentence_polarity_has_two_balanced_classes():
    needs("sentence_polarity", "rt-polarity.pos.gz")
    # A small vocabulary: this checks the labels, and learning the config's
    # vocabulary was most of its time.
    config = config_for(
        "polarity_bert.yaml",
        "data.vocabulary_size=500",
        "data.vocabulary_sample_size=500",
    )
    data = build_dataset(config, None, progress=lambda *_: None)
    labels = np.concatenate([data.examples[s].labels.numpy() for s in data.examples])
    assert len(labels) == 10662
    assert abs(labels.mean() - 0.5) < 1e-3
    assert data.num_classes == 2
