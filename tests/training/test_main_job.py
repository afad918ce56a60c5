"""The main job (`tfformer`, README command 1): training, evaluation, both
exports and the side-by-side translations, through the same entry point."""

import csv
import json
import os

import pytest

from tfformer.training.commands.main_job import main
from tfformer.training.commands.train import __file__ as CLI_FILE


# The README's first command as it is, on the default config (about 12
# minutes on 2 cores), so in the integration tier: the default suite tests
# what it is made of (training, both exports and their runtimes, the
# predictors) and its refusals below.
@pytest.mark.integration
def test_the_main_job_trains_evaluates_exports_and_compares(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--set", f"train.output_dir={out}", "--set", "train.verbose=2"]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(out, "main_job.json"), encoding="utf-8") as f:
        summary = json.load(f)

    # Everything it names exists.
    for name, path in summary["paths"].items():
        assert os.path.exists(path), name
        assert path in printed
    assert os.path.isfile(
        os.path.join(summary["paths"]["saved_model"], "saved_model.pb")
    )
    assert summary["paths"]["tflite"].endswith(".tflite")
    assert os.listdir(summary["paths"]["tensorboard_logs"])

    # The side-by-side table: three models for each of the 5 shown sentences.
    starts = [line.strip().split(" ")[0] for line in printed.splitlines()]
    for column in ("reference", "Keras", "SavedModel", "TFLite"):
        assert starts.count(column) == 5, column

    # The figures are the translations file's, recomputed here.
    with open(summary["paths"]["predictions"], encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == summary["comparison"]["examples"] == 200
    agree = sum(r["saved_model"] == r["keras"] for r in rows) / len(rows)
    lite = sum(r["tflite"] == r["keras"] for r in rows) / len(rows)
    assert summary["comparison"]["saved_model_equals_keras"] == pytest.approx(agree)
    assert summary["comparison"]["tflite_equals_keras"] == pytest.approx(lite)
    # The same greedy decoding in three runtimes, float32 throughout: the
    # same translations.
    assert agree == 1.0 and lite == 1.0

    test = summary["test"]
    assert test["sentences"] == 1000
    # The default task's floor: 95 % of the held-out sentences exactly right.
    assert test["exact_match"] >= 0.95, test
    assert "tok:char" in test["bleu_char_signature"]
    assert "nrefs:1" in test["bleu_cased_signature"]


def test_main_job_refuses_a_task_it_cannot_export_yet(capsys):
    configs = os.path.join(os.path.dirname(os.path.dirname(CLI_FILE)), "configs")
    gpt = os.path.join(configs, "shakespeare_gpt.json")
    assert main(["--config", gpt]) == 2
    err = capsys.readouterr().err
    assert "task 'causal_lm' has no exported predictions yet" in err


def test_main_job_refuses_bad_counts(capsys):
    assert main(["--compare", "0"]) == 2
    assert "--compare must be at least 1. Received: 0" in capsys.readouterr().err


def test_readme_command_one_runs_this_entry_point():
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    first = readme.split("```bash\n")[1].split("\n```")[0]
    assert first == "python3 -m pip install -e . && tfformer"
    with open(os.path.join(root, "setup.cfg"), encoding="utf-8") as f:
        assert "tfformer = tfformer.training.commands.main_job:main" in f.read()


def test_main_job_never_writes_over_what_is_in_its_directory(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["--set", f"train.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "holds no training run (notes.txt)" in err and "--start-over" in err
    assert os.listdir(tmp_path) == ["notes.txt"]
