"""tfds failures are told apart (unknown, not prepared, corrupt, missing
split) and keep tfds's error as their cause. Offline: a three-sentence
dataset defined here is prepared into a temporary directory and damaged."""

import os

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfformer.training.sources.tfds_source import tfds_translation_splits

PAIRS = [("eins", "one"), ("zwei", "two"), ("drei", "three")]


class TfformerTestPairs(tfds.core.GeneratorBasedBuilder):
    """Registered with tfds as "tfformer_test_pairs"; nothing to download."""

    VERSION = tfds.core.Version("1.0.0")
    SPLITS = ("train", "validation", "test")
    # Nothing to download. Without this, tfds looks for a checksums file next
    # to this module through `importlib_resources`, which it does not require.
    url_infos = None

    def _info(self):
        text = tfds.features.Text()
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.FeaturesDict({"de": text, "en": text})
        )

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples() for split in self.SPLITS}

    def _generate_examples(self):
        for i, (de, en) in enumerate(PAIRS):
            yield i, {"de": de, "en": en}


class TfformerTestPairsNoValidation(TfformerTestPairs):
    """Registered as "tfformer_test_pairs_no_validation"."""

    SPLITS = ("train", "test")


def prepare(name, data_dir):
    """Prepares `name` in `data_dir`; returns its version directory."""
    builder = tfds.builder(name, data_dir=str(data_dir))
    builder.download_and_prepare()
    return builder.data_dir


def read(name, data_dir):
    return tfds_translation_splits(
        name, source_key="de", target_key="en", data_dir=str(data_dir)
    )


def test_a_prepared_dataset_reads(tmp_path):
    prepare("tfformer_test_pairs", tmp_path)
    splits = read("tfformer_test_pairs", tmp_path)
    assert {split: sorted(pairs) for split, pairs in splits.items()} == {
        "train": sorted(PAIRS),
        "validation": sorted(PAIRS),
        "test": sorted(PAIRS),
    }


def test_an_unknown_name_is_unknown():
    with pytest.raises(ValueError, match="Unknown tfds dataset: no dataset") as e:
        tfds_translation_splits("no_such_dataset_xyz", source_key="a", target_key="b")
    assert "tfds_name='no_such_dataset_xyz'" in str(e.value)
    assert isinstance(e.value.__cause__, tfds.core.DatasetNotFoundError)
    # tfds's message lists every dataset it knows; ours stays one line.
    assert "\n" not in str(e.value)


def test_an_unknown_config_is_unknown(tmp_path):
    with pytest.raises(ValueError, match="Unknown tfds dataset config") as e:
        read("ted_hrlr_translate/xx_to_en", tmp_path)
    assert "'pt_to_en'" in str(e.value)  # the configs it has
    assert "tfds_name='ted_hrlr_translate/xx_to_en'" in str(e.value)
    assert e.value.__cause__ is not None


def test_a_known_dataset_missing_from_data_dir_is_not_prepared(tmp_path):
    with pytest.raises(ValueError, match="is not prepared in") as e:
        tfds_translation_splits(
            "ted_hrlr_translate/pt_to_en",
            source_key="pt",
            target_key="en",
            data_dir=str(tmp_path),
        )
    assert f"tfds build ted_hrlr_translate/pt_to_en --data_dir {tmp_path}" in str(
        e.value
    )
    assert isinstance(e.value.__cause__, AssertionError)  # tfds's "could not find"


def garbage(path):
    with open(path, "wb") as f:
        f.write(b"not a TFRecord file")


def truncated(path):
    with open(path, "rb") as f:
        head = f.read(20)
    with open(path, "wb") as f:
        f.write(head)


@pytest.mark.parametrize(
    "damage, cause",
    [
        (garbage, tf.errors.DataLossError),
        (truncated, tf.errors.DataLossError),
        (os.remove, tf.errors.NotFoundError),
    ],
    ids=["garbage", "truncated", "missing"],
)
def test_unreadable_records_are_corrupt(tmp_path, damage, cause):
    directory = prepare("tfformer_test_pairs", tmp_path)
    (validation,) = [f for f in os.listdir(directory) if "-validation.tfrecord" in f]
    damage(os.path.join(directory, validation))
    with pytest.raises(ValueError, match="is corrupt: split 'validation'") as e:
        read("tfformer_test_pairs", tmp_path)
    assert directory in str(e.value)
    assert isinstance(e.value.__cause__, cause)


def test_unreadable_metadata_is_corrupt(tmp_path):
    directory = prepare("tfformer_test_pairs", tmp_path)
    with open(os.path.join(directory, "dataset_info.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match="is corrupt: its metadata") as e:
        read("tfformer_test_pairs", tmp_path)
    assert "JSON" in str(e.value) and e.value.__cause__ is not None


def test_a_missing_split_is_named(tmp_path):
    prepare("tfformer_test_pairs_no_validation", tmp_path)
    with pytest.raises(
        ValueError, match=r"no split 'validation'; its prepared splits are \['test', "
    ) as e:
        read("tfformer_test_pairs_no_validation", tmp_path)
    assert e.value.__cause__ is not None


def test_mock_data_needs_no_prepared_files(tmp_path):
    # The not-prepared check runs only after a read fails, so mock_data (which
    # fakes the reads, not the files) still works on an empty data_dir.
    with tfds.testing.mock_data(num_examples=3):
        splits = read("tfformer_test_pairs", tmp_path)
    assert {split: len(pairs) for split, pairs in splits.items()} == {
        "train": 3,
        "validation": 3,
        "test": 3,
    }
