"""The distribution installs one import name, `tfformer`, and the model
library never imports the training program, the exporters or the run format."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wheel_installs_only_the_tfformer_namespace(tmp_path):
    """A regular wheel, as `pip install .` builds it: every module sits under
    `tfformer/`, and `training/` and `export/` are there as sub-packages."""
    # A copy, so the build leaves nothing in the checkout.
    source = tmp_path / "src"
    skip = shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".*cache*", "bench"
    )

    def ignore(directory, names):
        # The top-level runs/ holds training output; tfformer/runs is code.
        top = {"runs", "serving", "device"} if directory == ROOT else set()
        return skip(directory, names) | (top & set(names))

    shutil.copytree(ROOT, source, ignore=ignore)
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--no-deps",
            "--no-build-isolation", "-q", "-w", str(out), str(source),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = out.glob("tfformer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"tfformer"}
    for module in (
        "tfformer/training/trainer.py",
        "tfformer/training/tasks/translation.py",
        "tfformer/training/configs/number_words.json",
        "tfformer/export/cli.py",
        "tfformer/export/runtimes/tokenizer.py",
        "tfformer/export/runtimes/embed.py",
        "tfformer/training/convert/huggingface/__init__.py",
        "tfformer/training/convert/huggingface/llama.py",
        "tfformer/export/tasks/causal_lm/serving.py",
        "tfformer/export/runtimes/translate.py",
        "tfformer/runs/directory.py",
        "tfformer/preprocessing/byte_tokenizer.py",
        "tfformer/layers/multi_head_attention.py",
    ):
        assert module in names, module
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for command in (
        "tfformer-train",
        "tfformer-predict",
        "tfformer-export",
        "tfformer-convert",
    ):
        assert command in text
    assert "= training." not in text and "= export." not in text


def test_every_package_folder_is_installed():
    """setup.cfg lists packages one by one (training/ and export/ are
    installed under tfformer/): a new folder left out would be missing from
    every wheel while the editable install still finds it."""
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(config["options"]["packages"].split())
    found = set()
    for top, name in (("tfformer", "tfformer"), ("training", "tfformer.training"),
                      ("export", "tfformer.export")):  # fmt: skip
        for directory, _, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files:
                relative = os.path.relpath(directory, os.path.join(ROOT, top))
                parts = [] if relative == "." else relative.split(os.sep)
                found.add(".".join([name, *parts]))
    assert found == listed, (sorted(found - listed), sorted(listed - found))


def _run(code, cwd):
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True
    )


def test_generic_top_level_names_are_not_importable(tmp_path):
    # Outside the checkout (whose folders would be found through the current
    # directory), the installed package provides no `training` or `export`.
    # (This environment has the test tools besides; a fresh virtual
    # environment has no other package that could provide them either.)
    # Their installed names are imported by the compiled-run test below.
    for name in ("training", "export"):
        result = _run(f"import {name}", tmp_path)
        assert result.returncode != 0 and "No module named" in result.stderr, name


def test_the_model_library_alone_imports_nothing_else_and_loads_saved_models(
    tmp_path,
):
    # One fresh process: `import tfformer` alone (not tfformer.layers by
    # name) finds every registered layer of a saved model; then the model
    # library (with tfformer.decoding) has imported nothing of the training
    # program, the exporters, the run format or the preprocessing; and
    # `tfformer.load` is there without importing the training program.
    from tfformer.models import gpt_decoder

    path = str(tmp_path / "gpt.keras")
    gpt_decoder(20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16).save(
        path
    )
    code = (
        "import json, sys, tfformer, keras\n"
        f"keras.saving.load_model({path!r}, compile=False)\n"
        "import tfformer.decoding\n"
        "bad = [m for m in sys.modules if m.split('.')[:2] in "
        "(['tfformer', 'training'], ['tfformer', 'export'], ['tfformer', 'runs'], "
        "['tfformer', 'preprocessing'])]\n"
        "assert callable(tfformer.load)\n"
        "training = [m for m in sys.modules if m.startswith('tfformer.training')]\n"
        "print(json.dumps([bad, training]))\n"
    )
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    library, loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert library == [] and loaded == [], (library, loaded)


def test_training_and_export_never_import_each_other():
    import ast

    def imported(folder):
        names = set()
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for file in files:
                if file.endswith(".py"):
                    tree = ast.parse(open(os.path.join(directory, file)).read())
                    for node in ast.walk(tree):
                        if isinstance(node, ast.ImportFrom) and node.module:
                            names.add(node.module)
                        elif isinstance(node, ast.Import):
                            names.update(a.name for a in node.names)
        return names

    assert not [m for m in imported("training") if m.startswith("tfformer.export")]
    assert not [m for m in imported("export") if m.startswith("tfformer.training")]


def test_import_tfformer_training_is_enough_to_load_a_compiled_run(tmp_path):
    from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
    from tfformer.training.config import load_config
    from tfformer.training.tasks.base import PreparedData
    from tfformer.training.trainer import build_model, compile_model

    config = load_config(
        overrides=[
            "task=causal_lm",
            "data.text_path=x",
            "data.tokenizer=byte",
            "model.num_layers=1",
            "model.hidden_dim=8",
            "model.num_heads=2",
            "model.intermediate_dim=16",
        ]
    )
    data = PreparedData({"text": ByteTokenizer()}, {}, {}, (64,))
    path = str(tmp_path / "compiled.keras")
    compile_model(build_model(config, data), config).save(path)
    # Then, in the same process, the installed names of the training program
    # and the exporters import from outside the checkout.
    code = (
        f"import tfformer.training, keras; keras.saving.load_model({path!r})\n"
        "import tfformer.training.config, tfformer.export.cli\n"
    )
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
