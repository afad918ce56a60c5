"""The portable runtimes an export ships next to its model: plain Python,
NumPy and `ai_edge_litert` only, each file named as it ships (`tokenizer.py`,
`translate.py`, `generate.py`, `classify.py`, `embed.py`,
`classify_image.py`). An app developer reads them as the reference to port;
the tests run them as an app would. They import nothing of tfformer (a
shipped file finds its neighbours in its own directory).

This `__init__` is the exporters' side: `ship` copies runtimes next to an
exported model and `write_settings` writes the JSON file they read.
"""

import json
import os

from tfformer.runs.files import atomic_copy, atomic_write_text

DIRECTORY = os.path.dirname(os.path.abspath(__file__))
RUNTIMES = (
    "tokenizer.py",
    "translate.py",
    "generate.py",
    "classify.py",
    "embed.py",
    "classify_image.py",
)


def ship(out_dir, *names):
    """Copies the runtimes `names` ("tokenizer.py", ...) into `out_dir`."""
    for name in names:
        if name not in RUNTIMES:
            raise ValueError(f"name must be one of {RUNTIMES}. Received: {name!r}")
        atomic_copy(os.path.join(DIRECTORY, name), os.path.join(out_dir, name))


def write_settings(out_dir, name, settings):
    """Writes `settings` as `out_dir/name` ("text.json", "image.json")."""
    atomic_write_text(os.path.join(out_dir, name), json.dumps(settings, indent=1))
