"""The portable runtimes as files (`export/runtimes/`): each imports nothing
of tfformer, and run as a command without a neighbour it needs, or on a model
that is damaged or no model, each says which file in one line and exits 2.
(Each runtime's values are
tested against Keras with its task's export: test_tflite.py for
translate.py, test_causal_lm_export.py for generate.py, ...)"""

import ast
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from tfformer.export import runtimes

from .shipped import assert_one_line_error, run_shipped

# What each command-line runtime reads beside the model before the model
# itself, with the least settings file that gets it that far.
BYTES = {"source_length": 8, "tokenizer": "byte"}
NEIGHBOURS = {
    "translate.py": (["model_file.py", "text.json", "tokenizer.py"], BYTES),
    "classify.py": (
        ["model_file.py", "text.json", "tokenizer.py"],
        {**BYTES, "max_length": 8, "labels": ["a", "b"], "pairs": False},
    ),
    "embed.py": (
        ["model_file.py", "text.json", "tokenizer.py"],
        {**BYTES, "max_length": 8},
    ),
    "classify_image.py": (
        ["model_file.py", "image.json"],
        {"image_size": 8, "labels": ["a", "b"]},
    ),
    "generate.py": (["model_file.py"], {}),
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
            "argparse", "bisect", "hashlib", "importlib", "itertools", "json",
            "os", "re", "sys", "unicodedata", "numpy", "ai_edge_litert", "PIL",
        }, (name, imported)  # fmt: skip


def test_ship_copies_runtimes_and_refuses_other_names(tmp_path):
    runtimes.ship(str(tmp_path), "tokenizer.py", "translate.py")
    assert sorted(os.listdir(tmp_path)) == [
        "model_file.py",
        "tokenizer.py",
        "translate.py",
    ]
    with open(tmp_path / "translate.py", encoding="utf-8") as f:
        shipped = f.read()
    with open(os.path.join(runtimes.DIRECTORY, "translate.py"), encoding="utf-8") as f:
        assert shipped == f.read()
    with pytest.raises(ValueError, match=r"Received: 'cli\.py'"):
        runtimes.ship(str(tmp_path), "cli.py")


def with_neighbours(directory, script, leave_out=None):
    """`script` and what it reads, in `directory`, but `leave_out`."""
    names, settings = NEIGHBOURS[script]
    shutil.copy(os.path.join(runtimes.DIRECTORY, script), directory)
    for name in names:
        if name == leave_out:
            continue
        if name.endswith(".json"):
            (directory / name).write_text(json.dumps(settings), encoding="utf-8")
        else:
            shutil.copy(os.path.join(runtimes.DIRECTORY, name), directory)


@pytest.mark.parametrize(
    "script, missing",
    [
        (s, m)
        for s, (names, _) in NEIGHBOURS.items()
        for m in names
        # generate.py reads text.json and tokenizer.py only to read text.
        if s != "generate.py" or m == "model_file.py"
    ],
)
def test_a_missing_neighbour_is_named_in_one_line(tmp_path, script, missing):
    with_neighbours(tmp_path, script, leave_out=missing)
    # Not a model: every runtime reads its neighbours before the model.
    (tmp_path / "model.tflite").write_bytes(b"not a model")
    args = ["model.tflite", "in"] + ([] if script == "generate.py" else ["more"])
    done = run_shipped(str(tmp_path), script, *args)
    assert_one_line_error(done, missing, str(tmp_path))


@pytest.mark.parametrize("script", sorted(NEIGHBOURS))
def test_a_model_that_is_damaged_or_no_model_is_named_in_one_line(tmp_path, script):
    """A model whose SHA-256 is not the one SHA256SUMS records is refused
    before LiteRT reads it; one SHA256SUMS does not list is handed to LiteRT,
    and what LiteRT cannot read is named too. (The same for a real export,
    truncated and with a flipped byte: test_tflite.py.)"""
    with_neighbours(tmp_path, script)
    model = tmp_path / "model.tflite"
    model.write_bytes(b"TFL3 but cut short")
    args = ["model.tflite", "in"] + ([] if script == "generate.py" else ["more"])
    run = lambda: run_shipped(str(tmp_path), script, *args)  # noqa: E731
    assert_one_line_error(run(), "model.tflite", "not a TFLite model LiteRT can read")
    # SHA256SUMS names the model with another file's digest.
    other = hashlib.sha256(b"TFL3 as exported").hexdigest()
    (tmp_path / "SHA256SUMS").write_text(f"{other}  model.tflite\n")
    assert_one_line_error(run(), "model.tflite is damaged", "SHA256SUMS")
    # A damaged SHA256SUMS is named itself.
    (tmp_path / "SHA256SUMS").write_text("not a digest  model.tflite\n")
    assert_one_line_error(run(), "SHA256SUMS is damaged", "line 1")


@pytest.mark.parametrize("script", sorted(set(NEIGHBOURS) - {"generate.py"}))
def test_a_damaged_settings_file_is_named_in_one_line(tmp_path, script):
    """A settings file that is not JSON, or lacks any one setting, is named
    with the setting."""
    names, settings = NEIGHBOURS[script]
    with_neighbours(tmp_path, script)
    (tmp_path / "model.tflite").write_bytes(b"not read: the settings come first")
    name = next(n for n in names if n.endswith(".json"))
    damaged = {"": '{"source_length": 8,'}
    for key in settings:
        damaged[key] = json.dumps({k: v for k, v in settings.items() if k != key})
    for key, text in damaged.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        done = run_shipped(str(tmp_path), script, "model.tflite", "in", "more")
        assert_one_line_error(done, name, "damaged", repr(key) if key else "JSON")


def test_record_digests_writes_what_sha256sum_reads(tmp_path):
    """`record_digests` keeps the other files' lines and writes GNU
    `sha256sum`'s format, which `model_file` reads back."""
    (tmp_path / "model.tflite").write_bytes(b"first model")
    (tmp_path / "model_int8.tflite").write_bytes(b"second model")
    runtimes.record_digests(str(tmp_path), [str(tmp_path / "model.tflite")])
    runtimes.record_digests(str(tmp_path), [str(tmp_path / "model_int8.tflite")])
    expected = {
        name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        for name in ("model.tflite", "model_int8.tflite")
    }
    assert (tmp_path / "SHA256SUMS").read_text() == "".join(
        f"{expected[n]}  {n}\n" for n in sorted(expected)
    )
    from tfformer.export.runtimes import model_file

    assert model_file.recorded_digests(str(tmp_path)) == expected
    # What GNU sha256sum writes, in text and binary mode, reads the same.
    for mode in ("--text", "--binary"):
        listed = subprocess.run(
            ["sha256sum", mode, *sorted(expected)],
            cwd=tmp_path,
            capture_output=True,
            check=True,
        ).stdout
        (tmp_path / "SHA256SUMS").write_bytes(listed)
        assert model_file.recorded_digests(str(tmp_path)) == expected, mode
    # Before rewriting a model, an export forgets its line and keeps the others.
    runtimes.forget_digests(str(tmp_path), ["model_int8.tflite"])
    assert model_file.recorded_digests(str(tmp_path)) == {
        "model.tflite": expected["model.tflite"]
    }
    model_file.check_model(str(tmp_path / "model.tflite"))
    (tmp_path / "model.tflite").write_bytes(b"first modem")
    with pytest.raises(ValueError, match=r"model\.tflite is damaged"):
        model_file.check_model(str(tmp_path / "model.tflite"))
