"""Callbacks for preemption-safe training: backups, the best model, a report.

Every file is written to a temporary name and renamed into place, so a kill at
any moment leaves the previous complete file, never a torn one.
"""

import contextlib
import json
import math
import os
import shutil
import tempfile
import time

import keras

from tfformer.errors import InputError
from tfformer.runs.files import atomic_path, atomic_write_text, read_text

BACKUP_WEIGHTS = "latest.weights.h5"
BACKUP_STATE = "state.json"


@contextlib.contextmanager
def save_target(path, write):
    """Yields where to save `path`: a temporary name renamed into place when
    `write`, else a scratch file that is deleted.

    Under MultiWorkerMirroredStrategy every worker must take part in a save
    (reading distributed variables is a collective op), but only the chief
    may write the real file.
    """
    if write:
        with atomic_path(path) as tmp:
            yield tmp
        return
    scratch = tempfile.mkdtemp(prefix="tfformer-worker-")
    try:
        yield os.path.join(scratch, os.path.basename(path))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# What a user can do about a damaged backup, said with every such error.
DAMAGED_BACKUP = (
    "the run cannot resume from it. Delete that backup folder to train the run "
    "from its start, or pass --start-over to move the whole run aside."
)


def read_backup_state(directory):
    """The state saved with the last backup in `directory`, or None.

    Raises:
        ValueError: naming the file, when it is not a JSON object with an
            integer `global_step` (a damaged backup).
    """
    path = os.path.join(directory, BACKUP_STATE)
    if not os.path.isfile(path):
        return None
    try:
        state = json.loads(read_text(path))
    except (ValueError, json.JSONDecodeError) as e:
        raise InputError(f"{path} is damaged ({e}): {DAMAGED_BACKUP}") from None
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        raise InputError(
            f"{path} is damaged (no integer global_step): {DAMAGED_BACKUP}"
        )
    return state


class ModelWeights:
    """What a backup keeps of the model: every weight and the optimizer's
    state (Keras's `save_weights`). A LoRA run keeps less
    (`tfformer.training.lora.AdapterWeights`)."""

    file = BACKUP_WEIGHTS

    def save(self, model, path):
        model.save_weights(path)

    def load(self, model, path):
        model.load_weights(path)


def restore_backup(model, directory, weights_file=None):
    """Loads the last backup into a compiled `model`; returns its state or None.

    The weights file (`weights_file`, default `ModelWeights`) holds the model
    and the optimizer state (its iteration count included), so the
    learning-rate schedule continues where it stopped.
    """
    state = read_backup_state(directory)
    if state is None:
        return None
    weights_file = weights_file or ModelWeights()
    weights = os.path.join(directory, weights_file.file)
    if not os.path.isfile(weights):
        others = sorted(set(os.listdir(directory)) - {BACKUP_STATE})
        raise InputError(
            f"{directory} has {BACKUP_STATE} but no {weights_file.file} (it holds "
            f"{others}: a backup of another kind of run, or of an older tfformer): "
            f"{DAMAGED_BACKUP}"
        )
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    try:
        weights_file.load(model, weights)
    except InputError:
        raise  # it says what is wrong and what to do
    except (OSError, ValueError) as e:
        # h5py's OSError for a truncated or garbled file; Keras's ValueError
        # for one whose layers or shapes are not this model's.
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(
            f"{weights} cannot be read ({detail}): {DAMAGED_BACKUP}"
        ) from None
    # The weights carry the optimizer's step; a kill between writing them and
    # the state file leaves the state one backup behind, so the weights win.
    state["global_step"] = int(model.optimizer.iterations.numpy())
    return state


