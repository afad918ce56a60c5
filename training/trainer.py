"""`build_model` and `train(config)`: from a config to a trained, saved model.

`train` is a short sequence of steps, defined below it in the order it calls
them: prepare the inputs (strategy layout, data, steps per epoch), build the
compiled model, open the run directory (tokenizers, `run.json`,
`config.json`), restore the last backup, fit the segments left and test,
then save `model.keras`, evaluate and write `metrics.json`.
"""

import contextlib
import dataclasses
import os
import time

import keras
from tensorflow.data.experimental import assert_cardinality

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.directory import (
    BACKUP,
    BEST_MODEL,
    FINAL_MODEL,
    LOGS,
    TRAINING_CURVES,
    RunDirectory,
)
from tfformer.training import lora, pipeline, precision
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
    is_chief,
    is_multi_worker,
    strategy_for,
)
from tfformer.training.output_directory import check_output_directory, move_aside
from tfformer.training.plots import plot_training_curves
from tfformer.training.schedules import TransformerSchedule, WarmupCosineSchedule
from tfformer.training.tasks import check_trainable, get_task

# Variable names (substrings) that AdamW leaves undecayed.
NO_WEIGHT_DECAY = ["bias", "gamma", "beta"]
# The run's backup folder (`ResumableBackup`'s weights and state).


def build_model(config, data):
    """The uncompiled Keras model of `config`'s task, sized to `data`."""
    return get_task(config.task).build_model(config, data)


def learning_rate(config, total_steps=None):
    """The schedule of `train.schedule`; "cosine" and "linear" decay over
    `train.schedule_steps`, else over `total_steps` (the run's steps)."""
    train_config = config.train
    if train_config.schedule in ("cosine", "linear"):
        steps = train_config.schedule_steps or total_steps
        if steps is None:
            raise InputError(
                f"train.schedule={train_config.schedule!r} needs "
                "train.schedule_steps here (the run's total steps are not known). "
                "Received: None"
            )
        if steps <= train_config.warmup_steps:
            raise InputError(
                f"train.warmup_steps ({train_config.warmup_steps}) must be below "
                f"the {train_config.schedule} schedule's {steps} steps "
                "(train.epochs x steps per epoch, or train.schedule_steps)."
            )
        return WarmupCosineSchedule(
            train_config.learning_rate,
            train_config.warmup_steps,
            steps,
            train_config.final_learning_rate_fraction,
            decay=train_config.schedule,
            clock=train_config.schedule_clock,
        )
    hidden_dim = get_task(config.task).model_sizes(config.model)["hidden_dim"]
    return TransformerSchedule(
        hidden_dim, train_config.warmup_steps, train_config.learning_rate_scale
    )


def compile_model(model, config, total_steps=None, schedule=None):
    """Adam or AdamW with `train.schedule`; the task's loss and metrics.
    `total_steps`: the run's optimizer steps, which a cosine or linear
    schedule decays over unless `train.schedule_steps` says otherwise.
    `schedule`: the learning-rate schedule, when the caller keeps it (a
    budget-clocked one, which `TimeBudget` drives)."""
    train_config = config.train
    if schedule is None:
        schedule = learning_rate(config, total_steps)
    adam_arguments = dict(
        beta_1=train_config.beta_1,
        beta_2=train_config.beta_2,
        epsilon=train_config.epsilon,
        clipnorm=train_config.clipnorm,
        use_ema=train_config.ema_momentum is not None,
        ema_momentum=train_config.ema_momentum or 0.99,
    )
    if train_config.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(
            schedule,
            weight_decay=train_config.weight_decay,
            **adam_arguments,
        )
        # Not biases, LayerNorm scales (gamma) and offsets (beta), as BERT.
        optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    else:
        optimizer = keras.optimizers.Adam(schedule, **adam_arguments)
    jit_compile = {"auto": "auto", "true": True, "false": False}
    model.compile(
        optimizer=optimizer,
        jit_compile=jit_compile[train_config.jit_compile],
        steps_per_execution=train_config.steps_per_execution,
        **get_task(config.task).compile_arguments(config),
    )
    # Built now, in the caller's strategy scope. Keras builds it inside the
    # train step's first trace when no strategy is set, and `tf.function`
    # then traces the whole step a second time (variables were created).
    model.optimizer.build(model.trainable_variables)
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
class TrainResult:
    """What `train` returns: the trained model, its data and the final metrics."""

    model: keras.Model
    data: object
    metrics: dict


