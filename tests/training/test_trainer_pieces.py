"""The pieces of `train` that need no training: the inputs, the run
directory, the resume plan, the callback list and the end-of-run report."""

import dataclasses
import json
import os
import types

import numpy as np
import pytest

from tfformer.training.callbacks import (
    AveragedWeights,
    BestModel,
    ResumableBackup,
    TimeBudget,
    TrainingReport,
)
from tfformer.training.config import load_config
from tfformer.training.distribution.strategy import build_strategy
from tfformer.training.trainer import (
    InputLayout,
    Segment,
    build_callbacks,
    end_of_run_results,
    open_run_directory,
    prepare_inputs,
    restore_last_backup,
    segment_plan,
    segments_left,
    train,
)

from .tiny import TINY_MODEL


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


# Number words in one bucket of 16 bytes: 200 training pairs, batches of 8.
BYTE_PAIRS = [
    *TINY_MODEL,
    "data.tokenizer=byte",
    "data.max_length=16",
    "data.bucket_lengths=[16]",
    "data.train_size=200",
    "data.validation_size=20",
    "data.test_size=20",
    "train.batch_size=8",
    "train.verbose=0",
]


def byte_pairs(tmp_path, *overrides):
    return load_config(
        overrides=[*BYTE_PAIRS, f"train.output_dir={tmp_path / 'run'}", *overrides]
    )


def quiet(*_):
    pass


def test_inputs_count_whole_executions_and_write_nothing(tmp_path):
    config = byte_pairs(tmp_path, "train.steps_per_epoch=null")
    config.train.steps_per_execution = 3
    inputs = prepare_inputs(config, build_strategy("one_device"), quiet)
    assert len(inputs.data.examples["train"]) == 200
    assert inputs.layout == InputLayout(workers=1, batch_size=8, batches_per_step=1)
    # 200 // 8 = 25 full batches, rounded down to whole executions of 3.
    assert inputs.steps_per_epoch == 24
    assert inputs.seed == config.data.seed
    assert not os.path.exists(tmp_path / "run")


def batches(dataset):
    return [
        np.concatenate([x.numpy().ravel() for x in (*features.values(), labels)])
        for features, labels, *_ in dataset
    ]


def test_a_segment_trains_on_the_batches_an_uninterrupted_run_would(tmp_path):
    config = byte_pairs(tmp_path, "train.steps_per_epoch=5")
    inputs = prepare_inputs(config, build_strategy("one_device"), quiet)
    uninterrupted = batches(inputs.training(Segment(0, 2, 5, 0)).take(10))
    # Killed after step 2 of epoch 0: the rest of epoch 0, which ends there,
    # then epoch 1.
    rest_of_epoch = batches(inputs.training(Segment(0, 1, 3, 2)))
    next_epoch = batches(inputs.training(Segment(1, 2, 5, 0)).take(5))
    assert len(rest_of_epoch) == 3
    for resumed, expected in zip(
        rest_of_epoch + next_epoch, uninterrupted[2:], strict=True
    ):
        np.testing.assert_array_equal(resumed, expected)
    # Epochs differ: the stream is not one epoch repeated.
    assert not np.array_equal(uninterrupted[0], uninterrupted[5])


def test_evaluation_steps_are_one_pass_in_whole_steps(tmp_path):
    config = byte_pairs(tmp_path, "train.steps_per_epoch=5")
    inputs = prepare_inputs(config, build_strategy("one_device"), quiet)
    # 20 examples in one bucket, batches of 8: ceil(20 / 8) = 3 batches.
    assert inputs.evaluation_steps("validation") == 3
    one_pass = inputs.evaluation("validation").take(3)
    labels = np.concatenate([y.numpy() for _, y in one_pass])
    # The last batch is padded with rows of padding labels: 20 real rows.
    assert labels.shape == (24, 16)
    assert np.count_nonzero(labels.any(axis=1)) == 20
    # A multi-worker step takes two batches (two local replicas): 2 steps.
    two_per_step = dataclasses.replace(
        inputs, layout=InputLayout(workers=2, batch_size=8, batches_per_step=2)
    )
    assert two_per_step.evaluation_steps("validation") == 2


def test_the_run_directory_gets_the_tokenizers_manifest_and_config(tmp_path):
    config = byte_pairs(tmp_path, "train.steps_per_epoch=5")
    inputs = prepare_inputs(config, build_strategy("one_device"), quiet)
    # Another worker of a multi-worker run: the folder, no files.
    run = open_run_directory(config, inputs.data, write=False)
    assert os.listdir(run.path) == []
    run = open_run_directory(config, inputs.data, write=True)
    assert sorted(os.listdir(run.path)) == [
        "config.json",
        "heldout.jsonl",
        "run.json",
        "source_tokenizer.json",
        "target_tokenizer.json",
    ]
    assert run.read_config() == json.loads(json.dumps(config.to_dict()))
    # The test split's first pairs, for the export's quality gate.
    with open(run.heldout_file(), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    test = inputs.data.raw["test"]
    assert rows == [{"source": s, "target": t} for s, t in test[:500]] and rows
    assert run.task == "translation"
    # A new run has no backup to restore.
    assert restore_last_backup(None, config, build_strategy("one_device")) is None


def test_segments_left_after_a_backup():
    messages = []
    assert segments_left(None, 10, 3, messages.append) == [Segment(0, 3, 10, 0)]
    assert messages == []
    plan = segments_left({"global_step": 14}, 10, 3, messages.append)
    assert plan == [Segment(1, 2, 6, 4), Segment(2, 3, 10, 0)]
    assert messages == ["Resuming from step 14: epoch 2, batch 5"]


@pytest.mark.parametrize(
    "overrides, refusal",
    [
        # One pass gives 200 // 8 = 25 steps, fewer than an execution.
        (
            ["train.steps_per_epoch=null", "train.steps_per_execution=26"],
            r"gives 25 steps per epoch, fewer than train\.steps_per_execution=26",
        ),
        # The cosine schedule's 2 x 5 steps leave no room after warmup.
        (
            [
                "train.steps_per_epoch=5",
                "train.epochs=2",
                "train.schedule=cosine",
                "train.learning_rate=0.001",
                "train.warmup_steps=10",
            ],
            r"train\.warmup_steps \(10\) must be below the cosine schedule's 10",
        ),
    ],
)
def test_a_config_that_cannot_train_leaves_the_run_directory_alone(
    tmp_path, overrides, refusal
):
    """A finished run re-run with a config that is refused keeps its files:
    the steps of an epoch, the schedule and the model are checked before
    the first file is written."""
    run = tmp_path / "run"
    run.mkdir()
    config = byte_pairs(tmp_path, *overrides)
    saved = json.dumps(config.to_dict()) + "\n"  # the same run: it may resume
    (run / "config.json").write_text(saved)
    with pytest.raises(ValueError, match=refusal):
        train(config, progress=quiet)
    assert os.listdir(run) == ["config.json"]
    assert (run / "config.json").read_text() == saved
