"""Reading sentences from local files: plain or gzip, strict UTF-8.

Every problem is reported with the file and line it was found at, and before
anything is written: a bad corpus never leaves half a vocabulary behind.
"""

import gzip
import os
import zlib

from tfformer.errors import InputError, InputTypeError


def read_lines(path, *, allow_empty_lines=False):
    """The lines of a UTF-8 text file (`.gz` is decompressed), without newlines.

    Raises:
        ValueError: the file is missing, empty, not valid gzip, holds bytes that
            are not UTF-8, or (unless `allow_empty_lines`) an empty line; the
            message names the file and the line.
    """
    if not isinstance(path, str | os.PathLike):
        raise InputTypeError(f"path must be a str. Received: path={path!r}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise InputError(f"File not found. Received: path={path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    lines = []
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise InputError(
                        f"{path}:{number}: bytes that are not UTF-8 at column "
                        f"{e.start + 1} ({raw[e.start : e.start + 4]!r})."
                    ) from None
                if not allow_empty_lines and not line.strip():
                    raise InputError(f"{path}:{number}: empty line.")
                lines.append(line)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(
            f"{path}: cannot be read as {opener.__module__}: {e}"
        ) from None
    if not lines:
        raise InputError(f"{path}: the file is empty.")
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
        raise InputError(
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


def read_labelled_tsv(path, class_names=None, header=False):
    """((text, class_id) or ((text_a, text_b), class_id) rows, class names)
    of a TSV file of "text<TAB>label" or "text_a<TAB>text_b<TAB>label"
    lines (every line alike). Labels are `class_names` (in that order; an
    unknown label is an error) or, without them, the sorted labels found.
    `header`: the first line names the columns (GLUE's "sentence<TAB>label")
    and is skipped; line numbers in errors still count it.

    Raises:
        ValueError: as `read_lines`; a line whose column count differs from
            the first line's, an empty text or label, an unknown label (the
            message names the file and line), or, without `header`, a first
            line whose label is "label" (a header read as data).
    """
    lines = read_lines(path)
    first = 1
    if header:
        if len(lines) < 2:
            raise InputError(f"{path}: a header line and no rows after it.")
        lines, first = lines[1:], 2
    elif lines[0].split("\t")[-1].strip().casefold() == "label":
        raise InputError(
            f"{path}:1: the label column reads 'label', which looks like a "
            f"header line. Set data.tsv_header=true to skip it. Received: "
            f"{lines[0][:80]!r}"
        )
    columns = len(lines[0].split("\t"))
    if columns not in (2, 3):
        raise InputError(
            f"{path}:{first}: expected 2 columns (text, label) or 3 (text_a, text_b, "
            f"label) separated by tabs. Received: {columns} column(s)"
        )
    rows = []
    for number, line in enumerate(lines, start=first):
        fields = line.split("\t")
        if len(fields) != columns:
            raise InputError(
                f"{path}:{number}: {len(fields)} column(s) where line {first} has "
                f"{columns}. Received: {line[:80]!r}"
            )
        if not all(f.strip() for f in fields):
            raise InputError(
                f"{path}:{number}: an empty column. Received: {line[:80]!r}"
            )
        rows.append(fields)
    names = list(class_names) if class_names else sorted({r[-1] for r in rows})
    if len(names) < 2:
        raise InputError(f"{path}: needs at least 2 classes. Received: {names}")
    ids = {name: i for i, name in enumerate(names)}
    examples = []
    for number, fields in enumerate(rows, start=first):
        if fields[-1] not in ids:
            raise InputError(
                f"{path}:{number}: unknown label {fields[-1]!r}; data.class_names "
                f"are {names}"
            )
        text = fields[0] if columns == 2 else (fields[0], fields[1])
        examples.append((text, ids[fields[-1]]))
    return examples, names


def read_text(path):
    """The whole text of a file (empty lines kept), as one string."""
    return "\n".join(read_lines(path, allow_empty_lines=True)) + "\n"
