"""`build_model` and `train(config)`: from a config to a trained, saved model."""

import contextlib
import dataclasses
import json
import os
import time

import keras

from tfformer.models import PRESETS, bert_classifier, from_preset
from training import pipeline
from training.atomic import atomic_write_text
from training.callbacks import (
    AveragedWeights,
    BestModel,
    ResumableBackup,
    TimeBudget,
    TrainingReport,
    restore_backup,
    save_target,
)
from training.config import Config
from training.data import build_dataset, save_tokenizers
from training.evaluation import exact_match
from training.losses import MaskedSparseCategoricalCrossentropy
from training.metrics import MaskedAccuracy, RealTokens
from training.multi_worker import multi_worker_fit
from training.plots import plot_training_curves
from training.schedule import TransformerSchedule
from training.strategy import build_strategy, is_chief, is_multi_worker


def model_sizes(model_config):
    """The preset's keyword arguments with the config's overrides applied."""
    if model_config.preset not in PRESETS:
        raise ValueError(
            f"model.preset must be one of {sorted(PRESETS)}. "
            f"Received: model.preset={model_config.preset!r}"
        )
    sizes = dict(PRESETS[model_config.preset][1])
    for name in ("hidden_dim", "num_heads", "intermediate_dim"):
        if getattr(model_config, name):
            sizes[name] = getattr(model_config, name)
    if model_config.dropout >= 0:
        sizes["dropout"] = model_config.dropout
    if model_config.num_layers:
        if "num_encoder_layers" in sizes:
            sizes["num_encoder_layers"] = model_config.num_layers
            sizes["num_decoder_layers"] = model_config.num_layers
        else:
            sizes["num_layers"] = model_config.num_layers
    return sizes


def build_model(config, data):
    """The uncompiled Keras model for `config.model`, sized to `data`."""
    m, d = config.model, config.data
    sizes = model_sizes(m)
    expected = {
        "seq2seq": "transformer_seq2seq",
        "gpt": "gpt_decoder",
        "bert_classifier": "bert_encoder",
    }[m.family]
    builder = PRESETS[m.preset][0].__name__
    if builder != expected:
        raise ValueError(
            f"model.family={m.family!r} needs a {expected} preset. "
            f"Received: model.preset={m.preset!r} ({builder})"
        )
    kwargs = {k: v for k, v in sizes.items()}
    kwargs["max_sequence_length"] = max(d.max_length, 8)
    if m.family == "seq2seq":
        return from_preset(
            m.preset,
            data.tokenizers["source"].vocabulary_size,
            data.tokenizers["target"].vocabulary_size,
            tie_embeddings=m.tie_embeddings,
            position=m.position,
            scale_embeddings=m.scale_embeddings,
            **{k: v for k, v in kwargs.items() if k != "tie_embeddings"},
        )
    vocabulary_size = data.tokenizers["text"].vocabulary_size
    if m.family == "gpt":
        return from_preset(m.preset, vocabulary_size, **kwargs)
    encoder = from_preset(m.preset, vocabulary_size, **kwargs)
    return bert_classifier(
        encoder, data.num_classes, dropout=kwargs.get("dropout", 0.1)
    )


def compile_model(model, config):
    """Adam with the paper's schedule; masked, label-smoothed loss."""
    t = config.train
    hidden_dim = model_sizes(config.model)["hidden_dim"]
    optimizer = keras.optimizers.Adam(
        TransformerSchedule(hidden_dim, t.warmup_steps, t.learning_rate_scale),
        beta_1=t.beta_1,
        beta_2=t.beta_2,
        epsilon=t.epsilon,
        clipnorm=t.clipnorm or None,
        use_ema=t.ema_momentum > 0,
        ema_momentum=t.ema_momentum or 0.99,
    )
    if config.model.family == "bert_classifier":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=t.label_smoothing)
        metrics = [MaskedAccuracy(), RealTokens()]
    jit = {"auto": "auto", "true": True, "false": False}[t.jit_compile]
    model.compile(
        optimizer=optimizer,
        loss=loss,
        # Classifier weights mark padding rows of the last evaluation batches.
        weighted_metrics=metrics if config.model.family == "bert_classifier" else None,
        metrics=None if config.model.family == "bert_classifier" else metrics,
        jit_compile=jit,
        steps_per_execution=t.steps_per_execution,
    )
    return model


