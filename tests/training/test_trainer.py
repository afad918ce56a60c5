"""End-to-end `train(config)` on tiny models: files, metrics, resume, precisions."""

import json
import os
import pathlib
import re
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfformer
from tests.testing import tree_digest
from tfformer.training import pipeline
from tfformer.training.callbacks import restore_backup
from tfformer.training.commands import train as train_cli
from tfformer.training.config import load_config
from tfformer.training.trainer import build_dataset, build_model, compile_model, train

from .tiny import TINY_NUMBER_WORDS, TWO_BUCKETS

TINY = [
    *TINY_NUMBER_WORDS,
    "data.train_size=600",
    "data.validation_size=40",
    "data.test_size=40",
    "data.vocabulary_sample_size=300",
    "train.steps_per_epoch=4",
    "train.epochs=2",
    "train.warmup_steps=10",
    "train.verbose=0",
    "train.final_evaluation_examples=16",
    "train.checkpoint_every_steps=3",
    # Dropout and executions of 2 steps: a run resumed after step 3 (mid
    # execution) must still equal the finished one weight for weight, and
    # the executions test evaluates the finished run.
    "model.dropout=0.1",
    "train.steps_per_execution=2",
]


def tiny_config(tmp_path, *extra):
    return load_config(
        overrides=[*TINY, f"train.output_dir={tmp_path / 'run'}", *extra]
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished tiny run: (its config, its TrainResult)."""
    config = tiny_config(tmp_path_factory.mktemp("finished"))
    return config, train(config, progress=lambda *_: None)


def test_train_writes_a_complete_run_directory(finished):
    config, result = finished
    out = config.train.output_dir
    for name in (
        "config.json",
        "source_vocab.txt",
        "target_vocab.txt",
        "model.keras",
        "best.keras",
        "metrics.json",
        "training_curves.png",
        "backup/latest.weights.h5",
    ):
        assert os.path.isfile(os.path.join(out, name)), name
    assert os.listdir(os.path.join(out, "logs"))  # TensorBoard event files
    with open(os.path.join(out, "metrics.json")) as f:
        report = json.load(f)
    assert [e["epoch"] for e in report["epochs"]] == [1, 2]
    metrics = result.metrics
    assert metrics["global_step"] == 8
    for key in (
        "loss",
        "accuracy",
        "val_loss",
        "test_loss",
        "test_exact_match",
        "real_tokens_per_second",
        "train_seconds",
        "wall_seconds",
    ):
        assert key in metrics, key
    assert metrics["real_tokens_per_second"] > 0
    # Real tokens counted = the non-pad labels of the 4 batches of epoch 2.
    assert report["epochs"][1]["real_tokens"] > 4 * 16
    # The end-of-run exact match is the saved model's greedy translations of
    # the test split, against references as the tokenizer writes them.
    translator = tfformer.load(out).translator(search="greedy")
    pairs = result.data.raw["test"][:16]
    target = result.data.tokenizers["target"]
    references = [
        r.decode()
        for r in target.detokenize(target.tokenize([t for _, t in pairs])).numpy()
    ]
    hypotheses = translator.translate([s for s, _ in pairs])
    expected = np.mean([h == r for h, r in zip(hypotheses, references, strict=True)])
    assert metrics["test_exact_match"] == pytest.approx(expected)
    assert [h for _, _, h in metrics["test_examples"]] == hypotheses[:5]
    # The saved model reloads and predicts what the trained one predicts.
    reloaded = keras.saving.load_model(os.path.join(out, "model.keras"))
    batch = next(
        iter(
            pipeline.evaluation_dataset(
                result.data.examples["test"], batch_size=4, bucket_lengths=(16, 32)
            )
        )
    )[0]
    np.testing.assert_allclose(
        reloaded.predict(batch, verbose=0),
        result.model.predict(batch, verbose=0),
        atol=1e-5,
    )


def test_the_end_of_run_exact_match_scores_the_translations(finished, monkeypatch):
    """The tiny run's own exact match is 0 (8 steps), so it cannot show that
    the end-of-run score follows the translations: here the translator gives
    hand-made ones, the tokenizer's form of the reference for rows 0, 3, 6,
    ... and a wrong word or a spacing the tokenizer would not write for the
    others."""
    from tfformer.training.tasks import translation

    config, result = finished
    pairs = result.data.raw["test"][: config.train.final_evaluation_examples]
    target = result.data.tokenizers["target"]
    written = [
        r.decode()
        for r in target.detokenize(target.tokenize([t for _, t in pairs])).numpy()
    ]
    made = [
        w if i % 3 == 0 else (w + " ." if i % 3 == 1 else "falsch")
        for i, w in enumerate(written)
    ]
    asked = []

    def translate(self, sources):
        asked.append(list(sources))
        return made

    monkeypatch.setattr(translation.Translator, "translate", translate)
    scores = translation.TASK.final_evaluation(
        config, result.model, result.data, progress=lambda *_: None
    )
    assert asked == [[s for s, _ in pairs]]
    assert len(pairs) == 16
    assert scores["test_exact_match"] == pytest.approx(6 / 16)
    assert scores["test_examples"] == [
        [s, t, h] for (s, t), h in zip(pairs[:5], made[:5], strict=True)
    ]


@pytest.mark.integration
def test_rerunning_a_finished_run_resumes_instead_of_restarting(finished, tmp_path):
    original, first = finished
    shutil.copytree(original.train.output_dir, tmp_path / "run")
    config = tiny_config(tmp_path)
    messages = []
    again = train(config, progress=messages.append)
    assert any("Resuming from step 8" in m for m in messages)
    assert again.metrics["global_step"] == 8
    for a, b in zip(first.model.weights, again.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # Asking for more epochs continues from the backup.
    more = load_config(
        overrides=[*TINY, f"train.output_dir={tmp_path / 'run'}", "train.epochs=3"]
    )
    assert train(more, progress=lambda *_: None).metrics["global_step"] == 12


def truncated(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


@pytest.mark.parametrize(
    "damage, named",
    [
        (
            lambda run: truncated(run / "backup" / "latest.weights.h5", 1000),
            "latest.weights.h5 cannot be read",
        ),
        (
            lambda run: (run / "backup" / "latest.weights.h5").write_bytes(b"\x89HDF"),
            "latest.weights.h5 cannot be read",
        ),
        (
            lambda run: truncated(run / "backup" / "state.json", 12),
            "state.json is damaged",
        ),
        (
            lambda run: (run / "backup" / "state.json").write_text("[8]"),
            "state.json is damaged .no integer global_step",
        ),
        (
            lambda run: (run / "source_vocab.txt").write_bytes(b"[PAD]\n\xff\xfe\n"),
            "source_vocab.txt is not UTF-8 text",
        ),
    ],
    ids=[
        "weights-truncated",
        "weights-garbage",
        "state-truncated",
        "state-no-step",
        "vocabulary-not-utf8",
    ],
)
def test_a_damaged_backup_or_vocabulary_is_refused_and_the_run_kept(
    finished, tmp_path, capsys, damage, named
):
    """Resuming reads the backup and the vocabularies before writing: a damaged
    one is one line naming the file and the way out, exit 2, and every file
    of the run stays as it was (config.json is not rewritten either)."""
    original, _ = finished
    out = tmp_path / "run"
    shutil.copytree(original.train.output_dir, out)
    damage(out)
    before = tree_digest(out)
    config = tmp_path / "config.json"  # the run's own, as a user resumes it
    shutil.copy(out / "config.json", config)
    argv = ["--config", str(config), "--set", f"train.output_dir={out}"]
    assert train_cli.main([*argv, "--set", "train.epochs=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert re.search(named, err[0]), err[0]
    assert str(out) in err[0]
    if not named.startswith("source_vocab"):
        assert "--start-over" in err[0]
    assert tree_digest(out) == before


def test_another_run_is_refused_before_a_byte_is_written(finished, tmp_path, capsys):
    """Another model, other data settings (another vocabulary), another task,
    or files that are no run: refused naming the directory and the
    difference, and every file of what is there stays as it was."""
    original, _ = finished
    out = tmp_path / "run"
    shutil.copytree(original.train.output_dir, out)
    before = tree_digest(out)
    cases = {
        "model.hidden_dim: 32 there, 64 here": tiny_config(
            tmp_path, "model.hidden_dim=64"
        ),
        "data.vocabulary_size: 300 there, 200 here": tiny_config(
            tmp_path, "data.vocabulary_size=200"
        ),
        "task: 'translation' there, 'causal_lm' here": load_config(
            overrides=["task=causal_lm", f"train.output_dir={out}"]
        ),
    }
    for expected, config in cases.items():
        with pytest.raises(ValueError, match="holds another run") as refused:
            train(config, progress=lambda *_: None)
        assert expected in str(refused.value), refused.value
        assert "--start-over" in str(refused.value)
        assert tree_digest(out) == before, expected
    # The command: one line, exit 2, nothing written.
    overrides = [*TINY, f"train.output_dir={out}", "model.num_heads=4"]
    code = train_cli.main([a for o in overrides for a in ("--set", o)])
    err = capsys.readouterr().err
    assert code == 2 and "model.num_heads: 2 there, 4 here" in err
    assert "Traceback" not in err and tree_digest(out) == before
    # A directory of someone's files, and a run's files without its config.
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    shutil.copy(out / "source_vocab.txt", foreign)
    mine = tree_digest(foreign)
    with pytest.raises(ValueError, match=r"holds no training run \(notes.txt"):
        train(tiny_config(tmp_path, f"train.output_dir={foreign}"))
    assert tree_digest(foreign) == mine


def test_start_over_moves_the_old_run_aside_and_trains_from_scratch(finished, tmp_path):
    original, first = finished
    out = tmp_path / "run"
    shutil.copytree(original.train.output_dir, out)
    before = tree_digest(out)
    # The same run (it would resume), trained for one epoch from another seed.
    config = tiny_config(
        tmp_path, "train.seed=1", "train.epochs=1", "train.final_evaluation=false"
    )
    messages = []
    again = train(config, progress=messages.append, start_over=True)
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert tree_digest(aside) == before
    assert not any("Resuming" in m for m in messages)
    assert any(str(aside) in m for m in messages)
    assert again.metrics["global_step"] == 4
    assert not np.array_equal(first.model.weights[0], again.model.weights[0])
    with open(out / "config.json") as f:
        assert json.load(f)["train"]["seed"] == 1


def test_resuming_mid_epoch_equals_an_uninterrupted_run(finished, tmp_path):
    """A run killed after step 3 of a 4-step epoch, restarted from its backup,
    ends with the weights of a run that was never interrupted (the finished
    run, of the same settings): it continues at batch 4 of epoch 1 with the
    optimizer state (and schedule) and the dropout draws of step 3. The
    backup comes from executions of one step, so the resumed run's
    executions of two start with a partial one."""
    _, full = finished
    config = tiny_config(tmp_path)
    _write_backup_after(config, steps=3)
    messages = []
    resumed = train(config, progress=messages.append)
    assert any("Resuming from step 3: epoch 1, batch 4" in m for m in messages), (
        messages
    )
    assert resumed.metrics["global_step"] == 8
    for a, b in zip(full.model.weights, resumed.model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)


def _write_backup_after(config, steps):
    """The backup a run of `config` leaves after `steps` optimizer steps."""
    data = build_dataset(config, None, progress=lambda *_: None)
    keras.utils.set_random_seed(config.train.seed)
    parent = os.path.dirname(config.train.output_dir)
    one_step = tiny_config(pathlib.Path(parent), "train.steps_per_execution=1")
    model = compile_model(build_model(config, data), one_step)
    stream = pipeline.training_stream(
        data.examples["train"],
        batch_size=config.train.batch_size,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=config.train.steps_per_epoch,
        seed=config.data.seed,
    )
    model.fit(stream, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    backup = os.path.join(config.train.output_dir, "backup")
    os.makedirs(backup)
    # What the killed run had written before its first step: its config.
    with open(os.path.join(config.train.output_dir, "config.json"), "w") as f:
        json.dump(config.to_dict(), f)
    model.save_weights(os.path.join(backup, "latest.weights.h5"))
    with open(os.path.join(backup, "state.json"), "w") as f:
        json.dump({"global_step": steps}, f)


# bfloat16, this CPU's fast precision, in the integration tier; float16
# (with loss scaling) in the slow one. The model contracts check both
# policies' forward passes in the default suite (tests/testing.py).
@pytest.mark.parametrize(
    "precision",
    [
        pytest.param("mixed_bfloat16", marks=pytest.mark.integration),
        pytest.param("mixed_float16", marks=pytest.mark.slow),
    ],
)
def test_mixed_precision_trains_with_float32_logits_and_loss(tmp_path, precision):
    config = tiny_config(
        tmp_path,
        f"train.precision={precision}",
        "train.epochs=1",
        "train.final_evaluation=false",
    )
    result = train(config, progress=lambda *_: None)
    assert np.isfinite(result.metrics["loss"])
    assert result.model.dtype_policy.name == precision
    assert (
        result.model.backbone.decoder_blocks[0].compute_dtype == precision.split("_")[1]
    )
    if precision == "mixed_float16":
        assert isinstance(result.model.optimizer, keras.optimizers.LossScaleOptimizer)
    # The global policy is restored after the model is built.
    assert keras.config.dtype_policy().name == "float32"


def test_float16_compiles_with_loss_scaling_and_float32_logits(tmp_path):
    """What the slow float16 training run checks of the model, without
    training: loss scaling wraps the optimizer, float16 blocks, float32
    logits, and the global policy restored."""
    from tfformer.training.distribution.strategy import build_strategy
    from tfformer.training.trainer import build_compiled_model, prepare_inputs

    config = tiny_config(tmp_path, "train.precision=mixed_float16")
    quiet = lambda *_: None  # noqa: E731
    inputs = prepare_inputs(config, build_strategy("one_device"), quiet)
    model, _ = build_compiled_model(config, inputs)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.backbone.decoder_blocks[0].compute_dtype == "float16"
    stream = pipeline.training_stream(
        inputs.data.examples["train"],
        batch_size=2,
        bucket_lengths=inputs.data.bucket_lengths,
        steps_per_epoch=1,
        seed=0,
    )
    inputs, _ = next(iter(stream))
    assert keras.ops.convert_to_numpy(model(inputs)).dtype == np.float32
    assert keras.config.dtype_policy().name == "float32"


@pytest.mark.parametrize(
    "jit_compile",
    ["false", pytest.param("true", marks=pytest.mark.integration)],
    ids=["graph", "xla"],
)
def test_executions_of_several_steps_evaluate_each_example_once(
    finished, tmp_path, jit_compile
):
    """Executions of 2 steps, with dropout, train 2 epochs of 4 steps.
    Validation and test splits of 3 batches in executions of 2 steps: the
    figures equal a one-step-at-a-time evaluation of a single pass. (A
    repeated dataset read 4 batches a pass, the first one twice, and the
    second epoch's validation started mid-pass.) In a graph (the finished
    run's settings) by default; compiled with XLA (the trainer's XLA path,
    the recipes') in the integration tier."""
    if jit_compile == "false":
        _, result = finished
    else:
        config = tiny_config(
            tmp_path, "train.jit_compile=true", "train.final_evaluation=false"
        )
        result = train(config, progress=lambda *_: None)
    data, model = result.data, result.model
    assert model.jit_compile is (jit_compile == "true")
    assert result.metrics["global_step"] == 8
    batches = pipeline.evaluation_steps(data.examples["validation"].lengths, (32,), 16)
    assert batches == 3  # not a multiple of the execution's 2 steps
    once_a_step = tiny_config(
        tmp_path, "train.steps_per_execution=1", f"train.jit_compile={jit_compile}"
    )
    # Recompiling replaces the shared finished model's optimizer, not its
    # weights, which are all the tests after this one read of it.
    compile_model(model, once_a_step)
    for split, prefix in (("validation", "val_"), ("test", "test_")):
        once = pipeline.evaluation_dataset(
            data.examples[split], batch_size=16, bucket_lengths=(32,)
        )
        expected = model.evaluate(once, verbose=0, return_dict=True)
        for name in ("loss", "accuracy"):
            assert result.metrics[prefix + name] == pytest.approx(
                expected[name], rel=1e-5
            ), prefix + name


def test_whole_train_step_compiles_with_xla_for_every_bucket_shape(tmp_path):
    """The TPU requirement, checked on CPU: with the bucketed static shapes the
    complete train step (forward, loss, gradients, Adam update) lowers to XLA
    HLO in one piece, with no op left outside the compiled cluster."""
    config = tiny_config(tmp_path, TWO_BUCKETS)
    data = build_dataset(config, None, progress=lambda *_: None)
    model = compile_model(build_model(config, data), config)
    stream = pipeline.training_stream(
        data.examples["train"],
        batch_size=16,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=40,
        seed=0,
    )
    by_shape = {}
    for features, labels in stream.take(40):
        assert all(x.shape.is_fully_defined() for x in (*features.values(), labels))
        by_shape.setdefault(tuple(labels.shape), (features, labels))
        if len(by_shape) == 2:
            break
    assert set(by_shape) == {(16, 16), (16, 32)}
    model.optimizer.build(model.trainable_variables)
    step = tf.function(lambda x, y: model.train_step((x, y)), jit_compile=True)
    # Lowering is the check; running XLA steps is the executions test's
    # (its XLA case, in the integration tier).
    for features, labels in by_shape.values():
        hlo = step.experimental_get_compiler_ir(features, labels)(stage="hlo")
        assert "ENTRY" in hlo


def test_bad_presets_and_batch_sizes_are_refused_before_training(tmp_path):
    def run(*extra):
        train(tiny_config(tmp_path, *extra), progress=lambda *_: None)

    with pytest.raises(ValueError, match=r"model\.preset must be one of"):
        run("model.preset=transformer_huge")
    with pytest.raises(ValueError, match="needs a Seq2SeqBackbone preset"):
        run("model.preset=bert_tiny")
    with pytest.raises(
        ValueError, match=r"batch_size \(15\) must divide evenly over 2"
    ):
        run(
            "train.batch_size=15",
            "train.strategy=mirrored",
            "train.devices=/cpu:0,/cpu:1",
            "train.steps_per_execution=1",
        )
    assert not os.path.exists(tmp_path / "run" / "model.keras")


def test_learning_a_vocabulary_reports_progress(tmp_path):
    messages = []
    data = build_dataset(tiny_config(tmp_path), None, progress=messages.append)
    size = data.tokenizers["source"].vocabulary_size
    assert messages[0].startswith("Tokenizer (source): learning 300 WordPiece tokens")
    assert messages[1].startswith(f"Tokenizer (source): {size} tokens in ")
    assert messages[2].startswith("Tokenizer (target): learning")


@pytest.mark.integration
def test_token_budget_batches_with_weight_averaging_on_two_replicas(tmp_path):
    """One run for two features (each run costs the suite ~30 s).

    train.batch_tokens=512 over buckets (16, 32): 32 and 16 sequences per
    batch, split over two mirrored replicas; an epoch is every full batch.
    With weight averaging, the saved model holds the average and the backup
    the raw weights; the embedding options reach the saved model."""
    config = tiny_config(
        tmp_path,
        TWO_BUCKETS,
        "train.batch_tokens=512",
        "data.train_size=240",
        "train.steps_per_epoch=null",
        "train.epochs=1",
        "train.final_evaluation=false",
        "train.strategy=mirrored",
        "train.devices=/cpu:0,/cpu:1",
        "train.ema_momentum=0.9",
        "model.position=learned",
        "model.scale_embeddings=false",
        "model.tie_embeddings=none",
        # Executions of one step: tfformer refuses more on mirrored replicas
        # (Keras 3.15's multi-step loop fails there on TF 2.21).
        "train.steps_per_execution=1",
    )
    result = train(config, progress=lambda *_: None)
    lengths = result.data.examples["train"].lengths
    counts = np.bincount(pipeline.bucket_index(lengths, (16, 32)), minlength=2)
    expected = counts[0] // 32 + counts[1] // 16
    # Not what batches of train.batch_size=16 would give.
    assert expected != counts[0] // 16 + counts[1] // 16
    assert result.metrics["steps_per_epoch"] == expected
    assert result.metrics["global_step"] == expected
    # The model trained on the token batches: the real target tokens of the
    # epoch are those of the stream's first `expected` batches of (32, 16).
    stream = pipeline.training_stream(
        result.data.examples["train"],
        batch_size=(32, 16),
        bucket_lengths=(16, 32),
        steps_per_epoch=expected,
        seed=config.data.seed,
    )
    real = sum(int(np.sum(y.numpy() != 0)) for _, y in stream.take(expected))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"][0]["real_tokens"] == real

    out = config.train.output_dir
    saved = keras.saving.load_model(os.path.join(out, "model.keras"))
    embedding = saved.backbone.decoder_embedding
    assert embedding.position == "learned"
    assert embedding.scale_embeddings is False
    assert embedding.tie_weights is False
    # The backup holds the raw weights and, in the optimizer, their average
    # (taken before the average is swapped in at the end of the epoch).
    messages = []
    data = build_dataset(config, out, progress=messages.append)
    assert f"Tokenizer (target): reusing {out}/target_vocab.txt" in messages
    backup = compile_model(build_model(config, data), config)
    restore_backup(backup, os.path.join(out, "backup"))
    averages = backup.optimizer._model_variables_moving_average
    raw = [v.numpy() for v in backup.trainable_variables]
    kept = [v.numpy() for v in saved.trainable_variables]
    assert len(averages) == len(kept) == len(raw)
    for average, value in zip(averages, kept, strict=True):
        np.testing.assert_allclose(value, average.numpy(), atol=1e-6)
    assert any(not np.allclose(r, k, atol=1e-4) for r, k in zip(raw, kept, strict=True))
    for a, b in zip(result.model.trainable_variables, kept, strict=True):
        np.testing.assert_allclose(a.numpy(), b, atol=1e-6)


def test_bad_token_budgets_are_refused_before_training(tmp_path):
    def run(*extra):
        train(tiny_config(tmp_path, *extra), progress=lambda *_: None)

    # Two replicas need two rows of the 32-token bucket.
    with pytest.raises(ValueError, match=r"train.batch_tokens=40 .* at least 64"):
        run(
            TWO_BUCKETS,
            "train.batch_tokens=40",
            "train.strategy=mirrored",
            "train.devices=/cpu:0,/cpu:1",
            "train.steps_per_execution=1",
        )
    assert not os.path.exists(tmp_path / "run")
