"""Reading sentences from local files: plain or gzip, strict UTF-8.

Every problem is reported with the file and line it was found at, and before
anything is written: a bad corpus never leaves half a vocabulary behind.
"""

import gzip
import os
import zlib


def read_lines(path, *, allow_empty_lines=False):
    """The lines of a UTF-8 text file (`.gz` is decompressed), without newlines.

    Raises:
        ValueError: the file is missing, empty, not valid gzip, holds bytes that
            are not UTF-8, or (unless `allow_empty_lines`) an empty line; the
            message names the file and the line.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str. Received: path={path!r}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"File not found. Received: path={path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    lines = []
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"{path}:{number}: bytes that are not UTF-8 at column "
                        f"{e.start + 1} ({raw[e.start : e.start + 4]!r})."
                    ) from None
                if not allow_empty_lines and not line.strip():
                    raise ValueError(f"{path}:{number}: empty line.")
                lines.append(line)
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(
            f"{path}: cannot be read as {opener.__module__}: {e}"
        ) from None
    if not lines:
        raise ValueError(f"{path}: the file is empty.")
    return lines


def read_parallel_text(source_path, target_path):
    """Aligned (source, target) sentence pairs from two files, one per line.

    Raises:
        ValueError: as `read_lines`, or when the files have different line
            counts (the message gives both counts).
    """
    sources = read_lines(source_path)
    targets = read_lines(target_path)
    if len(sources) != len(targets):
        raise ValueError(
            "Parallel files must have the same number of lines. Received: "
            f"{source_path!r} has {len(sources)}, {target_path!r} has {len(targets)}."
        )
    return list(zip(sources, targets, strict=True))


def read_labelled_text(class_paths):
    """(sentence, class_id) pairs; file i holds the sentences of class i."""
    examples = []
    for label, path in enumerate(class_paths):
        examples += [(line, label) for line in read_lines(path)]
    return examples


def read_text(path):
    """The whole text of a file (empty lines kept), as one string."""
    return "\n".join(read_lines(path, allow_empty_lines=True)) + "\n"
