"""Runs a portable runtime as an app developer would: `python <script> ...`
in the export directory, with nothing of the checkout on the path and
tfformer unimportable (a shipped file imports nothing of it)."""

import os
import shutil
import subprocess
import sys

# `python -c` with tfformer blocked, then the script as `__main__`.
RUN_BLOCKING_TFFORMER = (
    "import runpy, sys\n"
    "sys.modules['tfformer'] = None\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def run_shipped(directory, script, *args):
    """`python script *args` in `directory`; the `CompletedProcess` (text)."""
    return subprocess.run(
        [sys.executable, "-c", RUN_BLOCKING_TFFORMER, script, *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )


def copy_export(source, destination, leave_out=()):
    """A copy of the export directory `source` without `leave_out` (names)."""
    os.makedirs(destination)
    for name in sorted(os.listdir(source)):
        if name not in leave_out:
            shutil.copy(os.path.join(source, name), destination)
    return str(destination)


def assert_one_line_error(done, *words):
    """Exit status 2 and one error line holding `words`, no traceback (the
    interpreter may log an INFO line of its own before it)."""
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, done.stderr[-2000:]
    for word in words:
        assert word in errors[0], (word, errors[0])
