"""Write-then-rename helpers: a reader sees the old file or the new one, never half.

Files get the permissions a plain `open` or `mkdir` would give (mkstemp and
mkdtemp make them owner-only, and a server or app bundler often runs as
another user).
"""

import contextlib
import os
import shutil
import tempfile

from tfformer.errors import InputError


def printable(text):
    """`text` (a name, an argument, a line) as valid UTF-8 text: bytes that
    were not UTF-8, which Python keeps as lone surrogates, become U+FFFD."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # lone surrogates that are not escaped bytes
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return raw.decode("utf-8", "replace")


def current_umask():
    """The process umask (reading it means setting it, so it is put back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path`; renames it onto `path` on success.

    On an exception the temporary file (or directory) is removed and `path` is
    left as it was.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Keep the whole extension: Keras insists on ".weights.h5" and ".keras".
    extension = os.path.basename(path).partition(".")[2]
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.",
        suffix=f".{extension}" if extension else ".tmp",
        dir=directory,
    )
    os.close(fd)
    os.remove(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_bytes(path, data):
    """Writes `data` to `path` atomically, flushed to disk."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_text(path, text):
    """Writes `text` to `path` (UTF-8) atomically, flushed to disk."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_copy(source, path):
    """Copies the file `source` to `path` atomically."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)


def read_text(path):
    """The UTF-8 text of `path`; ValueError naming the file when it is not
    UTF-8 (a damaged or foreign vocabulary, tokenizer or config file)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text: {e}") from None


def read_lines(path):
    """The lines of `read_text(path)` split as text mode splits them (at
    "\n", "\r\n" and "\r"), without their ends; a final line end leaves a
    last empty string."""
    return read_text(path).replace("\r\n", "\n").replace("\r", "\n").split("\n")
