"""The training-task interface, and what the text tasks share.

keras-hub separates a backbone (the network) from a task (`Seq2SeqLM`,
`CausalLM`, `TextClassifier`): the task owns its preprocessing, head, loss
and metrics. `TrainingTask` does the same for a whole training program: the
trainer calls its methods and never looks at the task's name. What a
finished run does (predict, evaluate) is its predictor's
(`tfformer.training.predictors`), built from the run directory.

`TaskSchema` is the part every run kind has, trained or converted: the
dataclasses of its config's `data` and `model` sections and their checks
(`config.json` of a converted run parses with them too).
"""

import dataclasses
from typing import Literal

from tfformer.errors import InputError


@dataclasses.dataclass
class TextDataConfig:
    """How a text task tokenizes and batches (every text task's data section
    extends this)."""

    # Seed of shuffling, of the splits and of the vocabulary sample.
    seed: int = 0
    # wordpiece (learned from the training split) or byte; ids and bpe are
    # tokenizers of converted checkpoints (token ids in and out; GPT-2's
    # byte-level BPE), which tfformer does not learn: a causal_lm run
    # fine-tuned from a converted GPT-2 (model.init_from) takes its BPE.
    tokenizer: Literal["wordpiece", "byte", "ids", "bpe", "sentencepiece"] = "wordpiece"
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
    """Which architecture, at which size. None: the preset's value."""

    # A tfformer preset name; None: the task's default preset.
    preset: str | None = None
    num_layers: int | None = None
    hidden_dim: int | None = None
    num_heads: int | None = None
    intermediate_dim: int | None = None
    dropout: float | None = None
    # Dropout on the feed-forward networks' hidden activations; None:
    # `dropout` (with `init_from`: the source's own rate when it records
    # one, as a converted checkpoint's 0.0). 0.0 is the placement of
    # keras-hub's blocks, GPT-2 and BERT.
    activation_dropout: float | None = None
    # The feed-forward networks' activation (a Keras name, or
    # "gelu_approximate": GPT-2's tanh form); None: the builder's.
    activation: str | None = None
    # LoRA (`tfformer.models.lora`): for a run started from
    # `model.init_from`, freeze its backbone and train rank-`lora_rank`
    # adapters on `lora_targets` ("query", "key", "value", "output",
    # "ffn"), scaled by `lora_alpha / lora_rank` (None: alpha = rank). The
    # saved model has them merged. None: every weight trains.
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = ("query", "value")
    lora_alpha: float | None = None


@dataclasses.dataclass
class PreparedData:
    """Everything a run needs from its data.

    `tokenizers` maps roles ("source"/"target", or "text") to tokenizers;
    `examples` maps split names to `pipeline.Examples`; `raw` maps split names
    to the untokenized examples; `bucket_lengths` are the batch shapes;
    `labels` names the classes of a classification task.
    """

    tokenizers: dict
    examples: dict
    raw: dict
    bucket_lengths: tuple
    labels: tuple = ()

    @property
    def num_classes(self):
        return len(self.labels)


def check_lora(model_config):
    """ValueError naming `model.lora_rank`, `model.lora_targets` or
    `model.lora_alpha` when LoRA is asked for where it cannot apply: a
    rank that is not an int >= 1, unknown targets, or a run trained from
    scratch (adapters on random weights learn nothing a full run would
    not). The rank's upper bound (the narrowest projection) is checked
    when the model is built."""
    rank = model_config.lora_rank
    if rank is None:
        return
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise InputError(f"model.lora_rank must be an int >= 1. Received: {rank!r}")
    if getattr(model_config, "init_from", None) is None:
        raise InputError(
            "model.lora_rank fine-tunes a run started from model.init_from (its "
            "weights frozen, adapters trained); this run trains from scratch. "
            f"Received: model.lora_rank={rank} without model.init_from"
        )
    from tfformer.models.lora import check_targets

    check_targets(model_config.lora_targets)
    alpha = model_config.lora_alpha
    if alpha is not None and not (
        isinstance(alpha, int | float) and not isinstance(alpha, bool) and alpha > 0
    ):
        raise InputError(f"model.lora_alpha must be > 0. Received: {alpha!r}")


