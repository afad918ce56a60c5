"""`build_model` and `train(config)`: from a config to a trained, saved model."""

import contextlib
import dataclasses
import os
import time

import keras

from tfformer.runs.directory import RunDirectory
from tfformer.training import pipeline
from tfformer.training.callbacks import (
    AveragedWeights,
    BestModel,
    ResumableBackup,
    TimeBudget,
    TrainingReport,
    is_token_count,
    restore_backup,
    save_target,
)
from tfformer.training.config import Config
from tfformer.training.distribution.multi_worker import multi_worker_fit
from tfformer.training.distribution.strategy import (
    build_strategy,
    is_chief,
    is_multi_worker,
)
from tfformer.training.plots import plot_training_curves
from tfformer.training.schedules import TransformerSchedule, WarmupCosineSchedule
from tfformer.training.tasks import get_task

# Variable names (substrings) that AdamW leaves undecayed.
NO_WEIGHT_DECAY = ["bias", "gamma", "beta"]


def build_model(config, data):
    """The uncompiled Keras model of `config`'s task, sized to `data`."""
    return get_task(config.task).build_model(config, data)


def learning_rate(config, total_steps=None):
    """The schedule of `train.schedule`; "cosine" and "linear" decay over
    `train.schedule_steps`, else over `total_steps` (the run's steps)."""
    t = config.train
    if t.schedule in ("cosine", "linear"):
        steps = t.schedule_steps or total_steps
        if steps is None:
            raise ValueError(
                f"train.schedule={t.schedule!r} needs train.schedule_steps here "
                "(the run's total steps are not known). Received: None"
            )
        if steps <= t.warmup_steps:
            raise ValueError(
                f"train.warmup_steps ({t.warmup_steps}) must be below the "
                f"{t.schedule} schedule's {steps} steps (train.epochs x steps "
                "per epoch, or train.schedule_steps)."
            )
        return WarmupCosineSchedule(
            t.learning_rate,
            t.warmup_steps,
            steps,
            t.final_learning_rate_fraction,
            decay=t.schedule,
            clock=t.schedule_clock,
        )
    hidden_dim = get_task(config.task).model_sizes(config.model)["hidden_dim"]
    return TransformerSchedule(hidden_dim, t.warmup_steps, t.learning_rate_scale)


def compile_model(model, config, total_steps=None, schedule=None):
    """Adam or AdamW with `train.schedule`; the task's loss and metrics.
    `total_steps`: the run's optimizer steps, which a cosine or linear
    schedule decays over unless `train.schedule_steps` says otherwise.
    `schedule`: the learning-rate schedule, when the caller keeps it (a
    budget-clocked one, which `TimeBudget` drives)."""
    t = config.train
    if schedule is None:
        schedule = learning_rate(config, total_steps)
    arguments = dict(
        beta_1=t.beta_1,
        beta_2=t.beta_2,
        epsilon=t.epsilon,
        clipnorm=t.clipnorm,
        use_ema=t.ema_momentum is not None,
        ema_momentum=t.ema_momentum or 0.99,
    )
    if t.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(
            schedule,
            weight_decay=t.weight_decay,
            **arguments,
        )
        # Not biases, LayerNorm scales (gamma) and offsets (beta), as BERT.
        optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    else:
        optimizer = keras.optimizers.Adam(schedule, **arguments)
    jit = {"auto": "auto", "true": True, "false": False}[t.jit_compile]
    model.compile(
        optimizer=optimizer,
        jit_compile=jit,
        steps_per_execution=t.steps_per_execution,
        **get_task(config.task).compile_arguments(config),
    )
    return model


