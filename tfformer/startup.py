"""Quiet start-up for tfformer's commands (TensorFlow-specific).

While TensorFlow's C++ runtime loads, it writes to the process's stderr
(file descriptor 2, below Python's `sys.stderr`): absl's "All log messages
before absl::InitializeLog() is called ..." and the CUDA stub's "Could not
find cuda drivers" (twice each), and the failed `cuInit` of a machine
without a GPU. A command of tfformer (`tfformer`, `tfformer-train`, ...)
imports TensorFlow with those lines sent to a temporary file, which is
dropped when the import succeeds and written back when it fails, and sets
`TF_CPP_MIN_LOG_LEVEL=1` (no C++ INFO lines; warnings and errors stay)
unless the environment sets it. Only those known lines are dropped (`NOISE`):
anything else written while TensorFlow loads (a GPU library that would not
load, a Python warning) is written back. `TFFORMER_VERBOSE=1` keeps
everything.

`import tfformer` from user code (a notebook, a script, another backend)
is left alone: it is not a command.
"""

import contextlib
import importlib
import itertools
import os
import sys
import tempfile

VERBOSE = "TFFORMER_VERBOSE"
# The console scripts (setup.cfg's entry points; test_startup checks them).
COMMANDS = frozenset(
    {
        "tfformer",
        "tfformer-demo",
        "tfformer-train",
        "tfformer-evaluate",
        "tfformer-predict",
        "tfformer-translate",
        "tfformer-export",
        "tfformer-convert",
    }
)
# What TensorFlow's start-up prints on a machine without a GPU, and nothing
# else: the held lines that contain none of these are written back.
NOISE = (
    "All log messages before absl::InitializeLog() is called",
    "cudart_stub.cc",
    "cuda_platform.cc",
    "cpu_feature_guard.cc",
    "To enable the following instructions:",
)


def is_command(argv=None, orig_argv=None):
    """Whether this process is one of tfformer's console commands (its
    script is `tfformer*`, or it runs `python -m tfformer...`)."""
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if argv and os.path.basename(argv[0]) in COMMANDS:
        return True
    for flag, module in itertools.pairwise(orig_argv):
        if flag == "-m":
            return module.split(".")[0] == "tfformer"
    return False


def help_only(argv=None):
    """Whether this process is a command asked for its help (`-h` or
    `--help` among its options, before any `--`): argparse prints it and
    exits, so nothing needs Keras or TensorFlow first."""
    argv = sys.argv if argv is None else argv
    options = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    return is_command(argv) and any(a in ("-h", "--help") for a in options)


@contextlib.contextmanager
def stderr_held(noise=NOISE):
    """Sends file descriptor 2 to a temporary file for the block, then
    writes back every held line that contains none of `noise`; on an
    exception, writes back everything before it propagates."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().splitlines(keepends=True)
            kept = [
                line
                for line in lines
                if failed or not any(n.encode() in line for n in noise)
            ]
            if kept:
                os.write(2, b"".join(kept))


def quiet_import(name, then=None):
    """Imports module `name` (and calls `then(module)`) with stderr held."""
    with stderr_held():
        module = importlib.import_module(name)
        if then is not None:
            then(module)
    return module


def quiet_tensorflow():
    """For a command: TensorFlow imported and its devices listed quietly
    (listing them is when `cuInit` fails). Nothing when TensorFlow is
    already imported, or when `TFFORMER_VERBOSE` is set to anything but 0."""
    if os.environ.get(VERBOSE, "0") not in ("", "0") or "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    quiet_import("tensorflow", lambda tf: tf.config.list_physical_devices("GPU"))
