"""The portable runtimes an export ships next to its model: plain Python,
NumPy and `ai_edge_litert` only, each file named as it ships (`tokenizer.py`,
`translate.py`, `generate.py`, `classify.py`, `embed.py`,
`classify_image.py`, and `model_file.py`, which each runtime opens its model
with). An app developer reads them as the reference to port;
the tests run them as an app would. They import nothing of tfformer (a
shipped file finds its neighbours in its own directory).

This `__init__` is the exporters' side: `ship` copies runtimes next to an
exported model, `write_settings` writes the JSON file they read and
`record_digests` the `SHA256SUMS` that `model_file.py` checks models against.
"""

import json
import os

from tfformer.runs.files import atomic_copy, atomic_write_text

from .model_file import SUMS, file_digest, recorded_digests

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
RUNTIMES = (
    "tokenizer.py",
    "translate.py",
    "generate.py",
    "classify.py",
    "embed.py",
    "classify_image.py",
    "model_file.py",
)


def ship(out_dir, *names):
    """Copies the runtimes `names` ("tokenizer.py", ...) into `out_dir`, with
    `model_file.py`, which they open their model with."""
    for name in names:
        if name not in RUNTIMES:
            raise ValueError(f"name must be one of {RUNTIMES}. Received: {name!r}")
    for name in dict.fromkeys((*names, "model_file.py")):
        atomic_copy(os.path.join(DIRECTORY, name), os.path.join(out_dir, name))


def forget_digests(out_dir, names):
    """Removes the lines of the files `names` from `out_dir/SHA256SUMS`:
    done before those files are rewritten, so that an export that fails
    half-way leaves them unlisted rather than listed with an old digest."""
    path = os.path.join(out_dir, SUMS)
    if not os.path.isfile(path):
        return
    try:
        digests = recorded_digests(out_dir)
    except ValueError:
        digests = {}  # a damaged list is rewritten, not kept
    write_digests(out_dir, {k: v for k, v in digests.items() if k not in names})


def write_digests(out_dir, digests):
    """Writes {file name: digest} as `out_dir/SHA256SUMS`, sorted by name."""
    lines = [f"{digest}  {name}\n" for name, digest in sorted(digests.items())]
    atomic_write_text(os.path.join(out_dir, SUMS), "".join(lines))


def record_digests(out_dir, paths):
    """Records the SHA-256 of each file of `paths` (in `out_dir`) in
    `out_dir/SHA256SUMS`, keeping the other files' lines: `sha256sum`'s
    format, one line per file, sorted by name."""
    try:
        digests = recorded_digests(out_dir)
    except ValueError:
        digests = {}  # a damaged list is rewritten, not kept
    for path in paths:
        digests[os.path.basename(path)] = file_digest(path)
    write_digests(out_dir, digests)


def write_settings(out_dir, name, settings):
    """Writes `settings` as `out_dir/name` ("text.json", "image.json")."""
    atomic_write_text(os.path.join(out_dir, name), json.dumps(settings, indent=1))
