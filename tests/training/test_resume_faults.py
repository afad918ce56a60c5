"""Interrupted runs resume to the result of a run that was never interrupted.

The runs train a tiny translator with weight averaging in executions of 3
steps; each compares the final backup (raw weights, the optimizer's state and
moving averages) and the final, averaged, model with the uninterrupted run's.
"""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import keras
import numpy as np
import pytest

from tfformer.training import pipeline, trainer
from tfformer.training.callbacks import (
    AveragedWeights,
    ResumableBackup,
    TimeBudget,
    read_backup_state,
)
from tfformer.training.config import load_config
from tfformer.training.trainer import build_dataset

from .tiny import TINY_MODEL

# 2 epochs of 12 steps in executions of 3: with backups every 4 steps, at the
# first execution end at or past each multiple of 4 (6, 9, 12, 18, 21, 24).
RESUMABLE = [
    *TINY_MODEL,
    "data.tokenizer=byte",
    "data.max_length=16",
    "data.bucket_lengths=[16]",
    "data.train_size=600",
    "data.validation_size=16",
    "data.test_size=16",
    "model.dropout=0.0",
    "train.batch_size=16",
    "train.steps_per_epoch=12",
    "train.epochs=2",
    "train.warmup_steps=10",
    "train.ema_momentum=0.9",
    "train.steps_per_execution=3",
    "train.checkpoint_every_steps=4",
    "train.jit_compile=false",
    "train.verbose=0",
    "train.final_evaluation=false",
]


def resumable_config(out, *extra):
    return load_config(overrides=[*RESUMABLE, f"train.output_dir={out}", *extra])


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    result = trainer.train(resumable_config(out), progress=quiet)
    return str(out), result


def backup_arrays(out):
    """Every array of the backup's weights file: the model's raw weights, the
    optimizer's iterations, moments and moving averages, the metrics."""
    arrays = {}
    with h5py.File(os.path.join(out, "backup", "latest.weights.h5"), "r") as f:
        f.visititems(
            lambda name, item: (
                arrays.update({name: item[()]})
                if isinstance(item, h5py.Dataset)
                else None
            )
        )
    return arrays


