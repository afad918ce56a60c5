"""What the string models share: `StringModel` (a task model with its
preprocessor, `fit`/`evaluate`/`predict` on strings, `.keras` and
run-directory saving) and its helpers."""

import contextlib
import os
import shutil
import tempfile
import warnings

import keras
import tensorflow as tf

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.directory import RunDirectory, tokenizer_file

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def string_list(values, name):
    """`values` as a list of str; TypeError naming `name` otherwise."""
    if isinstance(values, str | bytes):
        raise InputTypeError(f"{name} must be a list of strings, not one string.")
    if isinstance(values, tf.Tensor):
        values = values.numpy().tolist()
    try:
        values = list(values)
    except TypeError:
        raise InputTypeError(
            f"{name} must be a list of strings. Received: {type(values).__name__}"
        ) from None
    for value in values:
        if not isinstance(value, str | bytes):
            raise InputTypeError(
                f"{name} must be a list of strings (not nested). Received: an "
                f"item of type {type(value).__name__}: {value!r:.60}"
            )
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]


def rebuilt(model, precision, **backbone_changes):
    """A copy of the task model `model`, its backbone rebuilt from its config
    under `precision` (new variables, in the current strategy's scope) with
    `backbone_changes` applied, and `model`'s weights."""
    backbone = model.backbone
    config = {**backbone.get_config(), **backbone_changes, "dtype": precision}
    copy = type(backbone).from_config(config)
    copy.set_weights(backbone.get_weights())
    task_config = {**model.get_config(), "backbone": copy}
    head = type(model).from_config(task_config)
    head.set_weights(model.get_weights())
    return head


@contextlib.contextmanager
def scope_of(strategy):
    if strategy is None:
        yield
    else:
        if not isinstance(strategy, tf.distribute.Strategy):
            raise InputTypeError(
                "strategy must be a tf.distribute.Strategy or None. Received: "
                f"{type(strategy).__name__}"
            )
        with strategy.scope():
            yield


def checked_precision(precision):
    if precision is not None and precision not in PRECISIONS:
        raise InputError(
            f"precision must be None (the run's) or one of {PRECISIONS}. "
            f"Received: {precision!r}"
        )
    return precision


def opened_run(path, tasks, checkpoint, precision):
    """(RunDirectory, manifest, the saved task model, the precision to
    build under) of the run at `path`, one of `tasks` (ValueError naming
    `path` or `precision` otherwise)."""
    checked_precision(precision)
    directory = RunDirectory(path)
    manifest = directory.manifest
    if manifest.task not in tasks:
        raise InputError(
            f"path must be a {' or '.join(tasks)} run. "
            f"Received: a {manifest.task} run ({path})"
        )
    source = directory.load_model(checkpoint)
    return directory, manifest, source, run_precision(source, precision)


def run_label_smoothing(directory):
    """The label smoothing the run trained with (`config.json`'s
    `train.label_smoothing`; 0 for a converted checkpoint, which records
    no training)."""
    train = directory.read_config().get("train") or {}
    return float(train.get("label_smoothing", 0.0))


def run_precision(source, precision):
    """`precision`, or for None the dtype policy the run's model was saved
    under (what `tfformer.load` predicts with)."""
    return source.backbone.dtype_policy.name if precision is None else precision


