import json
import os

import keras
import numpy as np
import pytest

from tfformer.training.callbacks import (
    AveragedWeights,
    BestModel,
    ResumableBackup,
    TimeBudget,
    TrainingReport,
    merge_epoch_logs,
    restore_backup,
)


def small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.1), "mse")
    return model


def fit(model, steps, callbacks, epochs=1):
    x = np.ones((steps * 4, 3), "float32")
    y = np.zeros((steps * 4, 2), "float32")
    return model.fit(x, y, batch_size=4, epochs=epochs, callbacks=callbacks, verbose=0)


def test_backup_every_n_steps_and_restore_with_optimizer_state(tmp_path):
    model = small_model()
    backup = ResumableBackup(str(tmp_path), every_steps=3)
    fit(model, steps=5, callbacks=[backup], epochs=2)
    with open(tmp_path / "state.json") as f:
        assert json.load(f)["global_step"] == 10
    restored = small_model()
    state = restore_backup(restored, str(tmp_path))
    assert state["global_step"] == 10
    assert int(restored.optimizer.iterations.numpy()) == 10
    for a, b in zip(model.weights, restored.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(
        model.optimizer.variables, restored.optimizer.variables, strict=True
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Nothing but the two files: no temporary leftovers.
    assert sorted(os.listdir(tmp_path)) == ["latest.weights.h5", "state.json"]


def test_a_failing_save_keeps_the_previous_backup(tmp_path, monkeypatch):
    model = small_model()
    backup = ResumableBackup(str(tmp_path), every_steps=2)
    fit(model, steps=2, callbacks=[backup])
    before = (tmp_path / "latest.weights.h5").read_bytes()

    def crash(*args, **kwargs):
        raise OSError("killed while writing")

    monkeypatch.setattr(model, "save_weights", crash)
    with pytest.raises(OSError, match="killed while writing"):
        fit(model, steps=2, callbacks=[backup])
    assert (tmp_path / "latest.weights.h5").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["latest.weights.h5", "state.json"]


@pytest.mark.integration
def test_weights_win_over_a_stale_state_file(tmp_path):
    model = small_model()
    fit(model, steps=4, callbacks=[ResumableBackup(str(tmp_path), every_steps=100)])
    (tmp_path / "state.json").write_text(json.dumps({"global_step": 2}))
    assert restore_backup(small_model(), str(tmp_path))["global_step"] == 4


def test_non_chief_workers_write_nothing(tmp_path):
    model = small_model()
    fit(
        model,
        steps=4,
        callbacks=[
            ResumableBackup(str(tmp_path / "backup"), every_steps=2, write=False),
            BestModel(str(tmp_path / "best.keras"), monitor="loss", write=False),
        ],
    )
    assert not os.listdir(tmp_path)


def test_best_model_saves_only_on_improvement(tmp_path):
    path = str(tmp_path / "best.keras")
    best = BestModel(path, monitor="val_loss", best=1.0)
    best.set_model(small_model())
    best.on_epoch_end(0, {"val_loss": 2.0})
    assert not os.path.exists(path)
    best.on_epoch_end(1, {"val_loss": 0.5})
    assert os.path.exists(path) and best.best == 0.5
    stamp = os.path.getmtime(path)
    best.on_epoch_end(2, {"val_loss": float("nan")})
    assert os.path.getmtime(path) == stamp and best.best == 0.5
    with pytest.raises(ValueError, match="mode must be"):
        BestModel(path, mode="up")


def test_report_divides_real_tokens_by_training_time(tmp_path):
    bodies = []
    report = TrainingReport(bodies.append)
    report.on_epoch_begin(0)
    # Keras merges the validation logs in; their tokens are not training's.
    logs = {"loss": 1.5, "real_tokens": 1000.0, "val_real_tokens": 300.0}
    report.on_epoch_end(0, logs)
    (written,) = bodies
    epoch = written["epochs"][0]
    assert epoch["real_tokens_per_second"] == pytest.approx(1000.0 / epoch["seconds"])
    assert written["summary"]["loss"] == 1.5
    # A model with several outputs names the count after its output.
    report = TrainingReport()
    report.on_epoch_begin(0)
    logs = {"masked_lm_real_tokens": 800.0, "val_masked_lm_real_tokens": 90.0}
    report.on_epoch_end(0, logs)
    assert report.report["tokens"] == 800.0


def test_the_two_parts_of_a_cut_epoch_merge_into_one_entry():
    """Hand-computed: 9 steps (300 real tokens, accuracy 0.5) then 3 steps
    (100 tokens, accuracy 0.9); the loss is a mean over steps, the accuracy
    over tokens, validation is the end's."""
    first = {
        "loss": 2.0,
        "accuracy": 0.5,
        "real_tokens": 300.0,
        "steps": 9,
        "seconds": 3.0,
        "val_loss": 9.0,
        "epoch": 1,
    }
    rest = {
        "loss": 1.0,
        "accuracy": 0.9,
        "real_tokens": 100.0,
        "steps": 3,
        "seconds": 1.0,
        "val_loss": 1.5,
        "epoch": 1,
    }
    merged = merge_epoch_logs(first, rest)
    assert merged["loss"] == pytest.approx((2.0 * 9 + 1.0 * 3) / 12)
    assert merged["accuracy"] == pytest.approx((0.5 * 300 + 0.9 * 100) / 400)
    assert (merged["real_tokens"], merged["steps"], merged["seconds"]) == (
        400.0,
        12,
        4.0,
    )
    assert merged["real_tokens_per_second"] == pytest.approx(100.0)
    assert (merged["val_loss"], merged["epoch"]) == (1.5, 1)
    # A classifier's accuracy has no token count: a mean over steps.
    first, rest = {"accuracy": 0.5, "steps": 1}, {"accuracy": 0.8, "steps": 3}
    assert merge_epoch_logs(first, rest)["accuracy"] == pytest.approx(0.725)


def test_time_budget_stops_after_the_batch_that_used_it_up():
    now = [0.0]

    def clock():
        now[0] += 10.0  # every call: 10 seconds later
        return now[0]

    model = small_model()
    budget = TimeBudget(minutes=0.5, clock=clock)  # 30 s: started at 10
    history = fit(model, steps=10, callbacks=[budget], epochs=3)
    # Batches end at 20, 30, 40 s: the third crosses 10 + 30.
    assert budget.exhausted
    assert int(model.optimizer.iterations.numpy()) == 3
    assert len(history.history["loss"]) == 1  # the cut epoch still ends
    unlimited = TimeBudget(minutes=0, clock=clock)
    fit(small_model(), steps=4, callbacks=[unlimited])
    assert not unlimited.exhausted


class RawWeights(keras.callbacks.Callback):
    """Records the (raw) kernel after every optimizer step."""

    def __init__(self):
        super().__init__()
        self.kernels = []

    def on_train_batch_end(self, batch, logs=None):
        self.kernels.append(np.array(self.model.layers[0].kernel.numpy()))


class StopAt(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            self.model.stop_training = True


def ema(kernels, momentum):
    # Keras: the first step copies the weights, then avg = m avg + (1 - m) w.
    average = kernels[0]
    for kernel in kernels[1:]:
        average = momentum * average + (1 - momentum) * kernel
    return average


@pytest.mark.parametrize("stop_at", [None, 6])
def test_averaged_weights_stay_in_the_model_after_training(stop_at):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5), "mse")
    raw = RawWeights()
    validated = []
    check = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: validated.append(
            (logs["val_loss"], model.layers[0].kernel.numpy().copy())
        )
    )
    extra = [StopAt(stop_at)] if stop_at else []
    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = np.ones((16, 2), "float32")
    model.fit(
        x,
        y,
        batch_size=4,
        epochs=3,
        validation_data=(x, y),
        callbacks=[raw, *extra, AveragedWeights(), check],
        verbose=0,
    )
    steps = stop_at or 12
    assert len(raw.kernels) == steps
    expected = ema(raw.kernels, 0.5)
    assert not np.allclose(expected, raw.kernels[-1], atol=1e-3)
    # Cut short (stop_at=6, in the second epoch) too: the average, not the
    # raw weights, is what training leaves behind.
    np.testing.assert_allclose(model.layers[0].kernel.numpy(), expected, rtol=1e-5)
    # Callbacks after AveragedWeights and validation see the average.
    val_loss, kernel = validated[-1]
    np.testing.assert_allclose(kernel, expected, rtol=1e-5)
    bias = model.layers[0].bias.numpy()
    np.testing.assert_allclose(
        val_loss, np.mean((x @ expected + bias - y) ** 2), rtol=1e-4
    )