def train(config, *, progress=print, start_over=False):
    """Trains `config` (a `Config`); returns a `TrainResult`.

    Writes into `config.train.output_dir` (a run directory, see
    `tfformer.runs.directory`): the tokenizer files, `run.json`, `config.json`,
    `model.keras` (final), `best.keras` (lowest validation loss), `backup/`
    (for resuming), `logs/` (TensorBoard) and `metrics.json`. Re-running the
    same command after a crash resumes from the last backup.

    The directory must be missing, empty or hold this same run (task, data
    and model settings; see `tfformer.training.output_directory`); anything
    else is refused (ValueError) before a byte is written. `start_over`
    renames a non-empty directory aside (`<dir>.replaced-<time>`) once the
    config has passed every check, and trains from scratch.
    """
    if not isinstance(config, Config):
        raise InputTypeError(
            f"config must be a training Config. Received: {type(config)}"
        )
    check_trainable(config.task)  # a converted-only task: say what to do
    started = time.perf_counter()
    train_config = config.train
    strategy = strategy_for(train_config)
    writes = is_chief(strategy)  # only the chief of a multi-worker run writes
    keras.utils.set_random_seed(train_config.seed)
    # Everything that can refuse the config comes before the first file is
    # written: a finished run in output_dir stays as it was.
    verdict = check_output_directory(config, start_over=start_over)
    moving = verdict == "start_over"
    # A run started over learns its tokenizers again.
    directory = None if moving else train_config.output_dir
    inputs = prepare_inputs(config, strategy, progress, directory=directory)
    model, schedule = build_compiled_model(config, inputs, progress)
    if moving and writes:
        move_aside(train_config.output_dir, progress)
    # Started over, no worker restores: on a shared disk a worker could
    # otherwise read the old backup before the chief moved it aside. A
    # resumed run's backup is read before config.json is rewritten, so a
    # damaged one is refused with the run as it was.
    state = None if moving else restore_last_backup(model, config, strategy)
    run = open_run_directory(config, inputs.data, write=writes)
    segments = segments_left(
        state, inputs.steps_per_epoch, train_config.epochs, progress
    )
    callbacks = build_callbacks(config, state, write=writes, schedule=schedule)
    test_logs = fit_and_test(model, segments, inputs, callbacks, train_config, progress)
    results = end_of_run_results(
        callbacks.report.summary(),
        test_logs,
        steps_per_epoch=inputs.steps_per_epoch,
        global_step=model.optimizer.iterations.numpy(),
        strategy=strategy,
        precision=train_config.precision,
    )
    # Saved before the final evaluation, so nothing trained is lost if it fails.
    save_final_model(model, run, write=writes)
    results.update(
        final_evaluation(config, model, inputs.data, write=writes, progress=progress)
    )
    results["wall_seconds"] = time.perf_counter() - started
    if writes:
        write_report(run, callbacks.report, results)
    return TrainResult(model, inputs.data, results)