def assert_same_run(out, result, reference):
    reference_out, reference_result = reference
    assert result.metrics["global_step"] == 24
    expected, actual = backup_arrays(reference_out), backup_arrays(out)
    assert sorted(actual) == sorted(expected)
    assert any(name.startswith("optimizer/") for name in expected)
    for name in expected:
        np.testing.assert_allclose(
            actual[name], expected[name], atol=1e-5, err_msg=name
        )
    # And the finished model holds the same averages.
    for a, b in zip(
        result.model.trainable_variables,
        reference_result.model.trainable_variables,
        strict=True,
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


@pytest.mark.integration
def test_weight_averaging_run_cut_by_the_time_budget_resumes_to_the_same_weights(
    tmp_path, monkeypatch, uninterrupted
):
    """The cut run (after step 9, mid-epoch 1) ends with the average in its
    model and the raw weights in its backup; the re-run finishes epoch 1 in
    one `fit` and trains epoch 2 in another, which must go on from the raw
    weights, not from their average."""
    now = [0.0]

    def clock():
        now[0] += 600.0  # ten minutes a call: the 30 run out after 3 executions
        return now[0]

    out = tmp_path / "cut"
    config = resumable_config(out, "train.time_budget_minutes=30")
    with monkeypatch.context() as patch:
        patch.setattr(trainer, "TimeBudget", functools.partial(TimeBudget, clock=clock))
        cut = trainer.train(config, progress=quiet)
    assert cut.metrics["global_step"] == 9
    assert read_backup_state(out / "backup")["global_step"] == 9
    messages = []
    resumed = trainer.train(config, progress=messages.append)
    assert "Resuming from step 9: epoch 1, batch 10" in messages
    assert_same_run(str(out), resumed, uninterrupted)
    # metrics.json has one entry per epoch: the cut epoch's two parts are
    # merged into what the uninterrupted run logged for it.
    cut_epochs = json.loads((out / "metrics.json").read_text())["epochs"]
    whole = os.path.join(uninterrupted[0], "metrics.json")
    with open(whole) as f:
        whole_epochs = json.load(f)["epochs"]
    assert [e["epoch"] for e in cut_epochs] == [1, 2]
    assert [e["steps"] for e in cut_epochs] == [12, 12]
    for merged, reference in zip(cut_epochs, whole_epochs, strict=True):
        assert merged["real_tokens"] == reference["real_tokens"]
        for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
            assert merged[key] == pytest.approx(reference[key], rel=1e-5), key


@pytest.mark.integration
def test_a_finished_weight_averaging_run_run_again_keeps_its_average(
    tmp_path, uninterrupted
):
    """Running a finished run's command again trains nothing and leaves its
    model.keras as it was, the average of the weights (it used to save the
    backup's raw weights instead: 9.6e-3 off in a user's number-words run)."""
    import keras

    out = tmp_path / "again"
    shutil.copytree(uninterrupted[0], out)
    before = keras.saving.load_model(out / "model.keras").trainable_variables
    messages = []
    again = trainer.train(resumable_config(out), progress=messages.append)
    assert "Resuming from step 24: epoch 3, batch 1" in messages
    after = keras.saving.load_model(out / "model.keras").trainable_variables
    for a, b, c in zip(before, after, again.model.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(a.numpy(), c.numpy())


def run_cut_every(out, budget_minutes, *extra):
    """Re-runs `out` with a budget of `budget_minutes` on a clock that moves
    ten minutes a read (one read per execution) until it finishes, as a user
    re-runs a budget-cut run; returns its cut steps and the last result."""
    cuts = []
    while not cuts or cuts[-1] < 24:
        now = [0.0]

        def clock(now=now):
            now[0] += 600.0
            return now[0]

        config = resumable_config(
            out, f"train.time_budget_minutes={budget_minutes}", *extra
        )
        original = trainer.TimeBudget
        trainer.TimeBudget = functools.partial(TimeBudget, clock=clock)
        try:
            result = trainer.train(config, progress=quiet)
        finally:
            trainer.TimeBudget = original
        cuts.append(result.metrics["global_step"])
        assert len(cuts) <= 8, cuts
    return cuts, result


@pytest.mark.slow
@pytest.mark.parametrize(
    "averaging", ["train.ema_momentum=0.9", "train.ema_momentum=null"]
)
def test_a_run_cut_at_every_kind_of_step_resumes_to_the_same_weights(
    tmp_path, averaging
):
    """Cut after every execution (3, before the first backup at 6; 12, an
    epoch's last step; mid-epoch steps), then every second one, the run ends
    bit for bit where the uncut run ends, with weight averaging and without.
    (A budget is read only at the end of a batch, so no cut falls inside
    validation or a backup's write.)"""
    reference_out = tmp_path / "uncut"
    reference = trainer.train(
        resumable_config(reference_out, averaging), progress=quiet
    )
    for budget, expected in (
        (10, [3, 6, 9, 12, 15, 18, 21, 24]),
        (20, [6, 12, 18, 24]),
    ):
        out = tmp_path / f"cut_{budget}"
        cuts, result = run_cut_every(out, budget, averaging)
        assert cuts == expected
        expected_arrays, actual = backup_arrays(reference_out), backup_arrays(out)
        assert sorted(actual) == sorted(expected_arrays)
        for name, array in expected_arrays.items():
            np.testing.assert_array_equal(actual[name], array, err_msg=name)
        for a, b in zip(result.model.weights, reference.model.weights, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


class Killed(Exception):
    """Stands for a SIGKILL: nothing after it runs."""


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A run that died right after the backup callback of the execution that
    ends at step 9 (mid-epoch 1; steps 7-9 hold the backup multiple 8)."""
    out = tmp_path_factory.mktemp("killed")
    original = ResumableBackup.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) >= 9:
            raise Killed("after step 9")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ResumableBackup, "on_train_batch_end", on_train_batch_end)
        with pytest.raises(Killed):
            trainer.train(resumable_config(out), progress=quiet)
    return out


# Slow: the time-budget test above resumes from the same step-9 backup with
# averaging and executions of 3 in the integration tier; this one differs in how
# the first run stopped (an exception after the backup, no model written).
@pytest.mark.slow
def test_a_kill_after_an_execution_past_a_backup_multiple_resumes_there(
    tmp_path, killed, uninterrupted
):
    """Executions of 3 steps never end at step 8: its backup is made at step
    9, the end of the execution that passed it. The re-run resumes at step 9,
    not at the start of the epoch, and ends as the uninterrupted run does."""
    out = tmp_path / "run"
    shutil.copytree(killed, out)
    assert read_backup_state(out / "backup")["global_step"] == 9
    messages = []
    resumed = trainer.train(resumable_config(out), progress=messages.append)
    assert "Resuming from step 9: epoch 1, batch 10" in messages
    assert_same_run(str(out), resumed, uninterrupted)


@pytest.mark.slow
def test_a_backup_resumes_exactly_with_another_steps_per_execution(
    tmp_path, killed, uninterrupted
):
    """Resumed in executions of 2, the 3 steps left of epoch 1 are one
    execution of 2 and one of 1, not 4 steps that run into epoch 2."""
    out = tmp_path / "run"
    shutil.copytree(killed, out)
    messages = []
    config = resumable_config(out, "train.steps_per_execution=2")
    resumed = trainer.train(config, progress=messages.append)
    assert "Resuming from step 9: epoch 1, batch 10" in messages
    assert_same_run(str(out), resumed, uninterrupted)


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def training_command(out, *extra):
    args = [sys.executable, "-m", "tfformer.training"]
    for item in [*RESUMABLE, f"train.output_dir={out}", *extra]:
        args += ["--set", item]
    return args


@pytest.mark.slow
def test_sigkill_mid_epoch_with_weight_averaging_and_executions(tmp_path):
    """The same, with a real SIGKILL of `python -m tfformer.training` at whatever
    backup it has reached in epoch 1 (of 120 steps, in executions of 3)."""
    longer = ["train.steps_per_epoch=120", "train.verbose=2"]
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    out = tmp_path / "killed"
    process = subprocess.Popen(
        training_command(out, *longer),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def backup_step():
        try:
            return read_backup_state(out / "backup")["global_step"]
        except (TypeError, ValueError, KeyError, OSError):
            return 0

    deadline = time.time() + 300
    while backup_step() < 9 and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "training ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    backup = backup_step()
    assert 9 <= backup < 120 and backup % 3 == 0, backup
    rerun = subprocess.run(
        training_command(out, *longer),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert f"Resuming from step {backup}: epoch 1, batch {backup + 1}" in rerun.stdout
    clean = tmp_path / "clean"
    subprocess.run(
        training_command(clean, *longer),
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    expected, actual = backup_arrays(str(clean)), backup_arrays(str(out))
    assert sorted(actual) == sorted(expected)
    assert int(actual["optimizer/vars/0"]) == 240  # the iterations
    for name in expected:
        np.testing.assert_allclose(
            actual[name], expected[name], atol=1e-5, err_msg=name
        )
    resumed_model = keras.saving.load_model(out / "model.keras")
    clean_model = keras.saving.load_model(clean / "model.keras")
    for a, b in zip(resumed_model.weights, clean_model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def test_backups_in_executions_come_at_the_first_step_past_each_multiple(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), "mse", steps_per_execution=3)
    backup = ResumableBackup(str(tmp_path), every_steps=4)
    saved = []
    original = backup.save

    def save(step):
        original(step)
        with open(tmp_path / "state.json") as f:
            saved.append((step, json.load(f)["global_step"]))
        assert int(model.optimizer.iterations.numpy()) == step

    backup.save = save
    x, y = np.ones((48, 3), "float32"), np.zeros((48, 2), "float32")
    model.fit(x, y, batch_size=4, epochs=2, callbacks=[backup], verbose=0)
    # Steps 4, 8, 16, 20: at the end of the executions that pass them; 12 and
    # 24 end epochs and executions (an epoch end backed up already is no
    # second write, hence the de-duplication).
    assert list(dict.fromkeys(saved)) == [(s, s) for s in (6, 9, 12, 18, 21, 24)]


def test_backups_in_executions_record_the_steps_of_a_short_last_one(tmp_path):
    """10 steps in executions of 4: Keras reports the last as step 12 of 10;
    multiples of 5 are backed up at steps 8, 10, 18 and 20."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), "mse", steps_per_execution=4)
    backup = ResumableBackup(str(tmp_path), every_steps=5)
    saved = []
    original = backup.save
    backup.save = lambda step: (saved.append(step), original(step))
    x, y = np.ones((40, 3), "float32"), np.zeros((40, 2), "float32")
    model.fit(x, y, batch_size=4, epochs=2, callbacks=[backup], verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 20
    assert list(dict.fromkeys(saved)) == [8, 10, 18, 20]


def test_an_epoch_must_be_whole_executions(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"train\.steps_per_epoch must be a multiple of "
        r"train\.steps_per_execution.*Received: train\.steps_per_epoch=4, "
        r"train\.steps_per_execution=3",
    ):
        resumable_config(tmp_path, "train.steps_per_epoch=4")
    # One pass over the data is rounded down to whole executions.
    config = resumable_config(tmp_path, "train.steps_per_epoch=null")
    data = build_dataset(config, None, progress=quiet)
    layout = trainer.InputLayout(workers=1, batch_size=16, batches_per_step=1)
    full = pipeline.batches_per_epoch(
        data.examples["train"].lengths, data.bucket_lengths, 16
    )
    assert full % 7
    config.train.steps_per_execution = 7
    assert trainer.steps_per_epoch(config, data, layout) == full - full % 7
    config.train.steps_per_execution = full + 1
    with pytest.raises(ValueError, match=f"gives {full} steps per epoch, fewer"):
        trainer.steps_per_epoch(config, data, layout)


class RawKernels(keras.callbacks.Callback):
    """Records the kernel that each optimizer step leaves (the raw weights)."""

    def __init__(self):
        super().__init__()
        self.kernels = []

    def on_train_batch_end(self, batch, logs=None):
        self.kernels.append(keras.ops.convert_to_numpy(self.model.layers[0].kernel))


def averaging_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8)])
    model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5), "mse")
    return model


