"""Input errors and faults: tfformer raises `InputError` for input its caller
got wrong, and the commands print that as one line with exit 2, while any
other exception (a fault) keeps its traceback."""

import os
import re

import pytest

import tfformer
from tfformer.errors import InputError, InputTypeError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A builtin ValueError or TypeError that tfformer raises, returns to be
# raised, or subclasses is a fault of tfformer's own, marked so on its line;
# the device runtimes ship without tfformer and keep theirs.
FAULT_MARK = "# a fault, not input"
STANDALONE = os.path.join("export", "runtimes")


def test_input_errors_are_value_errors_and_type_errors_stay_type_errors():
    assert issubclass(InputError, ValueError)
    assert issubclass(InputTypeError, InputError)
    assert issubclass(InputTypeError, TypeError)
    assert not issubclass(InputError, TypeError)
    assert tfformer.InputError is InputError


def test_every_deliberate_raise_about_input_is_an_input_error():
    builtin = re.compile(r"\b(raise|return) (ValueError|TypeError)\(|\(ValueError\):")
    found = []
    for package in ("tfformer", "training", "export"):
        for folder, _, names in os.walk(os.path.join(ROOT, package)):
            if os.path.relpath(folder, ROOT).startswith(STANDALONE):
                continue
            for name in (n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                if os.path.relpath(path, ROOT) == os.path.join("tfformer", "errors.py"):
                    continue  # InputError itself
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        if builtin.search(line) and FAULT_MARK not in line:
                            found.append(f"{os.path.relpath(path, ROOT)}:{number}")
    assert not found, found


def command_cases():
    """(command's main, its argv, the attribute that the command calls inside
    its error boundary). Each attribute is replaced by a function that raises."""
    from tfformer.export import cli as export_cli
    from tfformer.training.commands import convert, evaluate, main_job, predict, train

    return {
        "tfformer-train": (train.main, [], "tfformer.training.trainer.train"),
        "tfformer-convert": (
            convert.main,
            ["--from", "hf", "--out", "run"],
            "tfformer.training.convert.convert",
        ),
        "tfformer-predict": (
            predict.main,
            ["--checkpoint", "run", "x"],
            "tfformer.training.commands.predict.parse_with_predictor",
        ),
        "tfformer-evaluate": (
            evaluate.main,
            ["--checkpoint", "run"],
            "tfformer.training.commands.evaluate.parse_with_predictor",
        ),
        "tfformer-export": (
            export_cli.main,
            ["--checkpoint", "run", "--format", "tflite", "--out", "x"],
            "tfformer.export.cli.parse_args",
        ),
        "tfformer": (
            main_job.main,
            [],
            "tfformer.training.commands.main_job.check_output_directory",
        ),
    }


COMMANDS = (
    "tfformer-train",
    "tfformer-convert",
    "tfformer-predict",
    "tfformer-evaluate",
    "tfformer-export",
    "tfformer",
)


def raising(error):
    def replacement(*args, **kwargs):
        raise error

    return replacement


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_prints_an_input_error_and_keeps_a_faults_traceback(
    command, monkeypatch, capsys
):
    main, argv, target = command_cases()[command]
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(module + "." + name, raising(InputError("epochs must be 1+")))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith("error: epochs must be 1+"), err
    assert "Traceback" not in err
    for fault in (ValueError("a fault"), TypeError("f() takes 2 arguments")):
        monkeypatch.setattr(module + "." + name, raising(fault))
        with pytest.raises(type(fault), match=re.escape(str(fault))):
            main(argv)
