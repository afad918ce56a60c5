"""Typed training configuration: dataclasses, file loading and `key=value` overrides.

A config file (JSON or YAML) names its `task` and has three sections, `data`,
`model` and `train`. The task (see `tfformer.training.tasks`) owns the
dataclasses of `data` and `model`; `train` (`TrainConfig`) is the same for
every task. Unknown keys and values of the wrong type are rejected with a
message that names them, before any work starts.
"""

import dataclasses
import json
import os
import types
import typing
from typing import Literal

from tfformer.errors import InputError, InputTypeError
from tfformer.training.tasks import DEFAULT_TASK, TASK_NAMES, task_schema
from tfformer.training.tasks.base import check_positive


@dataclasses.dataclass
class TrainConfig:
    """How the model is optimized, distributed, checkpointed and logged."""

    output_dir: str = "runs/number_words"
    # Global batch size (all replicas together), in sequences.
    batch_size: int = 64
    # Token-budget batching (fairseq's max_tokens) for training: a batch of
    # length bucket L holds batch_tokens // L sequences (rounded down to a
    # multiple of the replicas), so short sentences come in big batches and
    # long ones in small, and every step does about the same work. None:
    # train.batch_size sequences in every bucket. Evaluation always batches
    # train.batch_size sequences. Sequence tasks only.
    batch_tokens: int | None = None
    epochs: int = 10
    # None: one pass over the training split per epoch.
    steps_per_epoch: int | None = None
    # "paper": lr = scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5).
    # "cosine": linear warmup to train.learning_rate over warmup_steps, then
    # a half cosine down to learning_rate * final_learning_rate_fraction at
    # schedule_steps (None: epochs * steps per epoch), flat after it.
    # "linear": the same with a straight line down (BERT's fine-tuning
    # schedule, with final_learning_rate_fraction 0).
    schedule: Literal["paper", "cosine", "linear"] = "paper"
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    # Peak learning rate of "cosine" (unused by "paper").
    learning_rate: float | None = None
    final_learning_rate_fraction: float = 0.1
    schedule_steps: int | None = None
    # What the "cosine"/"linear" decay runs on: "steps" (to schedule_steps),
    # or "budget": warmup by steps, then decay over the share of
    # time_budget_minutes left after warmup, so it reaches its floor when the
    # budget ends whatever the machine's speed (no probe, no guess of steps).
    # The budget is then the run's total: a resumed run goes on from the
    # time already used.
    schedule_clock: Literal["steps", "budget"] = "steps"
    # "adamw": Adam with decoupled weight decay (Loshchilov & Hutter) on
    # every weight but biases and LayerNorm scales and offsets, as BERT.
    optimizer: Literal["adam", "adamw"] = "adam"
    # adamw's decay per step, times the learning rate (BERT: 0.01).
    weight_decay: float = 0.01
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    # Gradient clipping by global norm; None: no clipping.
    clipnorm: float | None = None
    label_smoothing: float = 0.1
    # Polyak averaging: keeps an exponential moving average of the weights
    # with this momentum (0.998 averages over about the last 500 steps);
    # None: no averaging. Validation, best.keras and model.keras then use
    # the average; the backup keeps the raw weights (and the average, in the
    # optimizer state).
    ema_momentum: float | None = None
    # auto | one_device | mirrored | multi_worker | tpu.
    strategy: Literal["auto", "one_device", "mirrored", "multi_worker", "tpu"] = "auto"
    # mirrored: devices to replicate on; empty means every visible GPU.
    devices: tuple[str, ...] = ()
    # tpu: the TPU name or grpc:// address given to TPUClusterResolver.
    tpu: str = ""
    precision: Literal["float32", "mixed_float16", "mixed_bfloat16"] = "float32"
    # XLA: "auto" lets Keras decide; true compiles the whole train step.
    jit_compile: Literal["auto", "true", "false"] = "auto"
    # Optimizer steps per call of the compiled train function. Keras runs
    # whole executions, so it must divide train.steps_per_epoch (a count
    # derived from the data is rounded down to a multiple of it).
    steps_per_execution: int = 1
    # Backup for preemption every this many optimizer steps (and each epoch).
    # Callbacks run only between executions: with train.steps_per_execution
    # > 1 the backup is taken at the end of the first execution that reaches
    # or passes each multiple, and records that step (4 with 3: 6, 9, 12, ...).
    checkpoint_every_steps: int = 200
    # Seed of weight initialization and dropout.
    seed: int = 0
    # 1 = progress bar, 2 = one line per epoch, 0 = silent.
    verbose: int = 1
    # After training, the task's own end-of-run evaluation on at most
    # `final_evaluation_examples` test examples (translation: exact match of
    # greedy translations; the other tasks have none beyond the test loss).
    final_evaluation: bool = True
    final_evaluation_examples: int = 1000
    # Stop training after this many minutes of this invocation (None: no
    # limit); the cut epoch is validated and saved, and a re-run resumes.
    time_budget_minutes: float | None = None