def averaging_data():
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    return x, (x @ np.ones((3, 8), "float32")).astype("float32")


def test_a_fit_that_keeps_no_average_hands_the_next_fit_the_raw_weights():
    """Epochs 1-3 in one `fit` or in two (as a resumed run does) train the
    same raw weights, and both end with the same average in the model."""
    x, y = averaging_data()
    whole, whole_raw = averaging_model(), RawKernels()
    whole.fit(
        x,
        y,
        batch_size=4,
        epochs=3,
        callbacks=[whole_raw, AveragedWeights()],
        verbose=0,
    )
    split, split_raw = averaging_model(), RawKernels()
    averaged = AveragedWeights(keep_average=False)
    split.fit(x, y, batch_size=4, epochs=1, callbacks=[split_raw, averaged], verbose=0)
    averaged.keep_average = True
    split.fit(
        x,
        y,
        batch_size=4,
        initial_epoch=1,
        epochs=3,
        callbacks=[split_raw, averaged],
        verbose=0,
    )
    assert len(split_raw.kernels) == len(whole_raw.kernels) == 12
    for a, b in zip(split_raw.kernels, whole_raw.kernels, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        split.layers[0].kernel.numpy(), whole.layers[0].kernel.numpy()
    )
    assert not np.allclose(whole.layers[0].kernel.numpy(), whole_raw.kernels[-1])


def test_the_average_for_validation_leaves_the_raw_weights_bit_for_bit():
    """Putting the average in the model for validation and the epoch-end
    callbacks, and taking it out, must not round the raw weights: else a
    resumed run, which does it a different number of times, drifts from an
    uninterrupted one (Adam turns float rounding into 1e-4 differences)."""
    x, y = averaging_data()
    runs = []
    for callbacks in ([], [AveragedWeights()]):
        model, raw = averaging_model(), RawKernels()
        model.fit(
            x,
            y,
            batch_size=4,
            epochs=4,
            validation_data=(x, y),
            callbacks=[raw, *callbacks],
            verbose=0,
        )
        runs.append(raw.kernels)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_averaged_weights_refuses_an_optimizer_without_averages():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8)])
    model.compile(keras.optimizers.Adam(0.05), "mse")
    x, y = averaging_data()
    with pytest.raises(
        ValueError, match=r"use_ema=True\. Received: Adam\(use_ema=False\)"
    ):
        model.fit(x, y, callbacks=[AveragedWeights()], verbose=0)
