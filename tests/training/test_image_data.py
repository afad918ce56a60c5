"""Labelled images from class folders, archives and tfds (offline), and the
augmenting tf.data pipeline, against NumPy."""

import io
import os
import tarfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tfformer import InputError
from tfformer.preprocessing.images import decode_pixels
from tfformer.training import image_pipeline
from tfformer.training.config import load_config
from tfformer.training.image_pipeline import Augmentation, ImageExamples
from tfformer.training.sources.image_folders import read_image_folders, resolve
from tfformer.training.sources.tfds_source import tfds_image_splits
from tfformer.training.tasks import get_task

RNG = np.random.default_rng(5)


def write_image(path, pixels):
    """PNG (lossless) or JPEG by the name's extension."""
    pixels = np.asarray(pixels, np.uint8)
    if pixels.ndim == 2:
        pixels = pixels[..., None]
    encode = tf.io.encode_png if str(path).endswith(".png") else tf.io.encode_jpeg
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(encode(pixels).numpy())


def messages():
    seen = []
    return seen, seen.append


def test_images_of_any_size_and_channels_decode_to_rgb_at_the_size(tmp_path):
    rgb = RNG.integers(0, 256, (8, 8, 3))
    gray = RNG.integers(0, 256, (8, 8))
    rgba = RNG.integers(0, 256, (8, 8, 4))
    write_image(tmp_path / "train/a/rgb.png", rgb)
    write_image(tmp_path / "train/a/gray.png", gray)
    write_image(tmp_path / "train/b/rgba.png", rgba)
    write_image(tmp_path / "train/b/big.png", np.full((24, 40, 3), 77))
    write_image(tmp_path / "train/b/one.jpg", np.full((1, 1, 3), 200))
    splits, names = read_image_folders(str(tmp_path), 8, progress=lambda m: None)
    assert names == ["a", "b"]
    pixels, labels = splits["train"]
    assert splits["test"] is None
    assert pixels.shape == (5, 8, 8, 3) and pixels.dtype == np.uint8
    # Sorted within each class: a/gray, a/rgb, b/big, b/one, b/rgba.
    np.testing.assert_array_equal(labels, [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(pixels[0], np.repeat(gray[..., None], 3, -1))
    np.testing.assert_array_equal(pixels[1], rgb)  # same size: untouched
    np.testing.assert_array_equal(pixels[2], 77)  # a flat image stays flat
    assert np.abs(pixels[3].astype(int) - 200).max() <= 2  # JPEG rounding
    np.testing.assert_array_equal(pixels[4], rgba[..., :3])  # alpha dropped


def test_resizing_matches_antialiased_bilinear(tmp_path):
    image = RNG.integers(0, 256, (20, 12, 3)).astype(np.uint8)
    write_image(tmp_path / "x.png", image)
    want = tf.image.resize(image.astype("float32"), [8, 8], antialias=True).numpy()
    got = decode_pixels(tf.io.read_file(str(tmp_path / "x.png")), 8).numpy()
    np.testing.assert_array_equal(got, np.clip(np.round(want), 0, 255))


def huge_png(width, height):
    """A valid PNG signature and header declaring `width` x `height`, and no
    pixel data: a few bytes that would decode to gigabytes."""
    import struct
    import zlib

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(header))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
    )


def test_other_formats_and_huge_declared_sizes_are_refused():
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (9, 9, 9)).save(buffer, format="WEBP")
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a JPEG, PNG"):
        decode_pixels(tf.constant(buffer.getvalue()), 8)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"declares.*10000000000.*more than"
    ):
        decode_pixels(tf.constant(huge_png(100_000, 100_000)), 8)
    # Declared sizes of each format, against the encoders' own.
    from tfformer.preprocessing.images import MAX_PIXELS, declared_pixels

    for form in ("PNG", "JPEG", "GIF", "BMP"):
        buffer = io.BytesIO()
        Image.new("RGB", (37, 11)).save(buffer, format=form)
        assert int(declared_pixels(tf.constant(buffer.getvalue()))) == 37 * 11, form
    assert int(declared_pixels(tf.constant(huge_png(7_071, 7_071)))) <= MAX_PIXELS


