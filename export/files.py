"""File writing shared by the exporters: whole files or nothing, with the
permissions a plain `open` or `mkdir` would give."""

import os
import tempfile


def current_umask():
    """The process umask (reading it means setting it, so it is put back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path, data):
    """Writes bytes to a temporary file next to `path`, then renames it."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp makes the file owner-only; an app bundler or server runs
        # as someone else. Use the usual umask-based mode instead.
        os.chmod(temporary, 0o666 & ~current_umask())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
