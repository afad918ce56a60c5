"""Translation pairs from tensorflow-datasets, by dataset name."""

SPLIT_NAMES = {"train": "train", "validation": "validation", "test": "test"}


def tfds_translation_splits(name, *, source_key, target_key, data_dir=None):
    """(source, target) string pairs of a tfds translation dataset.

    Args:
        name: e.g. "ted_hrlr_translate/pt_to_en" or "wmt14_translate/de-en".
        source_key, target_key: the feature names ("pt", "en").
        data_dir: where the prepared dataset lives (`tfds.load(data_dir=...)`).
            Nothing is downloaded: prepare it beforehand with `tfds build`.

    Raises:
        ValueError: the dataset is unknown or not prepared, a split is missing,
            or the keys are not features of it.
    """
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as e:  # tfds raises its own DatasetNotFoundError
        raise ValueError(
            f"Unknown tfds dataset. Received: tfds_name={name!r}: {e}"
        ) from None
    features = set(builder.info.features.keys()) if builder.info.features else set()
    for what, key in (("source_key", source_key), ("target_key", target_key)):
        if features and key not in features:
            raise ValueError(
                f"{what} must be one of the features {sorted(features)} of {name}. "
                f"Received: {what}={key!r}"
            )
    splits = {}
    for split, tfds_split in SPLIT_NAMES.items():
        try:
            dataset = tfds.load(
                name, split=tfds_split, data_dir=data_dir, download=False
            )
        except Exception as e:
            raise ValueError(
                f"tfds dataset {name!r} has no prepared split {tfds_split!r} "
                f"(data_dir={data_dir!r}): {e}"
            ) from None
        splits[split] = [
            (ex[source_key].decode("utf-8"), ex[target_key].decode("utf-8"))
            for ex in tfds.as_numpy(dataset)
        ]
    return splits