def test_non_images_are_ignored_and_undecodable_ones_skipped_by_name(tmp_path):
    for i in range(3):
        write_image(tmp_path / f"a/{i}.png", np.full((4, 4, 3), i))
        write_image(tmp_path / f"b/{i}.jpg", np.full((4, 4, 3), 100))
    (tmp_path / "a/notes.txt").write_text("not an image")
    (tmp_path / "a/.DS_Store").write_bytes(b"\0")
    (tmp_path / "b/broken.jpg").write_bytes(b"\xff\xd8\xff truncated")
    (tmp_path / "b/empty.png").write_bytes(b"")
    (tmp_path / "b/huge.png").write_bytes(huge_png(60_000, 60_000))
    (tmp_path / "__MACOSX/a").mkdir(parents=True)
    (tmp_path / "__MACOSX/a/._0.png").write_bytes(b"resource fork")
    seen, progress = messages()
    splits, names = read_image_folders(str(tmp_path), 4, progress=progress)
    assert names == ["a", "b"]
    assert len(splits["train"][1]) == 6
    text = "\n".join(seen)
    assert "Ignored 1 file(s)" in text and "notes.txt" in text
    assert "DS_Store" not in text
    assert "Skipped 3 of 9 image file(s)" in text
    assert all(name in text for name in ("broken.jpg", "empty.png", "huge.png"))


