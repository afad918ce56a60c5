"""A warmup + cosine schedule clocked by the time budget: it decays over the
time left after warmup, so it ends at the budget whatever the speed."""

import math

import keras
import numpy as np
import pytest

from tfformer.training.callbacks import TimeBudget
from tfformer.training.config import load_config
from tfformer.training.schedules import WarmupCosineSchedule


def numpy_cosine(peak, floor_fraction, progress):
    floor = peak * floor_fraction
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def test_budget_clock_decays_over_the_time_after_warmup():
    now = [0.0]
    schedule = WarmupCosineSchedule(1.0, 2, 100, 0.01, clock="budget")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse")
    budget = TimeBudget(1.0, clock=lambda: now[0], schedule=schedule)
    budget.set_model(model)
    seen = []
    # Warmup takes steps 0-1 (6 s each), then the 60-s budget runs out.
    for step, t in enumerate([0.0, 6.0, 12.0, 24.0, 36.0, 48.0, 60.0]):
        now[0] = t
        model.optimizer.iterations.assign(step)  # steps done before this batch
        budget.on_train_batch_begin(step)
        seen.append(float(schedule(step)))
    # Decay starts at 6 s (the last warmup batch's start), ends at 60 s.
    assert seen[0] == 0.5 and seen[1] == 1.0  # warmup, by steps
    for step, t in enumerate([0.0, 6.0, 12.0, 24.0, 36.0, 48.0, 60.0]):
        if step >= 2:
            progress = (t / 60 - 0.1) / 0.9
            np.testing.assert_allclose(
                seen[step], numpy_cosine(1.0, 0.01, progress), rtol=1e-5
            )
    assert seen[-1] == np.float32(0.01)


def test_a_resumed_run_continues_the_budget_and_the_decay():
    """The first invocation used 30 of 60 s, warmup ending at 6 s; the
    resumed one starts its clock at 0 again and goes on from 30 s."""
    schedule = WarmupCosineSchedule(1.0, 2, 100, 0.01, clock="budget")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse")
    now = [0.0]
    state = {"budget_used_seconds": 30.0, "budget_decay_start": 0.1}
    budget = TimeBudget(1.0, clock=lambda: now[0], schedule=schedule, state=state)
    budget.set_model(model)
    model.optimizer.iterations.assign(50)
    for t in (0.0, 15.0, 29.9):
        now[0] = t
        budget.on_train_batch_begin(0)
        progress = ((30.0 + t) / 60 - 0.1) / 0.9
        np.testing.assert_allclose(
            float(schedule(50)), numpy_cosine(1.0, 0.01, progress), rtol=1e-5
        )
    assert budget.state() == pytest.approx(
        {"budget_used_seconds": 59.9, "budget_decay_start": 0.1}
    )
    now[0] = 30.0
    budget.on_train_batch_end(0)
    assert budget.exhausted and model.stop_training
    # A steps-clocked schedule is left alone and adds nothing to the state.
    steps = TimeBudget(1.0, schedule=WarmupCosineSchedule(1.0, 2, 100))
    assert steps.state() == {}


def test_the_config_needs_a_budget_and_a_decaying_schedule():
    with pytest.raises(ValueError, match=r"schedule_clock='budget' .* set both"):
        load_config(
            overrides=[
                "train.schedule=cosine",
                "train.learning_rate=0.001",
                "train.schedule_clock=budget",
            ]
        )
    with pytest.raises(ValueError, match=r"train.schedule='paper'"):
        load_config(
            overrides=["train.schedule_clock=budget", "train.time_budget_minutes=5"]
        )


def test_training_on_the_budget_clock_saves_its_state(tmp_path, monkeypatch):
    """A tiny run under a 12-second budget: the optimizer's schedule is the
    one the budget drives, it decayed, and the backup holds what a resumed
    run needs. The budget reads a clock that advances one second each time
    it is read (two or three reads a step), so the run takes the same few
    steps however busy the machine is (with the wall clock, a loaded machine
    spent the 12 seconds tracing the first step)."""
    import functools
    import itertools
    import json

    from tfformer.training import trainer
    from tfformer.training.trainer import train

    ticks = itertools.count()
    monkeypatch.setattr(
        trainer,
        "TimeBudget",
        functools.partial(TimeBudget, clock=lambda: float(next(ticks))),
    )

    config = load_config(
        overrides=[
            "train.schedule=cosine",
            "train.learning_rate=0.001",
            "train.warmup_steps=2",
            "train.final_learning_rate_fraction=0.1",
            "train.schedule_clock=budget",
            "train.time_budget_minutes=0.2",
            "train.jit_compile=false",
            "train.epochs=1000",
            "train.steps_per_epoch=5",
            "train.batch_size=8",
            "train.verbose=0",
            "train.final_evaluation=false",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.num_heads=2",
            "model.intermediate_dim=16",
            "data.train_size=64",
            "data.validation_size=16",
            "data.test_size=16",
            # Windows of 32 tokens rather than the default config's 64:
            # cheaper steps, and one shape as there.
            "data.max_length=32",
            f"train.output_dir={tmp_path / 'run'}",
        ]
    )
    result = train(config, progress=lambda *_: None)
    with open(tmp_path / "run" / "backup" / "state.json") as f:
        state = json.load(f)
    assert 12.0 <= state["budget_used_seconds"] < 60.0
    assert 0.0 < state["budget_decay_start"] < 1.0
    assert state["global_step"] > 2  # past warmup
    # Below the peak: decayed by the budget (the steps-clocked cosine over
    # 5,000 steps would still be at 0.001 here).
    assert float(result.model.optimizer.learning_rate) < 0.00099