class ResumableBackup(keras.callbacks.Callback):
    """Backs up weights and optimizer every `every_steps` steps and each epoch.

    Unlike `keras.callbacks.BackupAndRestore`, the backup records the global
    step, and the input stream is a function of that step, so a restarted run
    resumes mid-epoch with the next unseen batch instead of redoing the epoch.
    Files are replaced atomically. Only the chief writes (`write=False` on
    other workers of a multi-worker run).

    With `steps_per_execution > 1` Keras returns to the callbacks only after
    each execution, so the backup for a multiple of `every_steps` is taken at
    the end of the first execution that reaches or passes it (every 4 steps,
    in executions of 3: at steps 6, 9, 12, 18, ...), and records that step.

    Args:
        directory: where `latest.weights.h5` and `state.json` go.
        every_steps: optimizer steps between backups.
        write: whether this process writes (the chief) or only counts.
        extra_state: callable returning a dict stored with each backup.
        weights_file: what the backup keeps of the model (default
            `ModelWeights`: everything).
    """

    def __init__(
        self, directory, every_steps, *, write=True, extra_state=None, weights_file=None
    ):
        super().__init__()
        self.directory = directory
        self.weights_file = weights_file or ModelWeights()
        self.every_steps = int(every_steps)
        self.write = write
        self.extra_state = extra_state
        self._epoch_start = 0
        self._backed_up = 0  # multiples of every_steps covered by a backup
        self._last_saved = None

    def on_train_begin(self, logs=None):
        self._epoch_start = int(self.model.optimizer.iterations.numpy())
        self._backed_up = self._epoch_start // self.every_steps

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the index of the execution's last step; a short last
        # execution (data that ends) reports past the epoch's `steps`.
        steps = self.params.get("steps")
        step = self._epoch_start + (min(batch + 1, steps) if steps else batch + 1)
        if step // self.every_steps > self._backed_up:
            # The true step, in case the estimate above is off.
            self.save(int(self.model.optimizer.iterations.numpy()))

    def on_epoch_end(self, epoch, logs=None):
        self.save(int(self.model.optimizer.iterations.numpy()))

    def save(self, step):
        if step == self._last_saved:
            return
        # The weights first, then the state; restore trusts the weights' step.
        path = os.path.join(self.directory, self.weights_file.file)
        with save_target(path, self.write) as tmp:
            self.weights_file.save(self.model, tmp)
        self._last_saved = step
        self._backed_up = max(self._backed_up, step // self.every_steps)
        if not self.write:
            return
        state = {"global_step": step, "time": time.time()}
        if self.extra_state is not None:
            state.update(self.extra_state())
        atomic_write_text(
            os.path.join(self.directory, BACKUP_STATE), json.dumps(state) + "\n"
        )


class BestModel(keras.callbacks.Callback):
    """Saves the whole model (`.keras`) when `monitor` improves; atomically.

    `best` may be given to continue a resumed run's record.
    """

    def __init__(self, path, monitor="val_loss", mode="min", *, best=None, write=True):
        super().__init__()
        if mode not in ("min", "max"):
            raise InputError(f"mode must be 'min' or 'max'. Received: mode={mode!r}")
        self.path = path
        self.monitor = monitor
        self.mode = mode
        self.best = best
        self.write = write

    def _improved(self, value):
        if self.best is None:
            return True
        return value < self.best if self.mode == "min" else value > self.best

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or not math.isfinite(value) or not self._improved(value):
            return
        self.best = float(value)
        with save_target(self.path, self.write) as tmp:
            self.model.save(tmp)


def merge_epoch_logs(first, rest):
    """One epoch's logs from those of its two parts (`first`, cut by a time
    budget, and `rest`, trained by the resumed run): seconds, steps and
    token counts add up; validation figures and the learning rate are the
    later part's (validation ran at the epoch's end); a training metric is
    the mean of the parts weighted by their real tokens when it has a token
    count beside it (`accuracy` and `real_tokens`: token-weighted means) and
    by their steps otherwise. Keras weights a batch's loss by its rows, so
    with `train.batch_tokens` (rows vary by bucket) the merged loss is close
    to, not equal to, the epoch's; a part logged by an older version (no
    `steps`) counts for nothing in the means."""
    merged = {}
    for key in {*first, *rest}:
        a, b = first.get(key), rest.get(key)
        if (
            a is None
            or b is None
            or key.startswith("val_")
            or key
            in (
                "epoch",
                "learning_rate",
            )
        ):
            merged[key] = b if b is not None else a
        elif key in ("seconds", "steps") or is_token_count(key):
            merged[key] = a + b
        elif key != "real_tokens_per_second":
            counts = f"{key[: -len('accuracy')]}real_tokens"
            weight = counts if key.endswith("accuracy") and counts in first else "steps"
            wa, wb = first.get(weight, 0), rest.get(weight, 0)
            merged[key] = (a * wa + b * wb) / (wa + wb) if wa + wb else b
    seconds = merged.get("seconds", 0.0)
    merged["real_tokens_per_second"] = (
        real_tokens(merged) / seconds if seconds > 0 else 0.0
    )
    order = [*first, *(key for key in rest if key not in first)]
    return dict(
        sorted(
            merged.items(),
            key=lambda item: order.index(item[0]) if item[0] in order else len(order),
        )
    )


def real_tokens(logs):
    """The `real_tokens` count of `logs`: a model with several outputs has it
    under its output's name (`masked_lm_real_tokens`)."""
    return sum(v for k, v in logs.items() if is_token_count(k))


def is_token_count(name):
    """A training token count: `real_tokens` or `<output>_real_tokens`, not
    a validation one (`val_...`, merged into the epoch's logs by Keras)."""
    return name == "real_tokens" or (
        name.endswith("_real_tokens") and not name.startswith("val_")
    )


class TrainingReport(keras.callbacks.Callback):
    """Collects epoch logs, wall time and real (non-padding) tokens per second.

    Reads the `real_tokens` metric (summed over the epoch and all replicas;
    `<output>_real_tokens` for a model with several outputs)
    and divides it by the time spent in the epoch's training steps. Hands
    the report to `write` (a function of the JSON body, such as
    `RunDirectory.write_metrics`) after each epoch; None keeps it in memory.
    """

    # The running totals of `report` that a resumed run carries on.
    TOTALS = ("epochs", "train_seconds", "tokens")

    def __init__(self, write=None, *, initial=None):
        super().__init__()
        self.write = write
        self.report = initial or {"epochs": [], "train_seconds": 0.0, "tokens": 0.0}
        self._start = None  # when the epoch's training time began
        self._paused = None  # when validation inside the epoch began

    @classmethod
    def totals_of(cls, metrics):
        """The running totals in `metrics` (a `metrics.json` body this
        callback wrote), the `initial` of a resumed run; None for None."""
        if metrics is None:
            return None
        return {k: v for k, v in metrics.items() if k in cls.TOTALS}

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()
        self._first_step = self.optimizer_step()

    def optimizer_step(self):
        """The model's optimizer step (None without a model, as in tests
        that call the hooks by hand)."""
        model = getattr(self, "model", None)
        optimizer = getattr(model, "optimizer", None)
        return None if optimizer is None else int(optimizer.iterations.numpy())

    def on_test_begin(self, logs=None):
        # Validation time is not training time.
        if self._start is not None:
            self._paused = time.perf_counter()

    def on_test_end(self, logs=None):
        if self._start is not None and self._paused is not None:
            self._start += time.perf_counter() - self._paused
            self._paused = None

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._start
        logs = {k: float(v) for k, v in (logs or {}).items()}
        tokens = real_tokens(logs)
        logs["epoch"] = epoch + 1
        logs["seconds"] = seconds
        logs["real_tokens_per_second"] = tokens / seconds if seconds > 0 else 0.0
        last = self.optimizer_step()
        if last is not None and self._first_step is not None:
            logs["steps"] = last - self._first_step
        epochs = self.report["epochs"]
        if epochs and epochs[-1].get("epoch") == epoch + 1:
            # The rest of an epoch that a time budget cut (a resumed run):
            # one entry for the epoch, not two.
            epochs[-1] = merge_epoch_logs(epochs[-1], logs)
        else:
            epochs.append(logs)
        self.report["train_seconds"] += seconds
        self.report["tokens"] += tokens
        self.flush()

    def summary(self):
        last = self.report["epochs"][-1] if self.report["epochs"] else {}
        seconds = self.report["train_seconds"]
        return {
            **{k: v for k, v in last.items() if k not in ("seconds",)},
            "real_tokens_per_second": self.report["tokens"] / seconds
            if seconds
            else 0.0,
            "train_seconds": seconds,
        }

    def flush(self, extra=None):
        if self.write is not None:
            self.write({**self.report, "summary": self.summary(), **(extra or {})})


class TimeBudget(keras.callbacks.Callback):
    """Stops `fit` after the batch during which `minutes` of wall time (since
    this callback was made, plus what a resumed run used before with a
    budget-clocked schedule) ran out. Keras then validates the cut epoch and
    runs the epoch-end callbacks, so it is saved like any other.

    Args:
        minutes: the budget; 0 or None means no limit.
        clock: a function returning seconds (tests pass a fake one).
        schedule: a `WarmupCosineSchedule` with `clock="budget"`, whose
            share of the budget used this callback keeps up to date before
            each batch (any other schedule is left alone).
        state: what `state()` returned in the run this one resumes: its
            budget continues from the seconds already used, and the
            schedule from where its decay started.
    """

    def __init__(self, minutes, clock=time.perf_counter, schedule=None, state=None):
        super().__init__()
        self.schedule = (
            schedule if getattr(schedule, "clock", None) == "budget" else None
        )
        self.seconds = 60.0 * minutes if minutes else None
        self.clock = clock
        state = state or {}
        self.started = clock() - float(state.get("budget_used_seconds", 0.0))
        if self.schedule is not None and "budget_decay_start" in state:
            self.schedule.decay_start.assign(float(state["budget_decay_start"]))
        self.exhausted = False

    def state(self):
        """For a budget-clocked schedule, the seconds of the budget used and
        the share at which decay started (a resumed run goes on from them);
        empty otherwise (each invocation has the whole budget)."""
        if self.schedule is None:
            return {}
        return {
            "budget_used_seconds": self.clock() - self.started,
            "budget_decay_start": float(
                keras.ops.convert_to_numpy(self.schedule.decay_start)
            ),
        }

    def on_train_batch_begin(self, batch, logs=None):
        # A schedule clocked by the budget (`WarmupCosineSchedule(...,
        # clock="budget")`) reads the share used; warmup ends at its step.
        schedule = self.schedule
        if self.seconds is None or schedule is None:
            return
        used = min((self.clock() - self.started) / self.seconds, 1.0)
        schedule.budget_used.assign(used)
        if int(self.model.optimizer.iterations.numpy()) < schedule.warmup_steps:
            schedule.decay_start.assign(used)

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds is not None and self.clock() - self.started >= self.seconds:
            self.exhausted = True
            self.model.stop_training = True


class AveragedWeights(keras.callbacks.Callback):
    """Puts the optimizer's moving average of the weights in the model for
    validation and for the epoch-end callbacks after this one (the best model,
    the report), and leaves it there when training ends.

    Needs an optimizer made with `use_ema=True`. The average reaches the model
    through the optimizer's public `finalize_variable_values`, and the raw
    weights wait in a host copy until training goes on, so they come back bit
    for bit. Keras's `SwapEMAWeights` swaps in place by adding and
    subtracting, which rounds the raw weights at every swap; with it, a run
    cut short (time budget, early stopping) ended with the raw weights, and a
    `fit` followed by another trained on from the average.

    Args:
        keep_average: whether `fit` ends with the average in the model (the
            trained result) or with the raw weights, the average staying in
            the optimizer, so that the next `fit` trains on exactly where this
            one stopped (a resumed run finishes its interrupted epoch in one
            `fit`, then trains the rest in another). A `fit` stopped by a
            callback keeps the average either way: stopping ends training.
    """

    def __init__(self, *, keep_average=True):
        super().__init__()
        self.keep_average = keep_average
        self._raw = None  # the raw weights while the average is in the model

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        inner = getattr(optimizer, "inner_optimizer", optimizer)  # loss scaling
        if not inner.use_ema:
            raise InputError(
                "AveragedWeights needs an optimizer with use_ema=True. "
                f"Received: {type(inner).__name__}(use_ema={inner.use_ema})"
            )
        self._raw = None

    def _average_in(self):
        if self._raw is None:
            variables = self.model.trainable_variables
            self._raw = [keras.ops.convert_to_numpy(v) for v in variables]
            self.model.optimizer.finalize_variable_values(variables)

    def _raw_back(self):
        if self._raw is not None:
            for variable, value in zip(
                self.model.trainable_variables, self._raw, strict=True
            ):
                variable.assign(value)
            self._raw = None

    def on_test_begin(self, logs=None):
        self._average_in()

    def on_test_end(self, logs=None):
        self._raw_back()

    def on_epoch_end(self, epoch, logs=None):
        self._average_in()

    def on_epoch_begin(self, epoch, logs=None):
        self._raw_back()

    def on_train_end(self, logs=None):
        # `fit` has just put the average in the model itself (its own
        # `finalize_variable_values`); the raw weights go back only when more
        # training follows.
        if self.keep_average or self.model.stop_training:
            self._raw = None
        else:
            self._raw_back()