def test_file_and_folder_names_that_are_not_utf8(tmp_path):
    """Linux names are bytes: an image whose name is not UTF-8 is read like
    any other, one that does not decode is reported with U+FFFD in its name
    (the message can be printed), and a class folder of such a name is
    refused (its name would be a label in the run and its exports)."""
    for i in range(2):
        write_image(tmp_path / f"a/{i}.png", np.full((4, 4, 3), 10 * i))
        write_image(tmp_path / f"b/{i}.png", np.full((4, 4, 3), 99))
    root = os.fsencode(tmp_path)
    write_image(os.fsdecode(root + b"/a/caf\xe9.png"), np.full((4, 4, 3), 42))
    with open(root + b"/b/bro\xefken.png", "wb") as f:
        f.write(b"not a png")
    seen, progress = messages()
    splits, names = read_image_folders(str(tmp_path), 4, progress=progress)
    pixels, labels = splits["train"]
    assert names == ["a", "b"]
    np.testing.assert_array_equal(labels, [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(pixels[2], 42)  # a/caf?.png, sorted last
    text = "\n".join(seen)
    assert "Skipped 1 of 6 image file(s)" in text
    assert "bro\ufffdken.png" in text
    text.encode("utf-8")  # printable: no lone surrogates
    os.makedirs(root + b"/d\xe9j\xe0")
    write_image(os.fsdecode(root + b"/d\xe9j\xe0/x.png"), np.full((4, 4, 3), 1))
    with pytest.raises(InputError, match="d\ufffdj\ufffd has a name that is not UTF-8"):
        read_image_folders(str(tmp_path), 4, progress=progress)


def test_a_data_folder_whose_own_name_is_not_utf8(tmp_path):
    """Under a parent folder whose name is not UTF-8, the images read and
    the progress lines and errors name the folder printably (U+FFFD)."""
    parent = os.fsdecode(os.fsencode(tmp_path) + b"/d\xe9")
    for c in "ab":
        write_image(os.path.join(parent, c, "0.png"), np.full((4, 4, 3), 7))
    with open(os.path.join(parent, "b", "1.png"), "wb") as f:
        f.write(b"not a png")
    seen, progress = messages()
    _, names = read_image_folders(parent, 4, progress=progress)
    assert names == ["a", "b"]
    skipped = [m for m in seen if m.startswith("Skipped")]
    assert len(skipped) == 1 and "d\ufffd" in skipped[0]
    "\n".join(seen).encode("utf-8")  # printable: no lone surrogates
    os.makedirs(os.path.join(parent, "test"))
    os.rename(os.path.join(parent, "a"), os.path.join(parent, "test", "a"))
    os.rename(os.path.join(parent, "b"), os.path.join(parent, "test", "b"))
    with pytest.raises(InputError, match="d\ufffd has test/ but no train/"):
        read_image_folders(parent, 4, progress=progress)


def test_bad_folders_are_refused_naming_them(tmp_path):
    with pytest.raises(ValueError, match=r"data\.image_dir does not exist"):
        read_image_folders(str(tmp_path / "nowhere"), 8)
    write_image(tmp_path / "one/a/x.png", np.zeros((4, 4, 3)))
    with pytest.raises(ValueError, match=r"needs a folder per class \(>= 2\)"):
        read_image_folders(str(tmp_path / "one"), 8)
    write_image(tmp_path / "two/a/x.png", np.zeros((4, 4, 3)))
    (tmp_path / "two/b").mkdir()
    (tmp_path / "two/b/readme.txt").write_text("x")
    with pytest.raises(ValueError, match=r"two/b holds no images"):
        read_image_folders(str(tmp_path / "two"), 8, progress=lambda m: None)
    (tmp_path / "two/b/bad.png").write_bytes(b"\x89PNG nonsense")
    with pytest.raises(ValueError, match=r"two/b holds no image that can be read"):
        read_image_folders(str(tmp_path / "two"), 8, progress=lambda m: None)
    for split, classes in (("train", "ab"), ("test", "ac")):
        for c in classes:
            write_image(tmp_path / f"three/{split}/{c}/x.png", np.zeros((4, 4, 3)))
    with pytest.raises(ValueError, match=r"class folders of .*three/test must be"):
        read_image_folders(str(tmp_path / "three"), 8, progress=lambda m: None)
    with pytest.raises(ValueError, match=r"class folders of .* must be \['a', 'z'\]"):
        read_image_folders(
            str(tmp_path / "three"), 8, ["a", "z"], progress=lambda m: None
        )


def test_archives_unpack_into_the_cache_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for split in ("train", "test"):
        for c in "ab":
            write_image(tmp_path / f"src/set/{split}/{c}/0.png", np.full((4, 4, 3), 9))
    archive = tmp_path / "set.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(tmp_path / "src/set", arcname="set")
    seen, progress = messages()
    folder = resolve(str(archive), progress=progress)
    assert folder.startswith(str(tmp_path / "cache" / "tfformer" / "archives"))
    assert os.path.isdir(os.path.join(folder, "train", "a"))
    assert sorted(os.listdir(tmp_path)) == ["cache", "set.tar.gz", "src"]
    assert resolve(str(archive), progress=progress) == folder
    assert sum("Unpacking" in m for m in seen) == 1
    splits, names = read_image_folders(str(archive), 4, progress=lambda m: None)
    assert names == ["a", "b"] and len(splits["test"][1]) == 2
    # An archive whose name is not UTF-8 unpacks too (its path was hashed
    # as UTF-8 text: a UnicodeEncodeError), and is named printably.
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/s\xe9t.tar.gz")
    os.link(archive, odd)
    seen.clear()
    assert os.path.isdir(os.path.join(resolve(odd, progress=progress), "train", "a"))
    assert "s\ufffdt" in seen[0]
    seen[0].encode("utf-8")
    # A corrupt archive is refused and leaves nothing in the cache.
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(archive.read_bytes()[:100])
    before = sorted(os.listdir(tmp_path / "cache/tfformer/archives"))
    with pytest.raises(ValueError, match="cannot be unpacked"):
        resolve(str(bad), progress=lambda m: None)
    assert sorted(os.listdir(tmp_path / "cache/tfformer/archives")) == before


def test_tfds_images_and_label_names_offline(tmp_path):
    with tfds.testing.mock_data(num_examples=6):
        splits, names = tfds_image_splits("mnist", size=8)
        with pytest.raises(ValueError, match="label_key must name a class-label"):
            tfds_image_splits("mnist", size=8, label_key="image")
        with pytest.raises(ValueError, match="image_key must name an image feature"):
            tfds_image_splits("mnist", size=8, image_key="pixels")
    assert names == [str(i) for i in range(10)]
    pixels, labels = splits["train"]
    # The same classes in another order renumber the labels.
    reordered = [str(9 - i) for i in range(10)]
    config = load_config(
        overrides=[
            "task=image_classification",
            "data.tfds_name=mnist",
            "data.image_size=8",
            f"data.class_names={','.join(reordered)}",
        ]
    )
    with tfds.testing.mock_data(num_examples=6):
        again, names = get_task("image_classification").read_images(config.data)
    assert names == reordered
    np.testing.assert_array_equal(again["train"][1], 9 - labels)
    config = load_config(
        overrides=[
            "task=image_classification",
            "data.tfds_name=mnist",
            "data.class_names=a,b",
        ]
    )
    with tfds.testing.mock_data(num_examples=6):
        with pytest.raises(ValueError, match=r"must be the classes of mnist"):
            get_task("image_classification").read_images(config.data)
    assert pixels.shape == (6, 8, 8, 3) and labels.dtype == np.int32
    # Grayscale: the channel is repeated.
    np.testing.assert_array_equal(pixels[..., 0], pixels[..., 2])
    config = load_config(
        overrides=[
            "task=image_classification",
            "data.tfds_name=mnist",
            f"data.tfds_data_dir={tmp_path}",
            "data.image_size=8",
            "data.holdout_fraction=0.25",
        ]
    )
    task = get_task("image_classification")
    with tfds.testing.mock_data(num_examples=12):
        raw = task.raw_splits(config.data)
    assert [len(raw[s][1]) for s in ("train", "validation", "test")] == [9, 3, 12]


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.image_size=30", r"multiple of the patch size"),
        ("data.mixup_alpha=-1", r"data.mixup_alpha must be >= 0"),
        ("data.tfds_name=mnist", r"exactly one"),
        ("data.holdout_fraction=0.6", r"holdout_fraction must be in"),
        ("model.preset=bert_tiny", r"needs a ViTBackbone preset"),
    ],
)
def test_config_errors_name_the_key(override, message):
    with pytest.raises(ValueError, match=message):
        load_config(
            overrides=["task=image_classification", "data.image_dir=x", override]
        )


