"""Typed training configuration: dataclasses, file loading and `key=value` overrides.

A config file (JSON or YAML) has three sections, `data`, `model` and `train`,
each mapped onto one dataclass below. Unknown keys and values of the wrong type
are rejected with a message that names them, before any work starts.
"""

import dataclasses
import json
import os
import typing
from typing import Literal

TASKS = ("number_words", "parallel_text", "tfds", "text", "labelled_text")
FAMILIES = ("seq2seq", "gpt", "bert_classifier")


@dataclasses.dataclass
class DataConfig:
    """Where the examples come from and how they are tokenized and batched."""

    # number_words (embedded, generated), parallel_text (local files), tfds,
    # text (one plain-text file for the causal LM), labelled_text (one file per
    # class, one sentence per line, for the classifier).
    task: Literal[TASKS] = "number_words"
    # Seed of the generated task, of shuffling and of the splits.
    seed: int = 0
    # number_words: sizes of the generated splits (disjoint).
    train_size: int = 40000
    validation_size: int = 1000
    test_size: int = 1000
    # parallel_text: "{split}" is replaced by train / validation / test.
    source_path: str = ""
    target_path: str = ""
    validation_split_name: str = "val"
    test_split_name: str = "test_2016_flickr"
    # tfds: dataset name, its data_dir, the feature keys of source and target.
    tfds_name: str = ""
    tfds_data_dir: str = ""
    source_key: str = ""
    target_key: str = ""
    # text: one file; the last `holdout_fraction` of it is validation and test.
    text_path: str = ""
    holdout_fraction: float = 0.1
    # labelled_text: one file per class, in class-id order.
    class_paths: tuple[str, ...] = ()
    # wordpiece (learned from the training split) or byte.
    tokenizer: Literal["wordpiece", "byte"] = "wordpiece"
    vocabulary_size: int = 2000
    # WordPiece is learned from at most this many training sentences (seeded
    # sample): the learner's time grows with the number of distinct words.
    vocabulary_sample_size: int = 20000
    lower_case: bool = False
    # Maximum tokens per sequence, start/end included; longer ones are cut.
    max_length: int = 64
    # Sequences are padded up to the smallest of these lengths that fits, so
    # every batch has one of a few static shapes (XLA, TPU). The largest must
    # be max_length; empty means "max_length only".
    bucket_lengths: tuple[int, ...] = ()


@dataclasses.dataclass
class ModelConfig:
    """Which architecture, at which size."""

    family: Literal[FAMILIES] = "seq2seq"
    # A tfformer preset name; the fields below, when set (non-zero), override it.
    preset: str = "transformer_tiny"
    num_layers: int = 0
    hidden_dim: int = 0
    num_heads: int = 0
    intermediate_dim: int = 0
    dropout: float = -1.0
    # seq2seq: none, decoder (tie decoder input and output), all (one vocabulary).
    tie_embeddings: Literal["none", "decoder", "all"] = "decoder"
    # seq2seq: sinusoidal (the paper) or learned position vectors, and whether
    # token embeddings are multiplied by sqrt(hidden_dim) (the paper).
    position: Literal["sinusoidal", "learned"] = "sinusoidal"
    scale_embeddings: bool = True


@dataclasses.dataclass
class TrainConfig:
    """How the model is optimized, distributed, checkpointed and logged."""

    output_dir: str = "runs/number_words"
    # Global batch size (all replicas together).
    batch_size: int = 64
    epochs: int = 10
    # 0 means one pass over the training split per epoch.
    steps_per_epoch: int = 0
    # Paper schedule: lr = scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5).
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    clipnorm: float = 0.0
    label_smoothing: float = 0.1
    # Polyak averaging: > 0 keeps an exponential moving average of the weights
    # with this momentum (0.998 averages over about the last 500 steps).
    # Validation, best.keras and model.keras then use the average; the backup
    # keeps the raw weights (and the average, in the optimizer state).
    ema_momentum: float = 0.0
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
    # Translate the test split greedily after training and report exact match.
    evaluate_exact_match: bool = True
    # Stop early when this many examples of the test split are translated.
    exact_match_examples: int = 1000
    # Stop training after this many minutes of this invocation (0 = no
    # limit); the cut epoch is validated and saved, and a re-run resumes.
    time_budget_minutes: float = 0.0