def build_dataset(config, directory=None, *, progress=print):
    """The raw and tokenized splits of `config`'s task (tokenizers saved in
    `directory` are reused, so a resumed run keeps its vocabulary)."""
    task = get_task(config.task)
    return task.prepare(config, task.raw_splits(config.data), directory, progress)


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
    # Of the training dataset(s): batch_size, or one size per length bucket
    # (train.batch_tokens, see `with_token_budget`).
    train_batch_size: object = None

    def __post_init__(self):
        if self.train_batch_size is None:
            self.train_batch_size = self.batch_size

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

    def with_token_budget(self, strategy, bucket_lengths, batch_tokens):
        """This layout with training batches of at most `batch_tokens` padded
        tokens (`pipeline.token_batch_sizes` over the data's buckets, whole
        rows per replica); unchanged for None."""
        if batch_tokens is None:
            return self
        replicas = strategy.num_replicas_in_sync
        sizes = pipeline.token_batch_sizes(
            bucket_lengths, batch_tokens, replicas, "train.batch_tokens"
        )
        # Under multi-worker each dataset yields per-replica batches.
        per_dataset = replicas if is_multi_worker(strategy) else 1
        return dataclasses.replace(
            self, train_batch_size=tuple(size // per_dataset for size in sizes)
        )

    def dataset(self, strategy, build):
        """`build(num_shards, shard_index)` once, or once per worker."""
        if self.workers == 1 and not is_multi_worker(strategy):
            return build(1, 0)
        return strategy.distribute_datasets_from_function(
            lambda ctx: build(ctx.num_input_pipelines, ctx.input_pipeline_id)
        )


def batch_description(train_config, layout, bucket_lengths):
    """How the config batches training data, for messages."""
    if train_config.batch_tokens is None:
        return f"train.batch_size={train_config.batch_size}"
    rows = dict(zip(bucket_lengths, layout.train_batch_size, strict=True))
    return (
        f"train.batch_tokens={train_config.batch_tokens} (sequences per bucket "
        f"length and dataset: {rows})"
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
            lengths[i :: layout.workers], data.bucket_lengths, layout.train_batch_size
        )
        // layout.batches_per_step
        for i in range(layout.workers)
    )
    if per_shard < 1:
        raise ValueError(
            f"The training split ({len(lengths)} examples) gives no full batch of "
            f"{batch_description(t, layout, data.bucket_lengths)} in any length "
            "bucket."
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


@dataclasses.dataclass(frozen=True)
class Segment:
    """One `model.fit` call: epochs `begin` to `end` (exclusive), `steps`
    batches in each, the first of them starting after `skip` batches."""

    begin: int
    end: int
    steps: int
    skip: int


def segment_plan(global_step, steps_per_epoch, epochs):
    """The `fit` calls that take a run from `global_step` to the end of epoch
    `epochs`: a resumed run first finishes its interrupted epoch, then goes on.

    Returns:
        A list of `Segment`s (empty when the run is complete).
    """
    first_epoch, skip = divmod(global_step, steps_per_epoch)
    segments = []
    if skip and first_epoch < epochs:
        segments.append(
            Segment(first_epoch, first_epoch + 1, steps_per_epoch - skip, skip)
        )
        first_epoch += 1
    if first_epoch < epochs:
        segments.append(Segment(first_epoch, epochs, steps_per_epoch, 0))
    return segments


@dataclasses.dataclass
class RunCallbacks:
    """The callbacks of a run, and the ones `train` reads back afterwards."""

    callbacks: list
    budget: TimeBudget
    best: BestModel
    report: TrainingReport
    averaged: list  # the AveragedWeights callback, if the run averages


def previous_report(run):
    """The running totals a resumed run carries over from its `metrics.json`
    (None if there is none)."""
    metrics = run.read_metrics()
    if metrics is None:
        return None
    return {
        k: v for k, v in metrics.items() if k in ("epochs", "train_seconds", "tokens")
    }


def build_callbacks(config, state=None, *, write=True, schedule=None):
    """The callback list of a run of `config`, in the order they must run.

    Args:
        state: the restored backup state of a resumed run (None: a new run).
        write: whether this process writes files (the chief).
        schedule: the model's learning-rate schedule (a budget-clocked one
            is driven by the `TimeBudget`).
    """
    t = config.train
    out = t.output_dir
    best = BestModel(
        os.path.join(out, "best.keras"),
        best=(state or {}).get("best_val_loss"),
        write=write,
    )
    run = RunDirectory(out)
    report = TrainingReport(
        run.write_metrics if write else None,
        initial=previous_report(run) if state else None,
    )
    budget = TimeBudget(t.time_budget_minutes, schedule=schedule, state=state)
    averaged = [AveragedWeights()] if t.ema_momentum else []
    callbacks = [
        budget,
        ResumableBackup(
            os.path.join(out, "backup"),
            t.checkpoint_every_steps,
            write=write,
            extra_state=lambda: {"best_val_loss": best.best, **budget.state()},
        ),
        # After the backup (raw weights), before everything that validates or
        # saves the model (averaged weights).
        *averaged,
        best,
        report,
    ]
    if write:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(out, "logs")))
    return RunCallbacks(callbacks, budget, best, report, averaged)


def end_of_run_results(
    summary, test_logs, *, steps_per_epoch, global_step, strategy, precision
):
    """The `results` block of `metrics.json`: the training summary, the test
    metrics (prefixed `test_`; the token counter is not a metric), the step
    counts and how the run was distributed."""
    return {
        **summary,
        **{
            f"test_{k}": float(v) for k, v in test_logs.items() if not is_token_count(k)
        },
        "steps_per_epoch": steps_per_epoch,
        "global_step": int(global_step),
        "replicas": strategy.num_replicas_in_sync,
        "strategy": type(strategy).__name__,
        "precision": precision,
    }