def toy_examples(n=12, size=8, classes=3, augmentation=None):
    pixels = RNG.integers(1, 256, (n, size, size, 3)).astype(np.uint8)
    labels = np.arange(n, dtype=np.int32) % classes
    return ImageExamples.of(pixels, labels, classes, augmentation)


def batches(dataset, count):
    return [tuple(np.asarray(t) for t in b) for b in dataset.take(count)]


def stream(examples, **kw):
    return image_pipeline.training_stream(
        examples, batch_size=4, steps_per_epoch=3, seed=1, **kw
    )


def test_crops_and_flips_are_shifted_copies_with_zero_fill():
    examples = toy_examples(augmentation=Augmentation(4, True))
    pixels = examples.features["images"]
    seen_shift, seen_flip = set(), set()
    for images, labels, weights in batches(stream(examples), 6):
        np.testing.assert_array_equal(weights, 1.0)
        for image, label in zip(images, labels, strict=True):
            matches = []
            for source in pixels[np.flatnonzero(examples.labels == label.argmax())]:
                padded = np.pad(source, [(4, 4), (4, 4), (0, 0)])
                for dy in range(9):
                    for dx in range(9):
                        crop = padded[dy : dy + 8, dx : dx + 8]
                        for flip in (False, True):
                            if np.array_equal(crop[:, ::-1] if flip else crop, image):
                                matches.append((dy, dx, flip))
            assert matches, "an augmented image is no crop or flip of its class"
            seen_shift.add(matches[0][:2])
            seen_flip.add(matches[0][2])
    assert len(seen_shift) > 5 and seen_flip == {False, True}


