"""The pieces of `train` that need no training: the resume plan, the
callback list and the end-of-run report."""

import types

import pytest

from tfformer.training.callbacks import (
    AveragedWeights,
    BestModel,
    ResumableBackup,
    TimeBudget,
    TrainingReport,
)
from tfformer.training.config import load_config
from tfformer.training.trainer import (
    Segment,
    build_callbacks,
    end_of_run_results,
    segment_plan,
)


@pytest.mark.parametrize(
    "global_step, steps, epochs, expected",
    [
        (0, 10, 3, [Segment(0, 3, 10, 0)]),
        # Killed in epoch 2 after its 4th batch: finish it, then the rest.
        (14, 10, 3, [Segment(1, 2, 6, 4), Segment(2, 3, 10, 0)]),
        # Killed in the last epoch: only its remainder.
        (27, 10, 3, [Segment(2, 3, 3, 7)]),
        # At an epoch boundary: no partial segment.
        (20, 10, 3, [Segment(2, 3, 10, 0)]),
        # Finished: nothing to do.
        (30, 10, 3, []),
        (45, 10, 3, []),
    ],
)
def test_segment_plan(global_step, steps, epochs, expected):
    plan = segment_plan(global_step, steps, epochs)
    assert plan == expected
    # The plan covers exactly the steps that are left.
    done = sum(s.steps + (s.end - s.begin - 1) * steps for s in plan)
    assert done == max(epochs * steps - global_step, 0)


def config(tmp_path, *overrides):
    return load_config(overrides=[f"train.output_dir={tmp_path}", *overrides])


def test_callbacks_in_order_and_averaging_between_backup_and_saving(tmp_path):
    plain = build_callbacks(config(tmp_path), write=False)
    kinds = [type(c) for c in plain.callbacks]
    assert kinds == [TimeBudget, ResumableBackup, BestModel, TrainingReport]
    averaged = build_callbacks(config(tmp_path, "train.ema_momentum=0.99"), write=True)
    kinds = [type(c).__name__ for c in averaged.callbacks]
    # The backup sees raw weights; everything that validates or saves, the average.
    assert kinds == [
        "TimeBudget",
        "ResumableBackup",
        "AveragedWeights",
        "BestModel",
        "TrainingReport",
        "TensorBoard",
    ]
    assert isinstance(averaged.callbacks[2], AveragedWeights)
    assert averaged.budget is averaged.callbacks[0]
    assert averaged.best is averaged.callbacks[3]


def test_callbacks_of_a_resumed_run_carry_its_best_and_totals(tmp_path):
    (tmp_path / "metrics.json").write_text(
        '{"epochs": [{"loss": 1}], "train_seconds": 12.5, "tokens": 400, "x": 1}'
    )
    run = build_callbacks(config(tmp_path), {"best_val_loss": 0.7}, write=False)
    assert run.best.best == 0.7
    assert run.report.report["train_seconds"] == 12.5
    assert run.report.report["tokens"] == 400
    fresh = build_callbacks(config(tmp_path), None, write=False)
    # A new run ignores a metrics.json it finds: it is not its own history.
    assert fresh.best.best is None
    assert fresh.report.report == {"epochs": [], "train_seconds": 0.0, "tokens": 0.0}


def test_time_budget_none_means_no_limit(tmp_path):
    run = build_callbacks(config(tmp_path), write=False)
    assert run.budget.seconds is None
    run = build_callbacks(
        config(tmp_path, "train.time_budget_minutes=1.5"), write=False
    )
    assert run.budget.seconds == 90.0


def test_end_of_run_results():
    strategy = types.SimpleNamespace(num_replicas_in_sync=2)
    results = end_of_run_results(
        {"val_loss": 1.5},
        {"loss": 1.25, "accuracy": 0.5, "real_tokens": 999.0},
        steps_per_epoch=10,
        global_step=37,
        strategy=strategy,
        precision="mixed_bfloat16",
    )
    assert results == {
        "val_loss": 1.5,
        "test_loss": 1.25,
        "test_accuracy": 0.5,
        "steps_per_epoch": 10,
        "global_step": 37,
        "replicas": 2,
        "strategy": "SimpleNamespace",
        "precision": "mixed_bfloat16",
    }
