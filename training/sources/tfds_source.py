"""Translation pairs and labelled images from tensorflow-datasets, by name."""

import hashlib
import tempfile

from tfformer.errors import InputError

SPLIT_NAMES = {"train": "train", "validation": "validation", "test": "test"}


def tfds_translation_splits(name, *, source_key, target_key, data_dir=None):
    """(source, target) string pairs of a tfds translation dataset.

    Args:
        name: e.g. "ted_hrlr_translate/pt_to_en" or "wmt14_translate/de-en".
        source_key, target_key: the feature names ("pt", "en").
        data_dir: where the prepared dataset lives (`tfds.load(data_dir=...)`).
            Nothing is downloaded: prepare it beforehand with `tfds build`.

    Raises:
        ValueError: saying which of these it is, with tfds's own error as its
            `__cause__`: the name (or its config or version) is unknown to
            tfds; the dataset is known but not prepared in `data_dir`; its
            files are there but unreadable (corrupt); a split is missing; or
            the keys are not features of it.
    """
    import tensorflow_datasets as tfds

    builder = _builder(tfds, name, data_dir)
    features = set(builder.info.features.keys()) if builder.info.features else set()
    for what, key in (("source_key", source_key), ("target_key", target_key)):
        if features and key not in features:
            raise InputError(
                f"{what} must be one of the features {sorted(features)} of {name}. "
                f"Received: {what}={key!r}"
            )
    splits = {}
    for split, tfds_split in SPLIT_NAMES.items():
        # Reading is lazy: a bad file may fail at load() or at any record.
        # The builder's state, not the exception's type, says what went wrong.
        try:
            dataset = tfds.load(
                name, split=tfds_split, data_dir=data_dir, download=False
            )
            splits[split] = [
                (ex[source_key].decode("utf-8"), ex[target_key].decode("utf-8"))
                for ex in tfds.as_numpy(dataset)
            ]
        except Exception as e:
            raise _read_error(builder, name, tfds_split, data_dir, e) from e
    return splits


def tfds_image_splits(
    name, *, size, image_key="image", label_key="label", data_dir=None
):
    """Labelled images of a tfds image-classification dataset, resized to
    `size` (see `tfformer.preprocessing.images`).

    Returns:
        ({"train": (uint8 pixels (n, size, size, 3), int32 labels), "test":
        the same or None where the dataset has no test split,
        "fingerprints": a digest of each split's labels}, class names).

    Raises:
        ValueError: as `tfds_translation_splits`, and when `image_key` is not
            an image feature or `label_key` not a class label (naming the key
            and what it is).
    """
    import numpy as np
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from tfformer.preprocessing.images import resize_pixels

    builder = _builder(tfds, name, data_dir)
    features = builder.info.features
    if features is None or image_key not in features:
        raise InputError(
            f"image_key must name an image feature of {name}. Received: "
            f"image_key={image_key!r}; features: {sorted(features or {})}"
        )
    if not isinstance(features[image_key], tfds.features.Image):
        raise InputError(
            f"image_key={image_key!r} of {name} is a "
            f"{type(features[image_key]).__name__}, not an image."
        )
    if features[image_key].dtype != tf.uint8:
        raise InputError(
            f"image_key={image_key!r} of {name} holds {features[image_key].dtype.name}"
            " pixels; only uint8 images (as JPEG and PNG decode) are read."
        )
    label = features[label_key] if label_key in features else None
    if not isinstance(label, tfds.features.ClassLabel):
        raise InputError(
            f"label_key must name a class-label feature of {name}. Received: "
            f"label_key={label_key!r} ({type(label).__name__ if label else 'absent'}"
            f"); features: {sorted(features)}"
        )
    splits = {}
    for split in ("train", "test"):
        known = builder.info.splits.keys()
        if split == "test" and known and "test" not in known:
            splits[split] = None
            continue
        try:
            dataset = tfds.load(name, split=split, data_dir=data_dir, download=False)

            def convert(example):
                image = example[image_key]
                image = tf.cond(
                    tf.equal(tf.shape(image)[-1], 1),
                    lambda: tf.tile(image, [1, 1, 3]),
                    lambda: image[..., :3],
                )
                return resize_pixels(image, size), tf.cast(example[label_key], tf.int32)

            pixels, labels = [], []
            for batch_pixels, batch_labels in tfds.as_numpy(
                dataset.map(convert).batch(4096)
            ):
                pixels.append(batch_pixels)
                labels.append(batch_labels)
        except Exception as e:
            raise _read_error(builder, name, split, data_dir, e) from e
        splits[split] = (
            np.concatenate(pixels)
            if pixels
            else np.zeros((0, size, size, 3), np.uint8),
            np.concatenate(labels) if labels else np.zeros(0, np.int32),
        )
    splits["fingerprints"] = {
        split: None
        if splits[split] is None
        else hashlib.sha256(
            f"{name}:{len(splits[split][1])}:".encode() + splits[split][1].tobytes()
        ).hexdigest()[:16]
        for split in ("train", "test")
    }
    return splits, list(label.names)


def _builder(tfds, name, data_dir):
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.DatasetNotFoundError as e:
        raise InputError(
            f"Unknown tfds dataset: no dataset of that name is registered with "
            f"tensorflow-datasets {tfds.__version__}. Received: tfds_name={name!r}"
        ) from e
    except Exception as e:
        # The name is registered. If it builds with no files around, the
        # metadata in data_dir is what failed to read.
        if _builds_without_files(tfds, name):
            raise InputError(
                f"tfds dataset {name!r} is corrupt: its metadata in "
                f"data_dir={data_dir!r} is unreadable ({_summary(e)}). Delete "
                f"its directory and prepare it again with `tfds build`."
            ) from e
        raise InputError(
            f"Unknown tfds dataset config or version{_configs(tfds, name)}. "
            f"Received: tfds_name={name!r}"
        ) from e


def _configs(tfds, name):
    """`: <dataset> has configs [...]`, or "" where there is no such list."""
    dataset = name.split("/")[0].split(":")[0]
    try:
        configs = sorted(tfds.builder_cls(dataset).builder_configs)
    except Exception:  # only decorates the message; the cause is kept
        return ""
    return f": {dataset} has configs {configs}" if configs else ""


def _builds_without_files(tfds, name):
    with tempfile.TemporaryDirectory() as empty:
        try:
            tfds.builder(name, data_dir=empty)
        except Exception:
            return False
    return True


def _read_error(builder, name, split, data_dir, cause):
    if not builder.is_prepared():
        return InputError(
            f"tfds dataset {name!r} is not prepared in {builder.data_dir_root} "
            f"(nothing is downloaded here): run `tfds build {name} --data_dir "
            f"{builder.data_dir_root}` first. Received: data_dir={data_dir!r}"
        )
    prepared = sorted(builder.info.splits.keys())
    if split not in prepared:
        return InputError(
            f"tfds dataset {name!r} has no split {split!r}; its prepared splits "
            f"are {prepared}. Received: data_dir={data_dir!r}"
        )
    return InputError(
        f"tfds dataset {name!r} is corrupt: split {split!r} in "
        f"{builder.data_dir} is unreadable ({_summary(cause)}). Delete that "
        f"directory and prepare it again with `tfds build`."
    )


def _summary(error):
    """The exception's type and first line (tfds appends long lists)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