def check_model_recipe(model_config):
    """ValueError naming `model.dropout`, `model.activation_dropout` or
    `model.activation` when one is set to what no model can take."""
    # The layer helpers are imported where they are used (here and below):
    # the config module, and with it `tfformer-train --help`, loads without
    # Keras and TensorFlow.
    from tfformer.layers.feed_forward import get_activation
    from tfformer.layers.validation import check_rate

    for name in ("dropout", "activation_dropout"):
        check_rate(f"model.{name}", getattr(model_config, name), allow_none=True)
    activation = model_config.activation
    if activation is not None:
        try:
            get_activation(activation)
        except ValueError:
            raise InputError(
                "model.activation must be a Keras activation name (relu, "
                "gelu, silu, ...) or gelu_approximate. Received: "
                f"model.activation={activation!r}"
            ) from None


# Model keys that a run started with `model.init_from` takes from its source
# (the config leaves them unset, or equal to the source's).
INITIAL_RUN_KEYS = (
    "preset",
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "activation",
)


def same_model_setting(name, ours, theirs):
    """Whether the config's `model.<name>` value `ours` is the initial run's
    `theirs`; activations compare as functions (a registered one, such as
    gelu_approximate, serializes to a dict)."""
    from tfformer.layers.feed_forward import get_activation

    if name != "activation":
        return ours == theirs
    try:
        return get_activation(ours) is get_activation(theirs)
    except (TypeError, ValueError):
        return False


def check_initial_settings(where, model_config, keys, theirs):
    """ValueError naming the first of `keys` that `model_config` sets to
    other than the initial run's value in `theirs` (a dict)."""
    for key in keys:
        value, source = getattr(model_config, key), theirs.get(key)
        if value is None or same_model_setting(key, value, source):
            continue
        if key == "activation":
            from tfformer.layers.feed_forward import get_activation

            source = getattr(get_activation(source), "__name__", source)
        raise InputError(
            f"{where}: model.{key} comes from that run ({source!r}); "
            f"leave it unset. Received: model.{key}={value!r}"
        )


def initial_hidden_dropout(model_config, theirs):
    """The feed-forward networks' hidden dropout of a model started from
    `model.init_from`: `model.activation_dropout` when the config sets it,
    else the source blocks' rate `theirs`. That is None (follow
    `model.dropout`) for a model trained with the default, and 0.0 for a
    converted Hugging Face checkpoint: BERT, GPT-2, Llama and ViT have no
    such dropout, so fine-tuning keeps their placement."""
    if model_config.activation_dropout is not None:
        return model_config.activation_dropout
    return theirs


def check_holdout_fraction(data_config):
    """`data.holdout_fraction` of the examples for validation, as many for test."""
    if not 0.0 < data_config.holdout_fraction < 0.5:
        raise InputError(
            "data.holdout_fraction must be in (0, 0.5). "
            f"Received: data.holdout_fraction={data_config.holdout_fraction}"
        )


def holdout_splits(items, data_config):
    """`items` in a shuffled order seeded by `data.seed`: the first
    `data.holdout_fraction` of them for validation, as many for test, the
    rest for training."""
    import numpy as np

    order = np.random.default_rng(data_config.seed).permutation(len(items))
    items = [items[i] for i in order]
    held = int(len(items) * data_config.holdout_fraction)
    return {
        "train": items[2 * held :],
        "validation": items[:held],
        "test": items[held : 2 * held],
    }


def token_compile_arguments(config):
    """Loss and metrics of the tasks that predict a token at every position:
    label-smoothed cross-entropy and accuracy over real (non-padding) tokens,
    and the real-token count behind tokens/s."""
    from tfformer.training.losses import MaskedSparseCategoricalCrossentropy
    from tfformer.training.metrics import MaskedAccuracy, RealTokens

    return {
        "loss": MaskedSparseCategoricalCrossentropy(
            label_smoothing=config.train.label_smoothing
        ),
        "metrics": [MaskedAccuracy(), RealTokens()],
    }


