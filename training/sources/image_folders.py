"""Labelled images the way users keep them: a folder per class.

    DIR/train/<class>/*.jpg|png|...     (or DIR/<class>/... without train/)
    DIR/test/<class>/...                (optional)

`DIR` may also be a `.tar.gz`, `.tgz`, `.tar` or `.zip` archive of that
layout; it is unpacked once into the cache (`$XDG_CACHE_HOME/tfformer/
archives`, by default `~/.cache/...`), never next to the archive.

Files whose names do not end in an image extension are ignored (and
counted); image files that do not decode are skipped with a count and the
first few names; a class folder left with no image is an error naming it.
"""

import hashlib
import os
import shutil
import tarfile
import tempfile
import zipfile

import numpy as np

from tfformer.errors import InputError
from tfformer.preprocessing.images import IMAGE_EXTENSIONS
from tfformer.runs.files import printable

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
# Names shown when files are skipped.
SHOWN = 5


def cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return os.path.join(base, "tfformer", "archives")


def unpacked(archive, progress=print):
    """The folder `archive` is unpacked into (unpacked on first use, into a
    temporary folder renamed into place, so an interrupted unpacking leaves
    nothing half-written behind). The folder's name carries the archive's
    size and modification time: a changed archive is unpacked again."""
    stat = os.stat(archive)
    # The path's bytes: a name that is not UTF-8 is hashed as it is.
    key = os.fsencode(os.path.abspath(archive)) + (
        f":{stat.st_size}:{stat.st_mtime_ns}".encode()
    )
    name = os.path.basename(archive)
    for suffix in ARCHIVE_SUFFIXES:
        name = name.removesuffix(suffix)
    target = os.path.join(
        cache_root(), f"{name}-{hashlib.sha256(key).hexdigest()[:12]}"
    )
    if os.path.isdir(target):
        return target
    os.makedirs(cache_root(), exist_ok=True)
    progress(f"Unpacking {printable(archive)} into {printable(target)}")
    tmp = tempfile.mkdtemp(dir=cache_root(), prefix=".unpacking-")
    try:
        if archive.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data")
        try:
            os.rename(tmp, target)
        except OSError:  # another process unpacked it meanwhile
            if not os.path.isdir(target):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def resolve(path, key="data.image_dir", progress=print):
    """The folder of `path` (a folder, or an archive unpacked into the cache).
    An archive holding one folder with the layout inside resolves to it."""
    if not os.path.exists(path):
        raise InputError(f"{key} does not exist. Received: {key}={path!r}")
    if os.path.isfile(path):
        if not path.endswith(ARCHIVE_SUFFIXES):
            raise InputError(
                f"{key} must be a folder or an archive ({', '.join(ARCHIVE_SUFFIXES)})"
                f". Received: {key}={path!r}"
            )
        try:
            folder = unpacked(path, progress)
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as e:
            raise InputError(f"{key}={path!r} cannot be unpacked: {e}") from None
        entries = [e for e in os.listdir(folder) if not _hidden(e)]
        if len(entries) == 1 and os.path.isdir(os.path.join(folder, entries[0])):
            inner = os.path.join(folder, entries[0])
            if not _class_folders(inner) or os.path.isdir(os.path.join(inner, "train")):
                folder = inner
        return folder
    return path


def _hidden(name):
    """Hidden entries and the resource folders macOS puts in zip files."""
    return name.startswith(".") or name == "__MACOSX"


def _class_folders(folder):
    return sorted(
        e
        for e in os.listdir(folder)
        if not _hidden(e) and os.path.isdir(os.path.join(folder, e))
    )


def list_split(folder, class_names=None):
    """(file paths, class ids, class names, ignored files) of one split
    folder holding a folder per class. Classes are the sorted folder names,
    or `class_names` (which must be exactly those folders)."""
    if not os.path.isdir(folder):
        raise InputError(f"{printable(folder)} is not a folder.")
    found = _class_folders(folder)
    if len(found) < 2:
        raise InputError(
            f"{printable(folder)} needs a folder per class (>= 2), each holding that "
            f"class's images. Received: {found or 'no folders'}"
        )
    if class_names is not None and sorted(class_names) != found:
        raise InputError(
            f"The class folders of {printable(folder)} must be {sorted(class_names)}. "
            f"Received: {found}"
        )
    for name in found:
        if printable(name) != name:
            raise InputError(
                f"Class folder {printable(os.path.join(folder, name))} has a name "
                "that is not UTF-8: class names are the run's and its exports' "
                "labels. Rename the folder."
            )
    names = list(class_names) if class_names is not None else found
    paths, labels, ignored = [], [], []
    for label, name in enumerate(names):
        directory = os.path.join(folder, name)
        count = 0
        for root, dirs, files in os.walk(directory):
            dirs[:] = sorted(d for d in dirs if not _hidden(d))
            for file in sorted(files):
                path = os.path.join(root, file)
                if file.lower().endswith(IMAGE_EXTENSIONS):
                    paths.append(path)
                    labels.append(label)
                    count += 1
                elif not file.startswith("."):
                    ignored.append(path)
        if not count:
            raise InputError(
                f"Class folder {printable(directory)} holds no images (files ending in "
                f"{', '.join(IMAGE_EXTENSIONS)})."
            )
    return paths, np.asarray(labels, np.int32), names, ignored