@dataclasses.dataclass
class Config:
    """A whole training config: the task's name and its three sections."""

    task: str = DEFAULT_TASK
    data: object = None
    model: object = None
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    def to_dict(self):
        return dataclasses.asdict(self)


def _check_value(where, value, annotation):
    """Returns `value` converted to `annotation`, or raises naming `where`."""
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() == "null"):
            return None
        (inner,) = options
        return _check_value(where, value, inner)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if isinstance(value, bool) and "true" in choices:
            value = str(value).lower()
        if value not in choices:
            raise InputError(
                f"{where} must be one of {list(choices)}. Received: {where}={value!r}"
            )
        return value
    if origin is tuple:
        (item_type, _) = typing.get_args(annotation)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise InputTypeError(f"{where} must be a list. Received: {where}={value!r}")
        return tuple(
            _check_value(f"{where}[{i}]", v, item_type) for i, v in enumerate(value)
        )
    if annotation is bool:
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise InputTypeError(
                f"{where} must be true or false. Received: {where}={value!r}"
            )
        return value
    if annotation is int:
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputTypeError(f"{where} must be an int. Received: {where}={value!r}")
        return value
    if annotation is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputTypeError(
                f"{where} must be a number. Received: {where}={value!r}"
            )
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise InputTypeError(
                f"{where} must be a string. Received: {where}={value!r}"
            )
        return value
    raise TypeError(f"no parser for {annotation} ({where})")  # a fault, not input


def parse_section(name, cls, values):
    """A `cls` dataclass from a mapping, every value checked against its type."""
    if not isinstance(values, dict):
        raise InputTypeError(
            f"Config section {name!r} must be a mapping. Received: {values!r}"
        )
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InputError(
            f"Unknown config key(s) {[f'{name}.{k}' for k in unknown]}. "
            f"Known keys of {name!r}: {sorted(known)}"
        )
    return cls(
        **{k: _check_value(f"{name}.{k}", v, hints[k]) for k, v in values.items()}
    )


_SECTIONS = ("data", "model", "train")


def config_from_dict(values):
    """Builds a validated `Config` from nested dicts (as read from a file)."""
    if not isinstance(values, dict):
        raise InputTypeError(f"A config must be a mapping. Received: {values!r}")
    unknown = sorted(set(values) - {"task", *_SECTIONS})
    if unknown:
        raise InputError(
            f"Unknown config section(s) {unknown}. Known: ['task', "
            f"{', '.join(repr(s) for s in _SECTIONS)}]"
        )
    name = values.get("task", DEFAULT_TASK)
    if name not in TASK_NAMES:
        raise InputError(
            f"task must be one of {list(TASK_NAMES)}. Received: task={name!r}"
        )
    task = task_schema(name)
    config = Config(
        task=name,
        data=parse_section("data", task.DataConfig, values.get("data", {})),
        model=parse_section("model", task.ModelConfig, values.get("model", {})),
        train=parse_section("train", TrainConfig, values.get("train", {})),
    )
    validate(config)
    return config


def apply_overrides(values, overrides):
    """Applies `section.key=value` (or `task=name`) strings onto nested dicts
    (a copy)."""
    values = json.loads(json.dumps(values))
    for item in overrides:
        if "=" not in item:
            raise InputError(f"--set takes section.key=value. Received: --set {item!r}")
        key, raw = item.split("=", 1)
        if key == "task":
            values["task"] = raw
            continue
        if key.count(".") != 1:
            raise InputError(
                "--set key must be section.key (e.g. train.epochs) or task. "
                f"Received: {key!r}"
            )
        section, name = key.split(".")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
            if raw.startswith("[") and raw.endswith("]"):  # [query,value]
                parts = [part.strip() for part in raw[1:-1].split(",")]
                value = [typed(part) for part in parts if part]
        if not isinstance(values.setdefault(section, {}), dict):
            raise InputTypeError(
                f"{section} must be a mapping of settings. Received: "
                f"{section}={values[section]!r}"
            )
        values[section][name] = value
    return values