# -- 1. The inputs: layout, data, steps per epoch (nothing is written) ----------


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
            raise InputError(
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
    train_config = config.train
    if train_config.steps_per_epoch:
        return train_config.steps_per_epoch
    lengths = data.examples["train"].lengths
    per_shard = min(
        pipeline.batches_per_epoch(
            lengths[i :: layout.workers], data.bucket_lengths, layout.train_batch_size
        )
        // layout.batches_per_step
        for i in range(layout.workers)
    )
    if per_shard < 1:
        raise InputError(
            f"The training split ({len(lengths)} examples) gives no full batch of "
            f"{batch_description(train_config, layout, data.bucket_lengths)} in "
            "any length bucket."
        )
    # Keras runs whole executions: a partial last one would train on into the
    # next epoch's batches.
    executions = train_config.steps_per_execution
    if per_shard < executions:
        raise InputError(
            f"The training split gives {per_shard} steps per epoch, fewer than "
            f"train.steps_per_execution={executions}."
        )
    return per_shard - per_shard % executions


@dataclasses.dataclass(frozen=True)
class RunInputs:
    """A run's prepared data and the datasets `fit` and `evaluate` read.

    Holds the task, its `data` (from `build_dataset`), the `strategy` and
    `layout` the batches follow, the optimizer steps of an epoch and the
    data's shuffling seed; builds datasets, writes nothing.
    """

    task: object
    data: object
    strategy: object
    layout: InputLayout
    steps_per_epoch: int
    seed: int  # data.seed: each epoch's order is a function of it
    steps_per_execution: int = 1  # train.steps_per_execution

    def training(self, segment):
        """The training batches of `segment` (a `Segment`): from the start of
        its first epoch, `segment.skip` steps in. The partial epoch of a
        resumed run stops at that epoch's end: a backup made with another
        train.steps_per_execution may leave a partial last execution."""
        layout = self.layout

        def build(num_shards, shard_index):
            stream = self.task.training_stream(
                self.data.examples["train"],
                batch_size=layout.train_batch_size,
                bucket_lengths=self.data.bucket_lengths,
                steps_per_epoch=self.steps_per_epoch * layout.batches_per_step,
                seed=self.seed,
                first_epoch=segment.begin,
                skip_steps=segment.skip * layout.batches_per_step,
                num_shards=num_shards,
                shard_index=shard_index,
            )
            if not segment.skip:
                return stream
            return stream.take(segment.steps * layout.batches_per_step)

        return layout.dataset(self.strategy, build)

    def evaluation(self, split):
        """Every example of `split` ("validation", "test") once per
        evaluation.

        One step at a time, the pass is repeated: Keras keeps one validation
        iterator across epochs and reads `evaluation_steps` batches from it.
        In executions of several steps, a repeated pass whose batches are
        not a multiple of `train.steps_per_execution` made the last
        execution go on into the next pass, counting its first batches
        twice; for such a pass the dataset is one pass with its length stated
        (`assert_cardinality`), so Keras starts a new iterator after each
        pass and the last execution stops at its end. (One step at a time,
        the single pass would cost its cache: an iterator that never reads
        the end discards what it cached.) Under multi-worker, whose
        distributed datasets state no length, the pass is repeated (so
        executions of several steps still overcount there), and every worker
        evaluates the whole split (the mean over workers of identical values
        is that value)."""
        batches = self.evaluation_batches(split)
        # A pass of whole executions is exact repeated (and keeps its cache).
        exact = batches % self.steps_per_execution != 0 and not is_multi_worker(
            self.strategy
        )

        def build(num_shards, shard_index):
            dataset = self.task.evaluation_dataset(
                self.data.examples[split],
                batch_size=self.layout.batch_size,
                bucket_lengths=self.data.bucket_lengths,
                repeat=not exact,
            )
            if exact:
                dataset = dataset.apply(assert_cardinality(batches))
            return dataset

        return self.layout.dataset(self.strategy, build)

    def evaluation_batches(self, split):
        """The dataset batches of one pass over `split`."""
        return pipeline.evaluation_steps(
            self.data.examples[split].lengths,
            self.data.bucket_lengths,
            self.layout.batch_size,
        )

    def evaluation_steps(self, split):
        """The steps of one pass of `evaluation(split)`."""
        return -(-self.evaluation_batches(split) // self.layout.batches_per_step)

    def element_spec(self):
        """Per-replica element spec of the batches (shapes may be None)."""
        sample = self.task.evaluation_dataset(
            self.data.examples["validation"],
            batch_size=self.layout.batch_size,
            bucket_lengths=self.data.bucket_lengths,
        )
        return sample.element_spec


def prepare_inputs(config, strategy, progress=print, *, directory=...):
    """The `RunInputs` of `config` under `strategy`.

    Reads the corpus (and the tokenizers a resumed run saved in `directory`,
    by default `train.output_dir`; None: learn them); writes nothing, so a
    corpus, vocabulary, init_from, batch or epoch problem is refused before
    the run directory is touched.
    """
    train_config = config.train
    if directory is ...:
        directory = train_config.output_dir
    layout = InputLayout.for_strategy(strategy, train_config.batch_size)
    data = build_dataset(config, directory, progress=progress)
    # The data's buckets (a task may ignore data.bucket_lengths).
    layout = layout.with_token_budget(
        strategy, data.bucket_lengths, train_config.batch_tokens
    )
    return RunInputs(
        task=get_task(config.task),
        data=data,
        strategy=strategy,
        layout=layout,
        steps_per_epoch=steps_per_epoch(config, data, layout),
        seed=config.data.seed,
        steps_per_execution=train_config.steps_per_execution,
    )


# -- 2. The model and the run directory -----------------------------------------


def build_compiled_model(config, inputs, progress=print):
    """The compiled model of `config` under `train.precision` and the
    inputs' strategy, and its learning-rate schedule (decaying over the
    run's epochs of `inputs.steps_per_epoch`); writes nothing, says LoRA's share."""
    train_config = config.train
    with dtype_policy(train_config.precision), inputs.strategy.scope():
        schedule = learning_rate(config, train_config.epochs * inputs.steps_per_epoch)
        model = build_model(config, inputs.data)
        lora.adapt(model, config.model, progress, seed=train_config.seed)
        compile_model(model, config, schedule=schedule)
    precision.say_kernels(model, train_config.precision, inputs.strategy, progress)
    return model, schedule


def open_run_directory(config, data, *, write):
    """Creates `train.output_dir` and returns its `RunDirectory`; when
    `write` (the chief), writes `config.json` (first: it is what names the
    run's directory as this run's), then the tokenizer files and
    `run.json`."""
    run = RunDirectory.create(config.train.output_dir)
    if write:
        run.write_config(config.to_dict())
        get_task(config.task).save_preprocessing(config, data, run)
    return run


def restore_last_backup(model, config, strategy):
    """Loads the last backup of `config`'s run (`backup/`) into the compiled
    `model`; returns its state (`ResumableBackup`'s `state.json`, with the
    weights' step), or None for a run that has none (or no directory yet)."""
    directory = os.path.join(config.train.output_dir, BACKUP)
    with strategy.scope():
        return restore_backup(model, directory, lora.backup_weights(config.model))


# -- 3. Fitting ------------------------------------------------------------------


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


def segments_left(state, steps_per_epoch, epochs, progress=print):
    """The `segment_plan` from the restored backup `state` (None: from step
    0) to the end of epoch `epochs`; tells `progress` where a resumed run
    goes on."""
    global_step = state["global_step"] if state else 0
    if state:
        epoch, batch = divmod(global_step, steps_per_epoch)
        progress(
            f"Resuming from step {global_step}: epoch {epoch + 1}, batch {batch + 1}"
        )
    return segment_plan(global_step, steps_per_epoch, epochs)


@dataclasses.dataclass
class RunCallbacks:
    """The callbacks of a run, and the ones `train` reads back afterwards."""

    callbacks: list
    budget: TimeBudget
    best: BestModel
    report: TrainingReport
    averaged: AveragedWeights | None  # None: the run does not average weights


def build_callbacks(config, state=None, *, write=True, schedule=None):
    """The callback list of a run of `config`, in the order they must run.

    Args:
        state: the restored backup state of a resumed run (None: a new run).
        write: whether this process writes files (the chief).
        schedule: the model's learning-rate schedule (a budget-clocked one
            is driven by the `TimeBudget`).
    """
    train_config = config.train
    run = RunDirectory(train_config.output_dir)
    best = BestModel(
        run.file(BEST_MODEL),
        best=(state or {}).get("best_val_loss"),
        write=write,
    )
    report = TrainingReport(
        run.write_metrics if write else None,
        # A new run ignores a metrics.json it finds: it is not its history.
        initial=TrainingReport.totals_of(run.read_metrics()) if state else None,
    )
    budget = TimeBudget(
        train_config.time_budget_minutes, schedule=schedule, state=state
    )
    averaged = AveragedWeights() if train_config.ema_momentum else None
    callbacks = [
        budget,
        ResumableBackup(
            run.file(BACKUP),
            train_config.checkpoint_every_steps,
            write=write,
            extra_state=lambda: {"best_val_loss": best.best, **budget.state()},
            weights_file=lora.backup_weights(config.model),
        ),
        # After the backup (raw weights), before everything that validates or
        # saves the model (averaged weights).
        *([averaged] if averaged else []),
        best,
        report,
    ]
    if write:
        callbacks.append(keras.callbacks.TensorBoard(run.file(LOGS)))
    return RunCallbacks(callbacks, budget, best, report, averaged)


@contextlib.contextmanager
def fit_context(model, inputs):
    """Where `fit` and `evaluate` run: `multi_worker_fit` under a
    multi-worker strategy, else nothing to set up."""
    if not is_multi_worker(inputs.strategy):
        yield
        return
    with multi_worker_fit(model, inputs.strategy, inputs.element_spec()):
        yield


def fit_and_test(model, segments, inputs, callbacks, train_config, progress=print):
    """Fits `segments` (one `model.fit` each) until the time budget runs
    out, then evaluates the test split; returns its logs.

    Reads the inputs' datasets; the callbacks write the backups,
    `best.keras`, `metrics.json` (per epoch) and the TensorBoard logs.
    """
    validation = inputs.evaluation("validation")
    with fit_context(model, inputs):
        for segment in segments:
            if callbacks.budget.exhausted:
                break
            if callbacks.averaged:
                # Only the last `fit` leaves the average in the model.
                callbacks.averaged.keep_average = segment.end == train_config.epochs
            model.fit(
                inputs.training(segment),
                initial_epoch=segment.begin,
                epochs=segment.end,
                steps_per_epoch=segment.steps,
                validation_data=validation,
                validation_steps=inputs.evaluation_steps("validation"),
                callbacks=callbacks.callbacks,
                verbose=train_config.verbose,
                shuffle=False,
            )
        if callbacks.averaged and not segments:  # a finished run run again:
            # the backup's raw weights in the model; its result is their average.
            model.optimizer.finalize_variable_values(model.trainable_variables)
        if callbacks.budget.exhausted:
            progress(
                "Stopped at the time budget "
                f"({train_config.time_budget_minutes} minutes), "
                f"step {int(model.optimizer.iterations.numpy())}."
            )
        return model.evaluate(
            inputs.evaluation("test"),
            steps=inputs.evaluation_steps("test"),
            verbose=0,
            return_dict=True,
        )


# -- 4. The end of the run ---------------------------------------------------------


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


def save_final_model(model, run, *, write):
    """Saves `model` as the run's `model.keras` (atomically; a LoRA run's
    adapters also alone). Every worker takes part; only the chief
    (`write`) keeps the files."""
    with save_target(run.file(FINAL_MODEL), write) as tmp:
        model.save(tmp)
    lora.save_adapters(model, run, write)


def final_evaluation(config, model, data, *, write, progress=print):
    """The task's end-of-run evaluation of `model` (`train.final_evaluation`,
    on the chief only), as results to merge; {} when there is none."""
    if not (config.train.final_evaluation and write):
        return {}
    return get_task(config.task).final_evaluation(config, model, data, progress)


def write_report(run, report, results):
    """Writes the run's `metrics.json` (the `TrainingReport` and `results`)
    and its `training_curves.png`."""
    report.flush({"results": results})
    plot_training_curves(report.report, run.file(TRAINING_CURVES))


__all__ = ["TrainResult", "build_dataset", "build_model", "compile_model", "train"]