def read_images(paths, size, progress=print):
    """Decodes and resizes `paths` (see `tfformer.preprocessing.images`) in a
    parallel tf.data pipeline.

    Returns:
        (uint8 pixels `(n, size, size, 3)`, indices into `paths` of the
        images read, paths that did not decode).
    """
    import tensorflow as tf

    from tfformer.preprocessing.images import decode_pixels

    def load(index, path):
        return index, decode_pixels(tf.io.read_file(path), size)

    dataset = (
        # As bytes: a file name that is not UTF-8 is still a file to read.
        tf.data.Dataset.from_tensor_slices(
            (np.arange(len(paths)), [os.fsencode(p) for p in paths])
        )
        .map(load, num_parallel_calls=tf.data.AUTOTUNE)
        .ignore_errors()
        .batch(4096)
    )
    indices, pixels = [], []
    for batch_indices, batch_pixels in dataset.as_numpy_iterator():
        indices.append(batch_indices)
        pixels.append(batch_pixels)
        done = sum(len(i) for i in indices)
        if len(paths) > 4096:
            progress(f"  decoded {done:,}/{len(paths):,} images")
    indices = np.concatenate(indices) if indices else np.zeros(0, np.int64)
    pixels = (
        np.concatenate(pixels) if pixels else np.zeros((0, size, size, 3), np.uint8)
    )
    failed = sorted(set(range(len(paths))) - set(indices.tolist()))
    return pixels, indices, [paths[i] for i in failed]


def read_split(folder, size, class_names=None, progress=print):
    """(pixels, labels, class names, fingerprint) of one split folder: every
    image decoded
    and resized to `size`; files that do not decode are skipped and reported
    (count and the first few names); a class left without images is an
    error naming its folder."""
    paths, labels, names, ignored = list_split(folder, class_names)
    if ignored:
        progress(
            f"Ignored {len(ignored)} file(s) in {printable(folder)} that are not "
            f"images (by name): {', '.join(map(printable, ignored[:SHOWN]))}"
            + (" ..." if len(ignored) > SHOWN else "")
        )
    pixels, kept, failed = read_images(paths, size, progress)
    if failed:
        progress(
            f"Skipped {len(failed)} of {len(paths)} image file(s) in "
            f"{printable(folder)} that cannot be read or decoded: "
            f"{', '.join(map(printable, failed[:SHOWN]))}"
            + (" ..." if len(failed) > SHOWN else "")
        )
    labels = labels[kept]
    read = [os.path.relpath(paths[i], folder) for i in kept]
    counts = np.bincount(labels, minlength=len(names))
    for name, count in zip(names, counts, strict=True):
        if not count:
            raise InputError(
                f"Class folder {printable(os.path.join(folder, name))} holds no "
                "image that can be read and decoded."
            )
    return pixels, labels, names, fingerprint(read, labels)


def fingerprint(files, labels):
    """A digest of which files (relative paths) were read with which labels,
    in order: equal digests give equal seeded splits."""
    digest = hashlib.sha256()
    for file, label in zip(files, labels, strict=True):
        digest.update(f"{file}\t{label}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


def read_image_folders(path, size, class_names=None, progress=print):
    """{"train": (pixels, labels), "test": (pixels, labels) or None,
    "fingerprints": {"train": ..., "test": ... or None}} and the class names
    of a folder (or archive) in the layout above."""
    folder = resolve(path, progress=progress)
    train = os.path.join(folder, "train")
    test = os.path.join(folder, "test")
    if not os.path.isdir(train):
        if os.path.isdir(test):
            raise InputError(f"{printable(folder)} has test/ but no train/ folder.")
        train, test = folder, None
    elif not os.path.isdir(test):
        test = None
    pixels, labels, names, train_digest = read_split(train, size, class_names, progress)
    splits = {
        "train": (pixels, labels),
        "test": None,
        "fingerprints": {"train": train_digest, "test": None},
    }
    if test is not None:
        test_pixels, test_labels, _, digest = read_split(test, size, names, progress)
        splits["test"] = (test_pixels, test_labels)
        splits["fingerprints"]["test"] = digest
    return splits, names
