"""The portable runtimes as files (`export/runtimes/`): each imports nothing
of tfformer, and run as a command without a neighbour it needs, each says
which file is missing in one line and exits 2. (Each runtime's values are
tested against Keras with its task's export: test_tflite.py for
translate.py, test_causal_lm_export.py for generate.py, ...)"""

import ast
import json
import os
import shutil

import pytest

from tfformer.export import runtimes

from .shipped import assert_one_line_error, run_shipped

# What each command-line runtime reads beside the model before the model
# itself, with the least `text.json` that gets it that far.
NEIGHBOURS = {
    "translate.py": (["text.json", "tokenizer.py"], {}),
    "classify.py": (
        ["text.json", "tokenizer.py"],
        {"max_length": 8, "labels": ["a", "b"], "pairs": False},
    ),
    "embed.py": (["text.json", "tokenizer.py"], {"max_length": 8}),
    "classify_image.py": (["image.json"], {}),
}


def test_every_runtime_is_shipped_and_imports_nothing_of_tfformer():
    files = {n for n in os.listdir(runtimes.DIRECTORY) if n.endswith(".py")}
    assert files - {"__init__.py"} == set(runtimes.RUNTIMES)
    for name in runtimes.RUNTIMES:
        with open(os.path.join(runtimes.DIRECTORY, name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add((node.module or "").split(".")[0] or ".")
        assert imported <= {
            "argparse", "bisect", "importlib", "itertools", "json", "os", "re",
            "sys", "unicodedata", "numpy", "ai_edge_litert", "PIL",
        }, (name, imported)  # fmt: skip


def test_ship_copies_runtimes_and_refuses_other_names(tmp_path):
    runtimes.ship(str(tmp_path), "tokenizer.py", "translate.py")
    assert sorted(os.listdir(tmp_path)) == ["tokenizer.py", "translate.py"]
    with open(tmp_path / "translate.py", encoding="utf-8") as f:
        shipped = f.read()
    with open(os.path.join(runtimes.DIRECTORY, "translate.py"), encoding="utf-8") as f:
        assert shipped == f.read()
    with pytest.raises(ValueError, match=r"Received: 'cli\.py'"):
        runtimes.ship(str(tmp_path), "cli.py")


@pytest.mark.parametrize(
    "script, missing",
    [(s, m) for s, (names, _) in NEIGHBOURS.items() for m in names],
)
def test_a_missing_neighbour_is_named_in_one_line(tmp_path, script, missing):
    names, settings = NEIGHBOURS[script]
    shutil.copy(os.path.join(runtimes.DIRECTORY, script), tmp_path)
    # Not a model: every runtime reads its neighbours before the model.
    (tmp_path / "model.tflite").write_bytes(b"not a model")
    for name in names:
        if name == missing:
            continue
        if name.endswith(".json"):
            (tmp_path / name).write_text(json.dumps(settings), encoding="utf-8")
        else:
            shutil.copy(os.path.join(runtimes.DIRECTORY, name), tmp_path)
    done = run_shipped(str(tmp_path), script, "model.tflite", "input", "more")
    assert_one_line_error(done, missing, str(tmp_path))
