"""Long runs behind the slow marker: SIGKILL and resume."""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from .tiny import TINY_NUMBER_WORDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KILLABLE = [
    *TINY_NUMBER_WORDS,
    "data.train_size=3000",
    "data.validation_size=64",
    "data.test_size=64",
    "data.vocabulary_sample_size=500",
    "model.dropout=0.0",
    "train.jit_compile=true",  # the default config's XLA step, killed and resumed
    "train.steps_per_epoch=40",
    "train.epochs=2",
    "train.warmup_steps=20",
    "train.checkpoint_every_steps=10",
    "train.verbose=2",
    "train.final_evaluation=false",
]


def command(output_dir):
    args = [sys.executable, "-m", "tfformer.training"]
    for item in [*KILLABLE, f"train.output_dir={output_dir}"]:
        args += ["--set", item]
    return args


def backup_step(output_dir):
    try:
        with open(os.path.join(output_dir, "backup", "state.json")) as f:
            return json.load(f)["global_step"]
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_sigkill_mid_epoch_then_the_same_command_resumes(tmp_path):
    out = str(tmp_path / "killed")
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(
        command(out),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while backup_step(out) < 20 and process.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert process.poll() is None, "training ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    backup = backup_step(out)
    # Mid-epoch: epoch 1 has 40 steps, the kill came after the step-20 backup.
    assert 20 <= backup < 40
    rerun = subprocess.run(
        command(out), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    # It restarts from the last backup: at most one interval (10 steps) lost.
    assert f"Resuming from step {backup}: epoch 1, batch {backup + 1}" in rerun.stdout
    with open(os.path.join(out, "metrics.json")) as f:
        assert json.load(f)["results"]["global_step"] == 80
    # And it ends exactly where a run that was never killed ends.
    clean = str(tmp_path / "clean")
    subprocess.run(
        command(clean), cwd=ROOT, env=env, check=True, capture_output=True, timeout=600
    )
    resumed_model = keras.saving.load_model(os.path.join(out, "model.keras"))
    clean_model = keras.saving.load_model(os.path.join(clean, "model.keras"))
    for a, b in zip(resumed_model.weights, clean_model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


# In the integration tier (CI): the one trained model whose exact match is
# far from 0 (471 s alone on the 2-core EPYC).