@dataclasses.dataclass
class Config:
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    def to_dict(self):
        return dataclasses.asdict(self)


_SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig}


def _check_value(where, value, annotation):
    """Returns `value` converted to `annotation`, or raises naming `where`."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if len(choices) == 1 and isinstance(choices[0], tuple):
            choices = choices[0]
        if isinstance(value, bool) and "true" in choices:
            value = str(value).lower()
        if value not in choices:
            raise ValueError(
                f"{where} must be one of {list(choices)}. Received: {where}={value!r}"
            )
        return value
    if origin is tuple:
        (item_type, _) = typing.get_args(annotation)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, list | tuple):
            raise TypeError(f"{where} must be a list. Received: {where}={value!r}")
        return tuple(
            _check_value(f"{where}[{i}]", v, item_type) for i, v in enumerate(value)
        )
    if annotation is bool:
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise TypeError(
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
            raise TypeError(f"{where} must be an int. Received: {where}={value!r}")
        return value
    if annotation is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"{where} must be a number. Received: {where}={value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise TypeError(f"{where} must be a string. Received: {where}={value!r}")
        return value
    raise TypeError(f"Unsupported config type {annotation} for {where}.")


def _section(name, cls, values):
    if not isinstance(values, dict):
        raise TypeError(
            f"Config section {name!r} must be a mapping. Received: {values!r}"
        )
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"Unknown config key(s) {[f'{name}.{k}' for k in unknown]}. "
            f"Known keys of {name!r}: {sorted(known)}"
        )
    return cls(
        **{k: _check_value(f"{name}.{k}", v, hints[k]) for k, v in values.items()}
    )


def config_from_dict(values):
    """Builds a validated `Config` from nested dicts (as read from a file)."""
    if not isinstance(values, dict):
        raise TypeError(f"A config must be a mapping. Received: {values!r}")
    unknown = sorted(set(values) - set(_SECTIONS))
    if unknown:
        raise ValueError(
            f"Unknown config section(s) {unknown}. Known: {sorted(_SECTIONS)}"
        )
    config = Config(
        **{
            name: _section(name, cls, values.get(name, {}))
            for name, cls in _SECTIONS.items()
        }
    )
    validate(config)
    return config


def apply_overrides(values, overrides):
    """Applies `section.key=value` strings onto nested dicts (a copy)."""
    values = json.loads(json.dumps(values))
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"--set takes section.key=value. Received: --set {item!r}")
        key, raw = item.split("=", 1)
        if key.count(".") != 1:
            raise ValueError(
                f"--set key must be section.key (e.g. train.epochs). Received: {key!r}"
            )
        section, name = key.split(".")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        values.setdefault(section, {})[name] = value
    return values


def read_config_file(path):
    """The nested dicts in a `.json`, `.yaml` or `.yml` file."""
    if not os.path.isfile(path):
        raise ValueError(f"config file not found. Received: --config {path!r}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith((".yaml", ".yml")):
        import yaml

        return yaml.safe_load(text) or {}
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None
    raise ValueError(f"config must be .json, .yaml or .yml. Received: {path!r}")


def load_config(path=None, overrides=()):
    """Reads a config file (or the defaults), applies overrides and validates."""
    values = read_config_file(path) if path else {}
    return config_from_dict(apply_overrides(values, overrides))


def _positive(where, value):
    if value <= 0:
        raise ValueError(f"{where} must be positive. Received: {where}={value}")


def validate(config):
    """Cross-field checks; raises ValueError naming the offending key."""
    d, m, t = config.data, config.model, config.train
    for name in (
        "max_length",
        "vocabulary_size",
        "vocabulary_sample_size",
    ):
        _positive(f"data.{name}", getattr(d, name))
    for name in ("batch_size", "epochs", "warmup_steps", "steps_per_execution"):
        _positive(f"train.{name}", getattr(t, name))
    _positive("train.learning_rate_scale", t.learning_rate_scale)
    _positive("train.checkpoint_every_steps", t.checkpoint_every_steps)
    if t.steps_per_epoch < 0:
        raise ValueError(
            f"train.steps_per_epoch must be >= 0. Received: {t.steps_per_epoch}"
        )
    if t.steps_per_epoch % t.steps_per_execution:
        raise ValueError(
            "train.steps_per_epoch must be a multiple of train.steps_per_execution: "
            "Keras runs whole executions, so each epoch would train on into the "
            f"next one. Received: train.steps_per_epoch={t.steps_per_epoch}, "
            f"train.steps_per_execution={t.steps_per_execution}"
        )
    if m.family != "seq2seq" and (m.position != "sinusoidal" or not m.scale_embeddings):
        raise ValueError(
            "model.position and model.scale_embeddings apply to the seq2seq "
            f"family only (the {m.family} presets fix their own). Received: "
            f"model.position={m.position!r}, "
            f"model.scale_embeddings={m.scale_embeddings}"
        )
    if not 0.0 <= t.ema_momentum < 1.0:
        raise ValueError(
            "train.ema_momentum must be in [0, 1) (0 = no averaging). "
            f"Received: train.ema_momentum={t.ema_momentum}"
        )
    if not 0.0 <= t.label_smoothing < 1.0:
        raise ValueError(
            "train.label_smoothing must be in [0, 1). "
            f"Received: train.label_smoothing={t.label_smoothing}"
        )
    if not 0.0 < d.holdout_fraction < 0.5:
        raise ValueError(
            "data.holdout_fraction must be in (0, 0.5). "
            f"Received: data.holdout_fraction={d.holdout_fraction}"
        )
    if d.max_length < 4:
        raise ValueError(f"data.max_length must be >= 4. Received: {d.max_length}")
    buckets = d.bucket_lengths or (d.max_length,)
    if list(buckets) != sorted(set(buckets)) or buckets[-1] != d.max_length:
        raise ValueError(
            "data.bucket_lengths must increase strictly and end at data.max_length "
            f"({d.max_length}). Received: data.bucket_lengths={list(buckets)}"
        )
    if buckets[0] < 2:
        raise ValueError(f"data.bucket_lengths must be >= 2. Received: {buckets}")
    needs = {
        "parallel_text": ("source_path", "target_path"),
        "tfds": ("tfds_name", "source_key", "target_key"),
        "text": ("text_path",),
        "labelled_text": ("class_paths",),
    }.get(d.task, ())
    for name in needs:
        if not getattr(d, name):
            raise ValueError(f"data.task={d.task!r} needs data.{name}.")
    expected = {
        "number_words": "seq2seq",
        "parallel_text": "seq2seq",
        "tfds": "seq2seq",
        "text": "gpt",
        "labelled_text": "bert_classifier",
    }[d.task]
    if m.family != expected:
        raise ValueError(
            f"data.task={d.task!r} trains model.family={expected!r}. "
            f"Received: model.family={m.family!r}"
        )
    if d.task == "labelled_text" and len(d.class_paths) < 2:
        raise ValueError(
            f"data.class_paths needs a file per class (>= 2). Received: {d.class_paths}"
        )
    if t.time_budget_minutes < 0:
        raise ValueError(
            "train.time_budget_minutes must be >= 0 (0 = no limit). "
            f"Received: train.time_budget_minutes={t.time_budget_minutes}"
        )
    if t.time_budget_minutes and t.strategy == "multi_worker":
        raise ValueError(
            "train.time_budget_minutes is not supported with "
            "train.strategy='multi_worker': workers would stop at different steps."
        )
    if t.strategy == "tpu" and t.precision == "mixed_float16":
        raise ValueError("TPUs train in mixed_bfloat16, not mixed_float16.")
    return config