def initial_tokenizer(spec, directory, where):
    """The tokenizer of `spec` (an initial run's `TokenizerSpec`, named by
    `where`: "model.init_from='...'"); a run directory that already holds
    another vocabulary (a run resumed with another init_from) is refused
    before anything is written."""
    import os

    from tfformer.runs.directory import tokenizer_file
    from tfformer.training.text.vocabulary import load_tokenizer

    saved = directory and os.path.join(directory, tokenizer_file(spec.kind, "text"))
    if saved and os.path.isfile(saved):
        with open(saved, "rb") as mine, open(spec.path, "rb") as theirs:
            if mine.read() != theirs.read():
                raise InputError(
                    f"{saved} differs from the vocabulary of {where}: this run "
                    "directory holds another run's vocabulary. Use a new "
                    "train.output_dir."
                )
    return load_tokenizer(spec)


def check_initial_tokenizer(where, spec, data_config, what="tokenizer"):
    """Raises ValueError naming `where` (an initial run) unless the data
    config's tokenizer kind and casing are those of its `spec`."""
    d = data_config
    if d.tokenizer != spec.kind or d.lower_case != spec.lower_case:
        raise InputError(
            f"{where}: its {what} is {spec.kind} with lower_case="
            f"{spec.lower_case}; set data.tokenizer={spec.kind} and "
            f"data.lower_case={str(spec.lower_case).lower()}. Received: "
            f"data.tokenizer={d.tokenizer}, data.lower_case={d.lower_case}"
        )


def check_positive(where, value):
    """Raises ValueError naming `where` unless `value` > 0."""
    if value <= 0:
        raise InputError(f"{where} must be positive. Received: {where}={value}")


def bucket_lengths(data_config):
    """The batch shapes of a text task: `data.bucket_lengths`, or
    `data.max_length` alone."""
    return tuple(data_config.bucket_lengths) or (data_config.max_length,)


def tokenizer_entries(config, data):
    """{role: `TokenizerEntry`} of `data`'s tokenizers, for the manifest."""
    from tfformer.runs.manifest import TokenizerEntry

    return {
        role: TokenizerEntry(
            config.data.tokenizer,
            config.data.lower_case,
            **getattr(tokenizer, "options", dict)(),
        )
        for role, tokenizer in data.tokenizers.items()
    }


class TaskSchema:
    """What a task's `config.json` holds: the dataclasses of its `data` and
    `model` sections, their checks and the model sizes they give.

    Attributes:
        name: the registered name (the config's `task`, the manifest's).
        DataConfig, ModelConfig: dataclasses of the `data` and `model`
            sections.
        backbone_name: the `tfformer.models` backbone class this task's
            presets must build.
        default_preset: the preset used when `model.preset` is None.
    """

    name = None
    DataConfig = TextDataConfig
    ModelConfig = ModelConfig
    backbone_name = None
    default_preset = None

    def validate(self, config):
        """Cross-field checks of the task's sections (ValueError naming the key)."""
        d = config.data
        for name in ("max_length", "vocabulary_size", "vocabulary_sample_size"):
            check_positive(f"data.{name}", getattr(d, name))
        if d.max_length < 4:
            raise InputError(f"data.max_length must be >= 4. Received: {d.max_length}")
        buckets = d.bucket_lengths or (d.max_length,)
        if list(buckets) != sorted(set(buckets)) or buckets[-1] != d.max_length:
            raise InputError(
                "data.bucket_lengths must increase strictly and end at "
                f"data.max_length ({d.max_length}). Received: "
                f"data.bucket_lengths={list(buckets)}"
            )
        if buckets[0] < 2:
            raise InputError(f"data.bucket_lengths must be >= 2. Received: {buckets}")
        check_model_recipe(config.model)
        check_lora(config.model)
        self.model_sizes(config.model)

    def preset(self, model_config):
        """The preset name `model_config` builds on."""
        return model_config.preset or self.default_preset

    def model_sizes(self, model_config):
        """The preset's keyword arguments with the config's overrides applied."""
        from tfformer.models import PRESETS

        preset = self.preset(model_config)
        if preset not in PRESETS:
            raise InputError(
                f"model.preset must be one of {sorted(PRESETS)}. "
                f"Received: model.preset={preset!r}"
            )
        backbone, sizes = PRESETS[preset]
        if backbone.__name__ != self.backbone_name:
            raise InputError(
                f"task {self.name!r} needs a {self.backbone_name} preset. "
                f"Received: model.preset={preset!r} ({backbone.__name__})"
            )
        sizes = dict(sizes)
        names = (
            "hidden_dim",
            "num_heads",
            "intermediate_dim",
            "dropout",
            "activation_dropout",
            "activation",
        )
        for name in names:
            value = getattr(model_config, name)
            if value is not None:
                sizes[name] = value
        if model_config.num_layers is not None:
            if "num_encoder_layers" in sizes:
                sizes["num_encoder_layers"] = model_config.num_layers
                sizes["num_decoder_layers"] = model_config.num_layers
            else:
                sizes["num_layers"] = model_config.num_layers
        return sizes


