"""tensorflow-datasets by name, offline with tfds.testing.mock_data."""

import pytest
import tensorflow_datasets as tfds

from tfformer.training.config import load_config
from tfformer.training.sources.tfds_source import tfds_translation_splits
from tfformer.training.trainer import build_dataset


def test_translation_pairs_come_from_the_named_features():
    with tfds.testing.mock_data(num_examples=12):
        splits = tfds_translation_splits(
            "ted_hrlr_translate/pt_to_en", source_key="pt", target_key="en"
        )
    assert {k: len(v) for k, v in splits.items()} == {
        "train": 12,
        "validation": 12,
        "test": 12,
    }
    assert all(isinstance(s, str) and isinstance(t, str) for s, t in splits["train"])


def test_tfds_config_builds_tokenized_splits(tmp_path):
    config = load_config(
        overrides=[
            "data.corpus=tfds",
            "data.tfds_name=ted_hrlr_translate/pt_to_en",
            "data.source_key=pt",
            "data.target_key=en",
            f"data.tfds_data_dir={tmp_path}",
            "data.vocabulary_size=100",
            "data.max_length=64",
        ]
    )
    with tfds.testing.mock_data(num_examples=20):
        data = build_dataset(config, None, progress=lambda *_: None)
    assert len(data.examples["train"]) == 20
    labels = data.examples["train"].labels.to_list()
    assert all(row[-1] == 3 for row in labels)  # every target ends with [END]


def test_bad_names_and_keys_are_reported():
    with tfds.testing.mock_data(num_examples=4):
        with pytest.raises(ValueError, match="source_key must be one of"):
            tfds_translation_splits(
                "ted_hrlr_translate/pt_to_en", source_key="de", target_key="en"
            )
    with pytest.raises(ValueError, match="Unknown tfds dataset"):
        tfds_translation_splits("no_such_dataset_xyz", source_key="a", target_key="b")
