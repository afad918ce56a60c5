"""SavedModel export for TF Serving, for any task with an exporter.

The task's exporter (`tfformer.export.tasks`) builds the signatures; this
module gives every task the same guarantees: the graph loads with
`tf.saved_model.load` in a process that imports only TensorFlow, in stock TF
Serving and in `saved_model_cli`, and versions are written atomically.

Layout (what TF Serving watches): `<out>/<version>/saved_model.pb`,
`variables/`, `assets/` (tokenizer files) and `assets.extra/` (`export.json`,
how it was made). A version is written to a hidden temporary directory next
to it and renamed into place, so a server never sees a half-written version.
"""

import json
import os
import shutil
import tempfile
import time

from tfformer.errors import InputError
from tfformer.export.tasks import get_exporter
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import current_umask


def next_version(out_dir):
    """1 + the largest numeric version under `out_dir` (1 if none)."""
    if not os.path.isdir(out_dir):
        return 1
    versions = [int(n) for n in os.listdir(out_dir) if n.isdigit()]
    return max(versions, default=0) + 1


def _check_version(version):
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InputError(
            f"version must be a positive int (TF Serving's version directory). "
            f"Received: version={version!r}"
        )


def export_saved_model(
    run_dir,
    out_dir,
    *,
    version=None,
    checkpoint="model.keras",
    progress=print,
    **options,
):
    """Exports a training run as `<out_dir>/<version>/`, atomically.

    Args:
        run_dir: a `tfformer-train` run directory of an exportable task.
        out_dir: the model base path TF Serving watches.
        version: an int; defaults to one more than the largest existing
            version. An existing version is never overwritten.
        checkpoint: "model.keras" or "best.keras".
        **options: the task exporter's settings (translation: `search`,
            `beam_width`, `length_penalty`, `max_length`, `jit_compile`).

    Returns:
        The path of the new version directory.

    Raises:
        ValueError: bad run directory, checkpoint, options or version, or the
            version exists already. Nothing is written in that case.
    """
    run = RunDirectory(run_dir)
    exporter = get_exporter(run.task)
    exporter.check_saved_model_options(**options)
    if version is not None:
        _check_version(version)
    task_run = exporter.read(run, checkpoint)
    version = next_version(out_dir) if version is None else version
    final = os.path.join(out_dir, str(version))
    if os.path.exists(final):
        raise InputError(
            f"{final} exists already; a served version is never overwritten. "
            "Pass another version or leave it out to take the next one."
        )
    os.makedirs(out_dir, exist_ok=True)
    # Hidden (TF Serving only loads numeric names) and on the same file
    # system, so the final rename is atomic.
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=out_dir)
    began = time.perf_counter()
    try:
        progress(f"Tracing and writing the SavedModel for version {version}...")
        settings = exporter.saved_model(task_run, staging, **options)
        extra = os.path.join(staging, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, "export.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "run": os.path.abspath(run.path),
                    "task": run.task,
                    "checkpoint": checkpoint,
                    **settings,
                },
                f,
                indent=2,
            )
        # mkdtemp makes the directory owner-only; TF Serving often runs as
        # another user. Give it the mode a plain mkdir would have.
        os.chmod(staging, 0o777 & ~current_umask())
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"Wrote {final} in {time.perf_counter() - began:.1f} s.")
    return final