def test_shards_split_each_epoch_between_them():
    examples = toy_examples(n=12)
    seen = []
    for index in range(3):
        shard = image_pipeline.training_stream(
            examples,
            batch_size=2,
            steps_per_epoch=2,
            seed=1,
            num_shards=3,
            shard_index=index,
        )
        for images, _, _ in batches(shard, 2):  # one epoch: 4 of 12 images
            for image in images:
                seen.append(
                    int(
                        np.flatnonzero(
                            (examples.features["images"] == image).all((1, 2, 3))
                        )[0]
                    )
                )
    assert sorted(seen) == list(range(12))


def test_the_stream_is_a_function_of_seed_epoch_and_step():
    examples = toy_examples(augmentation=Augmentation(4, True, 0.4, 1.0))
    full = batches(stream(examples), 7)
    for a, b in zip(full, batches(stream(examples), 7), strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    # Resumed at epoch 1, step 1 (= overall batch 4): the same batches.
    resumed = batches(stream(examples, first_epoch=1, skip_steps=1), 3)
    for a, b in zip(full[4:], resumed, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    other = image_pipeline.training_stream(
        examples, batch_size=4, steps_per_epoch=3, seed=2
    )
    assert not np.array_equal(full[0][0], batches(other, 1)[0][0])


def test_mixup_mixes_each_image_with_the_reversed_batch():
    plain = toy_examples()
    mixed = toy_examples(augmentation=Augmentation(mixup_alpha=0.4))
    mixed.features = plain.features
    lams = []
    for (x, y, _), (mx, my, _) in zip(
        batches(stream(plain), 4), batches(stream(mixed), 4), strict=True
    ):
        # The labels of row 0 say lam: lam on its class, 1 - lam on row -1's.
        lam = my[0][y[0].argmax()] if y[0].argmax() != y[-1].argmax() else None
        if lam is None:
            continue
        lams.append(lam)
        np.testing.assert_allclose(mx, lam * x + (1 - lam) * x[::-1], atol=1e-3)
        np.testing.assert_allclose(my, lam * y + (1 - lam) * y[::-1], atol=1e-6)
    assert lams and len(set(np.round(lams, 4))) == len(lams)


def test_cutmix_pastes_one_box_and_labels_by_its_area():
    plain = toy_examples(size=16)
    cut = toy_examples(size=16, augmentation=Augmentation(cutmix_alpha=1.0))
    cut.features = plain.features
    for (x, y, _), (cx, cy, _) in zip(
        batches(stream(plain), 5), batches(stream(cut), 5), strict=True
    ):
        from_partner = np.all(cx == x[::-1], axis=-1) & np.any(x != x[::-1], axis=-1)
        own = np.all(cx == x, axis=-1)
        assert np.all(own | from_partner)
        box = from_partner[0]
        rows, cols = np.flatnonzero(box.any(1)), np.flatnonzero(box.any(0))
        share = 0.0
        if rows.size:
            # One rectangle, the same in every image.
            assert box[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1].all()
            share = rows.size * cols.size / 16**2
        np.testing.assert_allclose(cy, (1 - share) * y + share * y[::-1], atol=1e-6)


def test_evaluation_keeps_order_and_marks_padding():
    examples = toy_examples(n=10, augmentation=Augmentation(4, True, 1.0, 1.0))
    out = batches(image_pipeline.evaluation_dataset(examples, batch_size=4), 5)
    assert len(out) == 3
    images = np.concatenate([b[0] for b in out])
    labels = np.concatenate([b[1] for b in out])
    weights = np.concatenate([b[2] for b in out])
    np.testing.assert_array_equal(weights, [1] * 10 + [0] * 2)
    np.testing.assert_array_equal(images[:10], examples.features["images"])
    np.testing.assert_array_equal(labels[:10].argmax(-1), examples.labels)
    assert images.dtype == np.float32