def typed(text):
    """`text` read as JSON (a number, true, a quoted string), else as it is."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def read_config_file(path):
    """The nested dicts in a `.json`, `.yaml` or `.yml` file."""
    if not os.path.isfile(path):
        raise InputError(f"config file not found. Received: --config {path!r}")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError) as e:
        raise InputError(f"config file {path!r} is unreadable: {e}") from None
    if path.endswith((".yaml", ".yml")):
        import yaml

        try:
            values = yaml.safe_load(text) or {}
            json.dumps(values)  # YAML's dates, sets and bytes are no settings
            return values
        except TypeError as e:
            raise InputError(
                f"{path} holds a value that is not a setting: {e}; quote it"
            ) from None
        except yaml.YAMLError as e:
            raise InputError(
                f"{path} is not valid YAML: {' '.join(str(e).split())}"
            ) from None
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path} is not valid JSON: {e}") from None
    raise InputError(f"config must be .json, .yaml or .yml. Received: {path!r}")


def load_config(path=None, overrides=()):
    """Reads a config file (or the defaults), applies overrides and validates."""
    values = read_config_file(path) if path else {}
    return config_from_dict(apply_overrides(values, overrides))


def validate(config):
    """Cross-field checks of `train`, then the task's own; raises ValueError
    naming the offending key."""
    t = config.train
    # NumPy's and Keras's generators take seeds of 0 to 2**32 - 1.
    for where, seed in (
        ("train.seed", t.seed),
        ("data.seed", getattr(config.data, "seed", 0)),
    ):
        if not 0 <= seed < 2**32:
            raise InputError(f"{where} must be in [0, 2**32). Received: {seed}")
    for name in ("batch_size", "epochs", "warmup_steps", "steps_per_execution"):
        check_positive(f"train.{name}", getattr(t, name))
    check_positive("train.learning_rate_scale", t.learning_rate_scale)
    if t.batch_tokens is not None:
        check_positive("train.batch_tokens", t.batch_tokens)
    check_positive("train.checkpoint_every_steps", t.checkpoint_every_steps)
    if t.schedule == "paper" and (
        t.learning_rate is not None or t.schedule_steps is not None
    ):
        raise InputError(
            "train.learning_rate and train.schedule_steps belong to "
            "train.schedule='cosine' or 'linear'; the paper schedule is scaled with "
            "train.learning_rate_scale. Received: "
            f"train.learning_rate={t.learning_rate}, "
            f"train.schedule_steps={t.schedule_steps}"
        )
    if not 0.0 <= t.weight_decay < 1.0:
        raise InputError(
            f"train.weight_decay must be in [0, 1). Received: {t.weight_decay}"
        )
    if t.schedule in ("cosine", "linear"):
        if t.learning_rate is None:
            raise InputError(
                f"train.schedule={t.schedule!r} needs train.learning_rate (its "
                "peak). Received: train.learning_rate=None"
            )
        check_positive("train.learning_rate", t.learning_rate)
        if not 0.0 <= t.final_learning_rate_fraction <= 1.0:
            raise InputError(
                "train.final_learning_rate_fraction must be in [0, 1]. Received: "
                f"{t.final_learning_rate_fraction}"
            )
        if t.schedule_steps is not None:
            check_positive("train.schedule_steps", t.schedule_steps)
            if t.schedule_steps <= t.warmup_steps:
                raise InputError(
                    "train.schedule_steps must exceed train.warmup_steps. "
                    f"Received: train.schedule_steps={t.schedule_steps}, "
                    f"train.warmup_steps={t.warmup_steps}"
                )
    if t.steps_per_epoch is not None:
        check_positive("train.steps_per_epoch", t.steps_per_epoch)
        if t.steps_per_epoch % t.steps_per_execution:
            raise InputError(
                "train.steps_per_epoch must be a multiple of "
                "train.steps_per_execution: Keras runs whole executions, so each "
                "epoch would train on into the next one. Received: "
                f"train.steps_per_epoch={t.steps_per_epoch}, "
                f"train.steps_per_execution={t.steps_per_execution}"
            )
    if t.clipnorm is not None:
        check_positive("train.clipnorm", t.clipnorm)
    if t.ema_momentum is not None and not 0.0 < t.ema_momentum < 1.0:
        raise InputError(
            "train.ema_momentum must be in (0, 1), or null for no averaging. "
            f"Received: train.ema_momentum={t.ema_momentum}"
        )
    if not 0.0 <= t.label_smoothing < 1.0:
        raise InputError(
            "train.label_smoothing must be in [0, 1). "
            f"Received: train.label_smoothing={t.label_smoothing}"
        )
    if t.final_evaluation_examples < 1:
        raise InputError(
            "train.final_evaluation_examples must be >= 1 (train.final_evaluation"
            f"=false skips it). Received: {t.final_evaluation_examples}"
        )
    if t.schedule_clock == "budget" and (
        t.schedule not in ("cosine", "linear") or t.time_budget_minutes is None
    ):
        raise InputError(
            "train.schedule_clock='budget' decays a 'cosine' or 'linear' schedule "
            "over train.time_budget_minutes; set both. Received: "
            f"train.schedule={t.schedule!r}, "
            f"train.time_budget_minutes={t.time_budget_minutes}"
        )
    if t.time_budget_minutes is not None:
        check_positive("train.time_budget_minutes", t.time_budget_minutes)
        if t.strategy == "multi_worker":
            raise InputError(
                "train.time_budget_minutes is not supported with "
                "train.strategy='multi_worker': workers would stop at different "
                "steps."
            )
    if t.strategy == "tpu" and t.precision == "mixed_float16":
        raise InputError("TPUs train in mixed_bfloat16, not mixed_float16.")
    task_schema(config.task).validate(config)
    return config