@contextlib.contextmanager
def new_run_directory(path):
    """Yields an empty staging directory beside `path` and, when the block
    ends without an error, renames it to `path`; nothing is left behind
    otherwise. `path` must not exist yet, or be empty."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise InputError(f"path must be a directory path. Received: {path!r}")
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise InputError(
            f"path must be a new or empty directory (a run is never written "
            f"over). Received: {path!r}"
        )
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".string-model-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    try:
        yield staging
        if os.path.isdir(path):
            os.rmdir(path)
        os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


class StringModel(keras.Model):
    """A task model with its preprocessor (see the module docstring).

    Args:
        model: the `tfformer.models` task model (ids in).
        preprocessor: the task's preprocessor layer.
    """

    # The learning rate of the default optimizer (keras-hub's fine-tuning
    # defaults; pass `compile(optimizer=...)` for another).
    default_learning_rate = 5e-5

    def __init__(self, model, preprocessor, label_smoothing=0.0, **kwargs):
        super().__init__(**kwargs)
        self.model = model
        self.preprocessor = preprocessor
        # The default loss's (token tasks): the run's `train.label_smoothing`.
        self.label_smoothing = float(label_smoothing)
        # True inside `fit`: Keras then calls `evaluate` on the validation
        # data this model already preprocessed.
        self.fitting = False
        self.check_vocabularies()

    # -- what subclasses give ----------------------------------------------------

    def tokenizers(self):
        """{role: Tokenizer layer} of the preprocessor."""
        raise NotImplementedError

    def vocabulary_sizes(self):
        """{role: the model's embedding rows} for the roles of `tokenizers`."""
        raise NotImplementedError

    def default_loss(self):
        raise NotImplementedError

    def default_metrics(self):
        raise NotImplementedError

    def checked_examples(self, x, y, sample_weight):
        """(x, y, sample_weight) as `tf.data.Dataset.from_tensor_slices`
        takes them (ValueError/TypeError naming the argument), and how many
        examples there are."""
        raise NotImplementedError

    def cut_counts(self, x, y):
        """{argument: how many of the checked `x` (or `y`) are longer than
        the model reads}."""
        return {}

    # -- Keras ---------------------------------------------------------------

    def call(self, inputs, training=None):
        return self.model(inputs, training=training)

    def check_vocabularies(self):
        sizes = self.vocabulary_sizes()
        for role, tokenizer in self.tokenizers().items():
            if not tokenizer.ready:  # restored: its assets come later
                continue
            if tokenizer.vocabulary_size > sizes[role]:
                raise InputError(
                    f"preprocessor: the {role} tokenizer has "
                    f"{tokenizer.vocabulary_size} tokens, the model's embedding "
                    f"{sizes[role]} rows. Received: a preprocessor of another "
                    "vocabulary"
                )

    def compile(self, optimizer="auto", loss="auto", weighted_metrics="auto", **kwargs):
        """Keras's `compile`, with the task's defaults for "auto": Adam at
        `default_learning_rate`, and the loss and metrics the trainer uses."""
        with self.distribute_strategy.scope():  # the optimizer's variables
            self.compile_in_scope(optimizer, loss, weighted_metrics, **kwargs)

    def compile_in_scope(self, optimizer, loss, weighted_metrics, **kwargs):
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(self.default_learning_rate)
        if loss == "auto":
            loss = self.default_loss()
        if weighted_metrics == "auto":
            weighted_metrics = self.default_metrics()
        super().compile(
            optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs
        )

    def dataset(
        self, x, y=None, sample_weight=None, *, batch_size=32, shuffle=False, seed=None
    ):
        """The `tf.data.Dataset` `fit` reads: `x` (strings, as the task
        takes them) batched and preprocessed; or `x` a `tf.data.Dataset` of
        batches of what the preprocessor takes (strings, and class ids or
        targets), preprocessed (and, for a causal LM, its windows batched
        by `batch_size`)."""
        self.check_vocabularies()
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or batch_size < 1
        ):
            raise InputError(
                f"batch_size must be a positive int. Received: {batch_size!r}"
            )
        if isinstance(x, tf.data.Dataset):
            if y is not None or sample_weight is not None:
                raise InputError(
                    "y and sample_weight must be None when x is a tf.data.Dataset "
                    "(its elements hold them)."
                )
            data = x
        else:
            x, y, sample_weight, count = self.checked_examples(x, y, sample_weight)
            if count == 0:
                raise InputError("x must hold at least one input. Received: none")
            for name, cut in self.cut_counts(x, y).items():
                if cut:
                    warnings.warn(
                        f"{name}: {cut} of {count} are longer than the model "
                        f"reads ({self.preprocessor.sequence_length} tokens) and "
                        "are cut as training cuts them.",
                        stacklevel=3,
                    )
            data = tf.data.Dataset.from_tensor_slices(
                keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
            )
            if shuffle:
                data = data.shuffle(count, seed=seed, reshuffle_each_iteration=True)
            data = data.batch(batch_size)
        data = data.map(self.preprocessor, num_parallel_calls=tf.data.AUTOTUNE)
        data = self.rebatched(data, x, batch_size, shuffle, seed)
        return data.prefetch(tf.data.AUTOTUNE)

    def rebatched(self, data, x, batch_size, shuffle, seed):
        """`data` (preprocessed batches of the checked `x`, or of a dataset
        `x`) as `fit` reads it: as it is, unless a subclass's preprocessor
        changes the rows."""
        return data

    def fit(
        self,
        x=None,
        y=None,
        batch_size=32,
        epochs=1,
        *,
        sample_weight=None,
        validation_data=None,
        shuffle=True,
        seed=None,
        **kwargs,
    ):
        """Keras's `fit` on strings: `x` and `y` as the task takes them, or a
        `tf.data.Dataset` of them; `validation_data` likewise ((x, y), or x
        alone for a causal LM). Compiles with the defaults first when
        `compile` was not called."""
        if not self.compiled:
            self.compile()
        data = self.dataset(
            x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed
        )
        if validation_data is not None:
            validation_data = self.dataset(
                *self.unpacked(validation_data, "validation_data"),
                batch_size=batch_size,
            )
        self.fitting = True
        try:
            # Shuffled above (Keras leaves a dataset's order alone).
            return super().fit(
                data,
                epochs=epochs,
                validation_data=validation_data,
                shuffle=False,
                **kwargs,
            )
        finally:
            self.fitting = False

    def evaluate(self, x=None, y=None, batch_size=32, *, sample_weight=None, **kwargs):
        """Keras's `evaluate` on strings (as `fit` takes them)."""
        if self.fitting:  # Keras, on the validation data `fit` prepared
            return super().evaluate(
                x, y, batch_size=batch_size, sample_weight=sample_weight, **kwargs
            )
        if not self.compiled:
            self.compile()
        data = self.dataset(x, y, sample_weight, batch_size=batch_size)
        return super().evaluate(data, **kwargs)

    def predict(self, x, batch_size=32, **kwargs):
        """The model's outputs (logits) for the strings `x` (one row per
        input; a causal LM's, one per window)."""
        data = self.dataset(x, batch_size=batch_size)
        return super().predict(data, **kwargs)

    def compile_from_config(self, config):
        """Compiles a model read from a `.keras` file as it was saved."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    def unpacked(self, data, name):
        if isinstance(data, tf.data.Dataset):
            return (data, None, None)
        if isinstance(data, tuple) and len(data) in (2, 3):
            return (*data, None)[:3]
        raise InputError(
            f"{name} must be (x, y), (x, y, sample_weight) or a tf.data.Dataset. "
            f"Received: {type(data).__name__}"
        )

    def get_config(self):
        return {
            **super().get_config(),
            "label_smoothing": self.label_smoothing,
            "model": keras.saving.serialize_keras_object(self.model),
            "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("model", "preprocessor"):
            config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)

    # -- run directories ---------------------------------------------------------

    def run_files(self):
        """(manifest, training config dict) of a run of this model."""
        raise NotImplementedError

    def save_run(self, path):
        """Writes a run directory of this model at `path` (new or empty; a
        run is never written over): `model.keras` (the task model, ids in),
        the tokenizers' files, `run.json` and `config.json`, so
        `tfformer.load`, `tfformer-predict` and `tfformer-export` read it like
        any run. Nothing is left at `path` if writing fails."""
        manifest, config = self.run_files()
        from tfformer.training.config import config_from_dict

        config_from_dict(config)  # what tfformer.load reads back
        with new_run_directory(path) as staging:
            run = RunDirectory(staging)
            for role, tokenizer in self.tokenizers().items():
                tokenizer.tokenizer.save(run.file(tokenizer_file(tokenizer.kind, role)))
            self.model.save(run.file("model.keras"))
            run.write_manifest(manifest)
            run.write_config(config)
        return os.path.abspath(os.fspath(path))


def tokenizer_entries(layers):
    from tfformer.runs.manifest import TokenizerEntry

    return {
        role: TokenizerEntry.from_json(layer.get_config()["entry"], role)
        for role, layer in layers.items()
    }


def data_section(tokenizer, max_length):
    entry = tokenizer.get_config()["entry"]
    return {
        "tokenizer": entry["kind"],
        "lower_case": entry.get("lower_case", False),
        "max_length": max_length,
        "vocabulary_size": tokenizer.vocabulary_size,
    }
