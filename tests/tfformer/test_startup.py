"""Commands start without TensorFlow's C++ start-up lines; user code is not
touched, and a failed import still shows what was held back."""

import json
import os
import subprocess
import sys

import pytest

from tfformer import startup

NOISE = ("absl::InitializeLog", "cudart_stub", "cuInit", "cpu_feature_guard")


def command_stderr(**env):
    """stderr of `python -m tfformer.training.commands.train --print-config`."""
    done = subprocess.run(
        [sys.executable, "-m", "tfformer.training.commands.train", "--print-config"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert '"task": "translation"' in done.stdout
    return done.stderr


def test_a_command_prints_nothing_of_tensorflows_start_up(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    quiet = command_stderr(TFFORMER_VERBOSE="0")
    loud = command_stderr(TFFORMER_VERBOSE="1")
    assert not [line for line in quiet.splitlines() if any(n in line for n in NOISE)]
    # What the quiet run held back is there when asked for (this check fails
    # on a TensorFlow that prints nothing, which would make the first moot).
    assert any(n in loud for n in NOISE), loud


def test_is_command_knows_the_scripts_and_python_m():
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    with open(os.path.join(root, "setup.cfg"), encoding="utf-8") as f:
        scripts = f.read().split("console_scripts =")[1].split("\n\n")[0]
    names = {line.split("=")[0].strip() for line in scripts.strip().splitlines()}
    assert names == startup.COMMANDS
    assert startup.is_command(["/usr/local/bin/tfformer-train", "--set"], [])
    assert startup.is_command(["/usr/local/bin/tfformer"], [])
    assert not startup.is_command(["tfformer_finetune.py"], ["python3", "x.py"])
    assert startup.is_command(["-m"], ["python3", "-m", "tfformer.export.cli"])
    assert not startup.is_command(["-c"], ["python3", "-c", "import tfformer"])
    assert not startup.is_command(["/usr/bin/pytest"], ["python3", "-m", "pytest"])
    assert not startup.is_command(["notebook.py"], ["python3", "notebook.py"])


def test_help_only_is_a_command_asked_for_its_help():
    assert startup.help_only(["/usr/local/bin/tfformer-train", "--help"])
    assert startup.help_only(["tfformer-predict", "--checkpoint", "r", "-h"])
    assert not startup.help_only(["tfformer-train", "--set", "a=b"])
    # After "--", "-h" is an input (a prompt), not a request for help.
    assert not startup.help_only(["tfformer-predict", "--checkpoint", "r", "--", "-h"])
    assert not startup.help_only(["notebook.py", "--help"])


# Each console script's entry point, called as the script would be with
# --help, in a fresh process; it reports whether Keras or TensorFlow got
# imported (the demo is left out: it is a tour of the model library).
HELP = """
import json, sys
name, target = sys.argv[1:]
module, function = target.split(":")
sys.argv = [name, "--help"]
try:
    getattr(__import__(module, fromlist=[function]), function)()
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "imported": sorted(
    m for m in ("keras", "tensorflow") if m in sys.modules)}))
"""


def test_help_answers_without_importing_keras_or_tensorflow():
    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    with open(os.path.join(root, "setup.cfg"), encoding="utf-8") as f:
        scripts = f.read().split("console_scripts =")[1].split("\n\n")[0]
    entries = dict(
        (part.strip() for part in line.split("="))
        for line in scripts.strip().splitlines()
    )
    del entries["tfformer-demo"]
    for name, target in entries.items():
        done = subprocess.run(
            [sys.executable, "-c", HELP, name, target],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.stdout.startswith(f"usage: {name}"), (name, done.stderr)
        report = json.loads(done.stdout.splitlines()[-1])
        assert report == {"code": 0, "imported": []}, (name, report)


def write_module(directory, name, body):
    (directory / f"{name}.py").write_text(
        "import os\n"
        "os.write(2, b'I0000 cudart_stub.cc:31] native start-up line\\n')\n"
        "os.write(2, b'W0000 a real warning\\n')\n" + body
    )


def test_a_quiet_import_drops_its_stderr_and_gives_it_back_on_failure(
    tmp_path, monkeypatch, capfd
):
    monkeypatch.syspath_prepend(str(tmp_path))
    write_module(tmp_path, "loads_fine", "VALUE = 1\n")
    write_module(tmp_path, "fails", "raise ImportError('a broken library')\n")
    assert startup.quiet_import("loads_fine").VALUE == 1
    # The known start-up line is dropped, anything else is given back.
    assert capfd.readouterr().err == "W0000 a real warning\n"
    with pytest.raises(ImportError, match="a broken library"):
        startup.quiet_import("fails")
    err = capfd.readouterr().err
    assert "native start-up line" in err and "a real warning" in err
    # stderr is back: what follows is seen.
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
