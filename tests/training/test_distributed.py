"""tf.distribute: strategy choice, Mirrored on 2 logical CPUs, 2-worker MWMS."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfformer.training.config import load_config
from tfformer.training.distribution.strategy import build_strategy, is_chief
from tfformer.training.trainer import train

from .tiny import TINY_MODEL

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def test_strategy_names():
    assert isinstance(build_strategy("one_device"), tf.distribute.OneDeviceStrategy)
    # No GPUs and no TF_CONFIG here: auto is one device.
    assert isinstance(build_strategy("auto"), tf.distribute.OneDeviceStrategy)
    assert is_chief(build_strategy("auto"))
    with pytest.raises(ValueError, match="strategy must be one of"):
        build_strategy("horovod")


@pytest.mark.parametrize(
    "devices, message",
    [
        (["foo"], r"train.devices\[0\] must be a device name such as '/cpu:0'"),
        (["/cpu:0", "/cpu:7"], r"train.devices\[1\]: this process has no such device"),
        (["/job:worker/task:3/cpu:0"], "this process has no such device"),
        (["/gpu:0"], "has no such device; it has .*Received: '/gpu:0'"),
        (["/cpu:1", "/device:CPU:1"], "names one device twice: '/cpu:1' and"),
    ],
)
def test_mirrored_devices_must_exist_once_each(devices, message, tmp_path, capsys):
    """train.devices is checked before a strategy is made: TensorFlow put a
    replica on a missing CPU elsewhere without a word, and a malformed name,
    a missing GPU or a repeat failed inside TensorFlow with a traceback,
    the last two after the run directory was written."""
    from tfformer import InputError
    from tfformer.training.commands import train as train_cli

    with pytest.raises(InputError, match=message):
        build_strategy("mirrored", devices=devices)
    out = tmp_path / "run"
    argv = ["--set", "train.strategy=mirrored", "--set", f"train.output_dir={out}"]
    assert train_cli.main([*argv, "--set", f"train.devices={','.join(devices)}"]) == 2
    assert "train.devices" in capsys.readouterr().err
    assert not out.exists()
    # The two logical CPUs of the test session are both there.
    strategy = build_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2


def test_executions_of_several_steps_on_mirrored_replicas_are_refused(tmp_path, capsys):
    """Keras 3.15's multi-step loop fails under MirroredStrategy (measured:
    a "You must feed a value for placeholder tensor" error at the first
    execution, with or without XLA): refused before a file is written, and
    one replica or one step per execution still trains."""
    from tfformer.training.commands import train as train_cli
    from tfformer.training.config import load_config
    from tfformer.training.distribution.strategy import strategy_for

    out = tmp_path / "run"
    argv = [
        *("--set", "train.strategy=mirrored", "--set", "train.devices=/cpu:0,/cpu:1"),
        *("--set", "train.steps_per_execution=2", "--set", f"train.output_dir={out}"),
    ]
    assert train_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "set train.steps_per_execution=1" in err
    assert "Received: train.steps_per_execution=2 with 2 replicas" in err
    assert not out.exists()
    for devices, steps in (("/cpu:0", 2), ("/cpu:0,/cpu:1", 1)):
        train = load_config(
            overrides=[
                "train.strategy=mirrored",
                f"train.devices={devices}",
                f"train.steps_per_execution={steps}",
            ]
        ).train
        assert isinstance(strategy_for(train), tf.distribute.MirroredStrategy)


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="needs TF_CONFIG"):
        build_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        build_strategy("auto")


LM = [
    "task=causal_lm",
    "data.tokenizer=byte",
    "data.max_length=16",
    "model.preset=gpt_tiny",
    *TINY_MODEL,
    "model.dropout=0.0",
    "train.batch_size=8",
    "train.steps_per_epoch=3",
    "train.epochs=1",
    "train.warmup_steps=5",
    "train.verbose=0",
    "train.label_smoothing=0.0",
]


def test_mirrored_on_two_cpus_matches_one_device(tmp_path):
    """Mirrored with 2 replicas splits each batch of 8 in two. The windows have
    no padding, so each replica's token mean weighs the same and the loss (and
    averaged gradient) equal the one-device ones."""
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < 2:
        pytest.skip("needs the 2 logical CPUs that tests/conftest.py configures")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 60)
    results = {}
    for name, extra in (
        ("one", ["train.strategy=one_device"]),
        ("two", ["train.strategy=mirrored", "train.devices=/cpu:0,/cpu:1"]),
    ):
        config = load_config(
            overrides=[
                *LM,
                f"data.text_path={text}",
                f"train.output_dir={tmp_path / name}",
                "train.steps_per_epoch=1",
                "train.epsilon=1.0",
                *extra,
            ]
        )
        results[name] = train(config, progress=lambda *_: None)
    one, two = results["one"], results["two"]
    assert two.metrics["replicas"] == 2
    assert two.metrics["strategy"] == "MirroredStrategy"
    # The same loss on the same first batch: a replica that saw the wrong half,
    # or a loss scaled by the replica count, would change it.
    np.testing.assert_allclose(two.metrics["loss"], one.metrics["loss"], rtol=1e-5)
    np.testing.assert_allclose(
        two.metrics["test_loss"], one.metrics["test_loss"], rtol=1e-3
    )
    # With epsilon = 1 Adam's first update is ~lr * g / (|g| + 1), close to
    # linear in the gradient, so the weights tell whether the averaged
    # gradient is the one-device gradient (a sum over replicas would double it).
    for a, b in zip(one.model.weights, two.model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=5e-6)


@pytest.mark.integration
def test_a_second_mirrored_training_in_one_process_with_other_shapes(tmp_path):
    """With the first strategy's collective keys, a second mirrored
    training with other shapes aborted at its first all-reduce ("Shape
    mismatch in the collective instance 100")."""
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.skip("needs the 2 logical CPUs that tests/conftest.py configures")
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 60)
    for width in (32, 48):
        config = load_config(
            overrides=[
                *LM,
                f"data.text_path={text}",
                f"train.output_dir={tmp_path / str(width)}",
                "train.steps_per_epoch=1",
                f"model.hidden_dim={width}",
                "train.strategy=mirrored",
                "train.devices=/cpu:0,/cpu:1",
            ]
        )
        result = train(config, progress=lambda *_: None)
        assert result.metrics["global_step"] == 1
        assert result.metrics["replicas"] == 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_workers(tmp_path, overrides=None, start_over=False):
    """Starts 2 workers on 127.0.0.1 (with `start_over`, each trains with
    `train(..., start_over=True)`); returns their saved npz files. Each
    worker's output is kept in `tmp_path/worker<i>.log`."""
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            ),
            PYTHONPATH=ROOT,
            TFFORMER_TEST_START_OVER="1" if start_over else "",
            # The chief renames the old run 5 s late: the other worker gets
            # to where it would restore a backup while the old one is there.
            TFFORMER_TEST_SLOW_MOVE="5" if start_over else "",
        )
        command = [
            sys.executable,
            os.path.join(HERE, "distributed_worker.py"),
            str(tmp_path / "run"),
            str(tmp_path / f"worker{index}.npz"),
        ]
        if overrides is not None:
            command.append(json.dumps(overrides))
        processes.append(
            subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    for process in processes:
        try:
            out, _ = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise
        (tmp_path / f"worker{processes.index(process)}.log").write_text(out)
        assert process.returncode == 0, out[-3000:]
    return [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]


@pytest.mark.slow
def test_two_workers_train_on_their_shards_and_average_gradients(tmp_path):
    """Each worker reads its own shard (every other window), and one step
    applies the mean of the two workers' gradients: the weights equal one
    process training on batches that join the two shards' batches. A sum
    over workers would double the first Adam update (epsilon 1 keeps it
    nearly linear in the gradient), a worker reading the other's shard or
    the whole data would change the batches."""
    from tfformer.training import pipeline
    from tfformer.training.trainer import build_dataset, build_model, compile_model

    text = tmp_path / "text.txt"
    rng = np.random.default_rng(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question"]
    text.write_text(" ".join(rng.choice(words, 1500)))
    overrides = [
        *LM,
        f"data.text_path={text}",
        "train.epsilon=1.0",
        "train.steps_per_epoch=2",
        "train.final_evaluation=false",
    ]
    first, second = run_workers(tmp_path, overrides)
    assert int(first["replicas"]) == 2 and int(first["global_step"]) == 2
    for key in first.files:
        np.testing.assert_array_equal(first[key], second[key])

    config = load_config(overrides=[*overrides, f"train.output_dir={tmp_path / 'one'}"])
    data = build_dataset(config, None, progress=lambda *_: None)

    def shard(index):
        return pipeline.training_stream(
            data.examples["train"],
            batch_size=4,  # the global 8 over 2 replicas
            bucket_lengths=data.bucket_lengths,
            steps_per_epoch=2,
            seed=config.data.seed,
            num_shards=2,
            shard_index=index,
        )

    a, b = (next(iter(shard(i)))[0]["token_ids"].numpy() for i in (0, 1))
    assert not np.array_equal(a, b)  # the shards are different windows
    joined = tf.data.Dataset.zip(shard(0), shard(1)).map(
        lambda x, y: (
            {"token_ids": tf.concat([x[0]["token_ids"], y[0]["token_ids"]], 0)},
            tf.concat([x[1], y[1]], 0),
        )
    )
    import keras

    keras.utils.set_random_seed(config.train.seed)
    model = compile_model(build_model(config, data), config)
    model.fit(joined, epochs=1, steps_per_epoch=2, verbose=0)
    weights = [k for k in first.files if k.startswith("arr_")]
    assert len(weights) == len(model.weights)
    for key, expected in zip(
        sorted(weights, key=lambda k: int(k[4:])), model.weights, strict=True
    ):
        np.testing.assert_allclose(first[key], expected.numpy(), atol=5e-6)


@pytest.mark.slow
def test_two_workers_train_with_keras_fit_and_end_identical(tmp_path):
    """MultiWorkerMirroredStrategy, 2 processes on 127.0.0.1 via TF_CONFIG.

    Plain Keras 3 fails here (keras-team/keras#20585);
    training/distribution/multi_worker.py fixes it. Both workers must finish
    with bit-identical weights and report 2 replicas.
    """
    first, second = run_workers(tmp_path)
    assert int(first["replicas"]) == int(second["replicas"]) == 2
    assert int(first["global_step"]) == int(second["global_step"]) == 10
    weights = [k for k in first.files if k.startswith("arr_")]
    assert weights
    for key in weights:
        np.testing.assert_array_equal(first[key], second[key])
    # Logs are averaged over the workers, so both print the same loss.
    np.testing.assert_allclose(first["loss"], second["loss"], rtol=1e-6)
    # Only the chief wrote the model.
    assert os.path.isfile(tmp_path / "run" / "model.keras")


@pytest.mark.slow
def test_two_workers_started_over_move_the_run_aside_and_restore_nothing(tmp_path):
    """`--start-over` under MultiWorkerMirroredStrategy: the chief moves the
    finished run (with its backup) aside, and no worker resumes from that
    backup (a worker reading it before the chief's rename would start at
    step 10 while the other starts at 0). Both train the 10 steps again
    from scratch and end bit-identical to the first run."""
    first, _ = run_workers(tmp_path)
    assert os.path.isfile(tmp_path / "run" / "backup" / "state.json")
    again = run_workers(tmp_path, start_over=True)
    for index in range(2):
        log = (tmp_path / f"worker{index}.log").read_text()
        assert "Resuming" not in log, log[-2000:]
        assert int(again[index]["global_step"]) == 10
    aside = [p for p in os.listdir(tmp_path) if p.startswith("run.replaced-")]
    assert len(aside) == 1
    assert os.path.isfile(tmp_path / aside[0] / "model.keras")
    for key in (k for k in first.files if k.startswith("arr_")):
        np.testing.assert_array_equal(first[key], again[0][key])
        np.testing.assert_array_equal(again[0][key], again[1][key])
