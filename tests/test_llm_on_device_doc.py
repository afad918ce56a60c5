"""docs/llm_on_device.md runs as written: its example script makes the
tiny checkpoint, its commands convert it, chat with it and bundle it
(in-process, through the commands' `main`), and its Python block's
LiteRT-LM conversation prints the reply `tfformer-predict --chat` printed.
Skips only when litert-lm-api cannot be installed (CI installs it)."""

import contextlib
import io
import json
import os
import runpy
import shlex
import sys

import pytest

from tests.test_docs import ROOT, read, split_fences

PAGE = os.path.join(ROOT, "docs", "llm_on_device.md")


def commands():
    from tfformer.export.cli import main as export_main
    from tfformer.training.commands import convert, predict

    return {
        "tfformer-convert": convert.main,
        "tfformer-predict": predict.main,
        "tfformer-export": export_main,
    }


def run_line(line, mains):
    """Runs one command line of the page; returns what it printed."""
    argv = shlex.split(line)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if argv[:2] == ["python3", "docs/examples/tiny_llama3_chat.py"]:
            saved = sys.argv
            sys.argv = [os.path.join(ROOT, argv[1]), *argv[2:]]
            try:
                runpy.run_path(sys.argv[0], run_name="__main__")
            finally:
                sys.argv = saved
        else:
            assert mains[argv[0]](argv[1:]) == 0, line
    return out.getvalue()


@pytest.mark.integration
def test_the_walk_through_runs_and_both_runtimes_reply_alike(tmp_path, monkeypatch):
    pytest.importorskip("litert_lm", reason="litert-lm-api is not installed")
    blocks = split_fences(read(PAGE))[1]
    monkeypatch.chdir(tmp_path)
    (messages,) = [body for info, body in blocks if info == "json"]
    json.loads(messages)
    (tmp_path / "messages.json").write_text(messages)
    mains, printed = commands(), {}
    lines = [
        line.strip()
        for info, body in blocks
        if info == "bash"
        for line in body.split("\n")
        if line.strip()
    ]
    assert len(lines) == 4, lines
    for line in lines:
        printed[line.split()[0]] = run_line(line, mains)
    (python,) = [body for info, body in blocks if info == "python"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python, PAGE, "exec"), {})
    reply = printed["tfformer-predict"]
    assert reply.strip(), "tfformer-predict --chat printed nothing"
    assert out.getvalue() == reply
    assert os.path.isfile("device/tiny-chat/model.litertlm")