class TrainingTask(TaskSchema):
    """One kind of training program: what `tfformer.training.trainer` needs.
    Subclasses set `TaskSchema`'s attributes and implement the methods that
    raise NotImplementedError."""

    # -- data --------------------------------------------------------------------

    def raw_splits(self, data_config):
        """Untokenized "train", "validation" and "test" splits."""
        raise NotImplementedError

    def prepare(self, config, raw, directory, progress=print):
        """Tokenizers (reused from `directory` if saved there) and the
        tokenized `raw` splits of `config` (the whole training `Config`): a
        `PreparedData`."""
        raise NotImplementedError

    def run_manifest(self, config, data):
        """The run's typed manifest (`tfformer.runs.manifest`): what
        predictors and exporters need besides tokenizer files and model."""
        raise NotImplementedError

    def save_preprocessing(self, config, data, run):
        """Writes the tokenizer files and the manifest into `run` (a
        `RunDirectory`)."""
        from tfformer.runs.directory import tokenizer_file

        for role, tokenizer in data.tokenizers.items():
            tokenizer.save(run.file(tokenizer_file(config.data.tokenizer, role)))
        run.write_manifest(self.run_manifest(config, data))
        self.save_heldout(data, run)

    # The most test examples `save_heldout` keeps.
    HELDOUT_EXAMPLES = 500

    def save_heldout(self, data, run):
        """Writes the test split's first `HELDOUT_EXAMPLES` into `run` in
        the form `tfformer-export --quality-data` reads, for the export's
        quality gate (`RunDirectory.write_heldout`; default: none)."""
        del data, run

    def training_stream(self, examples, **kwargs):
        """The endless training batches of `examples` (the keywords of
        `pipeline.training_stream`, which text tasks use)."""
        from tfformer.training import pipeline

        return pipeline.training_stream(examples, **kwargs)

    def evaluation_dataset(self, examples, **kwargs):
        """Every example of `examples` once, in static-shape batches (the
        keywords of `pipeline.evaluation_dataset`, which text tasks use)."""
        from tfformer.training import pipeline

        return pipeline.evaluation_dataset(examples, **kwargs)

    # -- model -------------------------------------------------------------------

    def build_model(self, config, data):
        """The uncompiled Keras model for `config.model`, sized to `data`."""
        raise NotImplementedError

    def compile_arguments(self, config):
        """`loss` and metrics for `model.compile` (a dict of its keywords)."""
        raise NotImplementedError

    def final_evaluation(self, config, model, data, progress=print):
        """The end-of-training evaluation beyond the test loss (a dict of
        results; none by default)."""
        del config, model, data, progress
        return {}