def train(config, *, progress=print):
    """Trains `config` (a `Config`); returns a `TrainResult`.

    Writes into `config.train.output_dir` (a run directory, see
    `tfformer.runs.directory`): the tokenizer files, `run.json`, `config.json`,
    `model.keras` (final), `best.keras` (lowest validation loss), `backup/`
    (for resuming), `logs/` (TensorBoard) and `metrics.json`. Re-running the
    same command after a crash resumes from the last backup.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a training Config. Received: {type(config)}")
    task = get_task(config.task)
    t = config.train
    out = t.output_dir
    started = time.perf_counter()
    strategy = build_strategy(t.strategy, devices=t.devices, tpu=t.tpu)
    chief = is_chief(strategy)
    multi = is_multi_worker(strategy)
    layout = InputLayout.for_strategy(strategy, t.batch_size)
    keras.utils.set_random_seed(t.seed)
    # The data first: a corpus, vocabulary or init_from problem is refused
    # before the output directory exists.
    data = build_dataset(config, out, progress=progress)
    # The data's buckets (a task may ignore data.bucket_lengths), before
    # anything is written.
    layout = layout.with_token_budget(strategy, data.bucket_lengths, t.batch_tokens)
    os.makedirs(out, exist_ok=True)
    run = RunDirectory(out)
    if chief:
        task.save_preprocessing(config, data, run)
        run.write_config(config.to_dict())

    steps = steps_per_epoch(config, data, layout)
    with dtype_policy(t.precision), strategy.scope():
        schedule = learning_rate(config, t.epochs * steps)
        model = compile_model(build_model(config, data), config, schedule=schedule)
    backup_dir = os.path.join(out, "backup")
    state = None
    if os.path.isdir(backup_dir):
        with strategy.scope():
            state = restore_backup(model, backup_dir)
    global_step = state["global_step"] if state else 0
    segments = segment_plan(global_step, steps, t.epochs)
    if state:
        epoch, batch = divmod(global_step, steps)
        progress(
            f"Resuming from step {global_step}: epoch {epoch + 1}, batch {batch + 1}"
        )

    def train_data(start_epoch, skip_steps, limit_steps=None):
        def build(shards, index):
            stream = task.training_stream(
                data.examples["train"],
                batch_size=layout.train_batch_size,
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
            lambda shards, index: task.evaluation_dataset(
                data.examples[split],
                batch_size=layout.batch_size,
                bucket_lengths=data.bucket_lengths,
                repeat=True,
            ),
        )

    def eval_steps(split):
        batches = pipeline.evaluation_steps(
            data.examples[split].lengths, data.bucket_lengths, layout.batch_size
        )
        return -(-batches // layout.batches_per_step)

    run_callbacks = build_callbacks(config, state, write=chief, schedule=schedule)
    budget = run_callbacks.budget
    validation = eval_data("validation")
    fit_context = (
        multi_worker_fit(model, strategy, _element_spec(task, data, layout))
        if multi
        else contextlib.nullcontext()
    )
    with fit_context:
        # A resumed run first finishes its interrupted epoch, then goes on.
        # That epoch's data stops at its end: a backup made with another
        # train.steps_per_execution may leave a partial last execution.
        for segment in segments:
            if budget.exhausted:
                break
            for callback in run_callbacks.averaged:
                # Only the last `fit` leaves the average in the model.
                callback.keep_average = segment.end == t.epochs
            model.fit(
                train_data(
                    segment.begin,
                    segment.skip,
                    segment.steps if segment.skip else None,
                ),
                initial_epoch=segment.begin,
                epochs=segment.end,
                steps_per_epoch=segment.steps,
                validation_data=validation,
                validation_steps=eval_steps("validation"),
                callbacks=run_callbacks.callbacks,
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

    results = end_of_run_results(
        run_callbacks.report.summary(),
        test_logs,
        steps_per_epoch=steps,
        global_step=model.optimizer.iterations.numpy(),
        strategy=strategy,
        precision=t.precision,
    )
    # Saved before the final evaluation, so nothing trained is lost if it fails.
    with save_target(run.file("model.keras"), chief) as tmp:
        model.save(tmp)
    if t.final_evaluation and chief:
        results.update(task.final_evaluation(config, model, data, progress))
    results["wall_seconds"] = time.perf_counter() - started
    if chief:
        run_callbacks.report.flush({"results": results})
        plot_training_curves(
            run_callbacks.report.report, run.file("training_curves.png")
        )
    return TrainResult(model, data, results)


def _element_spec(task, data, layout):
    """Per-replica element spec of the batches (shapes may be None)."""
    sample = task.evaluation_dataset(
        data.examples["validation"],
        batch_size=layout.batch_size,
        bucket_lengths=data.bucket_lengths,
    )
    return sample.element_spec


__all__ = ["TrainResult", "build_dataset", "build_model", "compile_model", "train"]