@contextlib.contextmanager
def dtype_policy(name):
    """Sets the global Keras dtype policy while models are built, then restores it."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@dataclasses.dataclass
class InputLayout:
    """How the global batch maps onto datasets under a strategy.

    Without multi-worker, one dataset yields global batches and Keras splits
    them over the local replicas. Under multi-worker, each worker builds its
    own shard yielding per-replica batches, and one step takes one batch per
    local replica.
    """

    workers: int
    batch_size: int  # of the dataset(s) given to fit
    batches_per_step: int  # dataset batches each worker consumes per step

    @classmethod
    def for_strategy(cls, strategy, global_batch_size):
        replicas = strategy.num_replicas_in_sync
        if global_batch_size % replicas:
            raise ValueError(
                f"train.batch_size ({global_batch_size}) must divide evenly over "
                f"{replicas} replicas."
            )
        if not is_multi_worker(strategy):
            return cls(1, global_batch_size, 1)
        jobs = strategy.cluster_resolver.cluster_spec().as_dict()
        workers = len(jobs.get("worker", [])) + len(jobs.get("chief", []))
        return cls(workers, global_batch_size // replicas, replicas // workers)

    def dataset(self, strategy, build):
        """`build(num_shards, shard_index)` once, or once per worker."""
        if self.workers == 1 and not is_multi_worker(strategy):
            return build(1, 0)
        return strategy.distribute_datasets_from_function(
            lambda ctx: build(ctx.num_input_pipelines, ctx.input_pipeline_id)
        )


def steps_per_epoch(config, data, layout):
    """Configured steps, or the full steps of one pass over the smallest shard,
    rounded down to whole executions of `train.steps_per_execution` steps."""
    t = config.train
    if t.steps_per_epoch:
        return t.steps_per_epoch
    lengths = data.examples["train"].lengths
    per_shard = min(
        pipeline.batches_per_epoch(
            lengths[i :: layout.workers], data.bucket_lengths, layout.batch_size
        )
        // layout.batches_per_step
        for i in range(layout.workers)
    )
    if per_shard < 1:
        raise ValueError(
            f"The training split ({len(lengths)} examples) gives no full batch of "
            f"train.batch_size={t.batch_size} in any length bucket."
        )
    # Keras runs whole executions: a partial last one would train on into the
    # next epoch's batches.
    if per_shard < t.steps_per_execution:
        raise ValueError(
            f"The training split gives {per_shard} steps per epoch, fewer than "
            f"train.steps_per_execution={t.steps_per_execution}."
        )
    return per_shard - per_shard % t.steps_per_execution


@dataclasses.dataclass
class TrainResult:
    """What `train` returns: the trained model, its data and the final metrics."""

    model: keras.Model
    data: object
    metrics: dict


def train(config, *, progress=print):
    """Trains `config` (a `Config`); returns a `TrainResult`.

    Writes into `config.train.output_dir`: the tokenizer files, `config.json`,
    `model.keras` (final), `best.keras` (lowest validation loss), `backup/`
    (for resuming), `logs/` (TensorBoard) and `metrics.json`. Re-running the
    same command after a crash resumes from the last backup.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a training Config. Received: {type(config)}")
    t = config.train
    out = t.output_dir
    started = time.perf_counter()
    strategy = build_strategy(t.strategy, devices=t.devices, tpu=t.tpu)
    chief = is_chief(strategy)
    multi = is_multi_worker(strategy)
    layout = InputLayout.for_strategy(strategy, t.batch_size)
    keras.utils.set_random_seed(t.seed)
    os.makedirs(out, exist_ok=True)

    data = build_dataset(config.data, out, progress=progress)
    if chief:
        save_tokenizers(data, config.data, out)
        atomic_write_text(
            os.path.join(out, "config.json"), json.dumps(config.to_dict(), indent=2)
        )

    with dtype_policy(t.precision), strategy.scope():
        model = compile_model(build_model(config, data), config)
    backup_dir = os.path.join(out, "backup")
    state = None
    if os.path.isdir(backup_dir):
        with strategy.scope():
            state = restore_backup(model, backup_dir)
    global_step = state["global_step"] if state else 0
    steps = steps_per_epoch(config, data, layout)
    first_epoch, skip = divmod(global_step, steps)
    if state:
        progress(
            f"Resuming from step {global_step}: epoch {first_epoch + 1}, "
            f"batch {skip + 1}"
        )

    def train_data(start_epoch, skip_steps, limit_steps=None):
        def build(shards, index):
            stream = pipeline.training_stream(
                data.examples["train"],
                batch_size=layout.batch_size,
                bucket_lengths=data.bucket_lengths,
                steps_per_epoch=steps * layout.batches_per_step,
                seed=config.data.seed,
                first_epoch=start_epoch,
                skip_steps=skip_steps * layout.batches_per_step,
                num_shards=shards,
                shard_index=index,
            )
            if limit_steps is None:
                return stream
            return stream.take(limit_steps * layout.batches_per_step)

        return layout.dataset(strategy, build)

    def eval_data(split):
        # Under multi-worker every worker evaluates the whole split (the mean
        # over workers of identical values is that value); cheaper than keeping
        # uneven shards in lockstep.
        return layout.dataset(
            strategy,
            lambda shards, index: pipeline.evaluation_dataset(
                data.examples[split],
                batch_size=layout.batch_size,
                bucket_lengths=data.bucket_lengths,
                repeat=True,
            ),
        )

    best = BestModel(
        os.path.join(out, "best.keras"),
        best=(state or {}).get("best_val_loss"),
        write=chief,
    )
    report_path = os.path.join(out, "metrics.json")
    previous_report = None
    if state and os.path.isfile(report_path):
        with open(report_path, encoding="utf-8") as f:
            previous_report = {
                k: v
                for k, v in json.load(f).items()
                if k in ("epochs", "train_seconds", "tokens")
            }
    report = TrainingReport(report_path, write=chief, initial=previous_report)
    budget = TimeBudget(t.time_budget_minutes)
    averaged = [AveragedWeights()] if t.ema_momentum else []
    callbacks = [
        budget,
        ResumableBackup(
            backup_dir,
            t.checkpoint_every_steps,
            write=chief,
            extra_state=lambda: {"best_val_loss": best.best},
        ),
        # After the backup (raw weights), before everything that validates or
        # saves the model (averaged weights).
        *averaged,
        best,
        report,
    ]
    if chief:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(out, "logs")))

    def eval_steps(split):
        batches = pipeline.evaluation_steps(
            data.examples[split].lengths, data.bucket_lengths, layout.batch_size
        )
        return -(-batches // layout.batches_per_step)

    validation = eval_data("validation")
    fit_context = (
        multi_worker_fit(model, strategy, _element_spec(data, layout))
        if multi
        else contextlib.nullcontext()
    )
    with fit_context:
        # A resumed run first finishes its interrupted epoch, then goes on.
        # That epoch's data stops at its end: a backup made with another
        # train.steps_per_execution may leave a partial last execution.
        segments = []
        if skip and first_epoch < t.epochs:
            segments.append((first_epoch, first_epoch + 1, steps - skip, skip))
            first_epoch += 1
        if first_epoch < t.epochs:
            segments.append((first_epoch, t.epochs, steps, 0))
        for begin, end, n, skip_steps in segments:
            if budget.exhausted:
                break
            for callback in averaged:
                # Only the last `fit` leaves the average in the model.
                callback.keep_average = end == t.epochs
            model.fit(
                train_data(begin, skip_steps, n if skip_steps else None),
                initial_epoch=begin,
                epochs=end,
                steps_per_epoch=n,
                validation_data=validation,
                validation_steps=eval_steps("validation"),
                callbacks=callbacks,
                verbose=t.verbose,
                shuffle=False,
            )
        if budget.exhausted:
            progress(
                f"Stopped at the time budget ({t.time_budget_minutes} minutes), "
                f"step {int(model.optimizer.iterations.numpy())}."
            )
        test_logs = model.evaluate(
            eval_data("test"), steps=eval_steps("test"), verbose=0, return_dict=True
        )

    results = {
        **report.summary(),
        **{f"test_{k}": float(v) for k, v in test_logs.items() if k != "real_tokens"},
        "steps_per_epoch": steps,
        "global_step": int(model.optimizer.iterations.numpy()),
        "replicas": strategy.num_replicas_in_sync,
        "strategy": type(strategy).__name__,
        "precision": t.precision,
    }
    # Saved before the exact-match pass, so nothing trained is lost if it fails.
    with save_target(os.path.join(out, "model.keras"), chief) as tmp:
        model.save(tmp)
    if config.model.family == "seq2seq" and t.evaluate_exact_match and chief:
        pairs = data.raw["test"][: t.exact_match_examples]
        progress(f"Greedy-translating {len(pairs)} test sentences for exact match")
        score, shown = exact_match(
            model,
            pairs,
            data.tokenizers["source"],
            data.tokenizers["target"],
            max_length=config.data.max_length,
        )
        results["test_exact_match"] = score
        results["test_examples"] = [list(x) for x in shown]
    results["wall_seconds"] = time.perf_counter() - started
    if chief:
        report.flush({"results": results})
        plot_training_curves(report.report, os.path.join(out, "training_curves.png"))
    return TrainResult(model, data, results)


def _element_spec(data, layout):
    """Per-replica element spec of the batches (shapes may be None)."""
    sample = pipeline.evaluation_dataset(
        data.examples["validation"],
        batch_size=layout.batch_size,
        bucket_lengths=data.bucket_lengths,
    )
    return sample.element_spec


__all__ = ["TrainResult", "build_dataset", "build_model", "compile_model", "train"]
