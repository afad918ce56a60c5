"""`StringClassifier`: a text classifier on strings."""

import keras
import numpy as np

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.manifest import TextClassificationManifest
from tfformer.training.preprocessors import Tokenizer
from tfformer.training.preprocessors.tasks import TextClassifierPreprocessor
from tfformer.training.string_models.base import (
    StringModel,
    data_section,
    opened_run,
    rebuilt,
    scope_of,
    string_list,
    tokenizer_entries,
)


@keras.saving.register_keras_serializable(package="tfformer")
class StringClassifier(StringModel):
    """A text classifier on strings (see `StringModel`).

    `fit(x, y)`: `x` a list of texts, or of `(text_a, text_b)` pairs for a
    pair classifier; `y` labels, as class names (`labels`) or class ids.

    Args:
        model: a `tfformer.models.TextClassifier`.
        preprocessor: a `TextClassifierPreprocessor`.
        labels: the class names in class-id order.
    """

    def __init__(self, model, preprocessor, labels, **kwargs):
        labels = [str(label) for label in labels]
        if len(labels) != model.num_classes:
            raise InputError(
                f"labels must name the model's {model.num_classes} classes. "
                f"Received: {labels}"
            )
        self.labels = labels
        super().__init__(model, preprocessor, **kwargs)

    @classmethod
    def from_run(
        cls,
        path,
        *,
        checkpoint="model.keras",
        labels=None,
        sequence_length=None,
        dropout=None,
        strategy=None,
        precision=None,
    ):
        """The classifier of a text-classification run (its labels), or a new
        head for `labels` on the encoder of a masked-LM or
        sentence-embedding run (a converted BERT or MiniLM).

        Args:
            path: the run directory.
            checkpoint: "model.keras" (final) or "best.keras".
            labels: class names (a new head); None for a classifier run.
            sequence_length: inputs are cut and padded to it (default: the
                run's `max_length`).
            dropout: the encoder's dropout (default: the run's; a new head's
                is 0.1 when the run's is 0).
            strategy: a `tf.distribute.Strategy` to build the model under.
            precision: "float32", "mixed_bfloat16" or "mixed_float16"; None:
                the policy the run's model was saved under.
        """
        from tfformer.models import bert_classifier
        from tfformer.training.tasks.text_classification import copy_encoder_weights

        tasks = ("text_classification", "masked_lm", "sentence_embedding")
        _, manifest, source, precision = opened_run(path, tasks, checkpoint, precision)
        length = manifest.max_length if sequence_length is None else sequence_length
        if (
            isinstance(length, bool)
            or not isinstance(length, int)
            or not 3 <= length <= manifest.max_length
        ):
            raise InputError(
                f"sequence_length must be an int in [3, {manifest.max_length}] (the "
                f"run's max_length). Received: {sequence_length!r}"
            )
        changes = {} if dropout is None else {"dropout": dropout}
        pairs = False
        if manifest.task == "text_classification":
            if labels is not None and list(labels) != list(manifest.labels):
                raise InputError(
                    f"labels must be None or the run's {list(manifest.labels)} "
                    f"for a classifier run. Received: {list(labels)}"
                )
            labels, pairs = list(manifest.labels), manifest.pairs
        else:
            labels = string_list(labels if labels is not None else (), "labels")
            if len(labels) < 2 or len(set(labels)) != len(labels):
                raise InputError(
                    "labels must name 2 or more distinct classes for a new "
                    f"head. Received: {labels}"
                )
            if dropout is None and source.backbone.get_config()["dropout"] == 0:
                changes = {"dropout": 0.1}
        # The preprocessor is tf.data code, outside the strategy's scope.
        tokenizer = Tokenizer.from_run(path, "text")
        preprocessor = TextClassifierPreprocessor(tokenizer, length, pairs=pairs)
        with scope_of(strategy):
            if manifest.task == "text_classification":
                model = rebuilt(source, precision, **changes)
            else:
                encoder_config = {
                    **source.backbone.get_config(),
                    **changes,
                    "dtype": precision,
                }
                encoder = type(source.backbone).from_config(encoder_config)
                copy_encoder_weights(source, encoder)
                model = bert_classifier(
                    encoder, len(labels), dropout=encoder_config["dropout"]
                )
            return cls(model, preprocessor, labels, dtype=precision)

    def tokenizers(self):
        return {"text": self.preprocessor.tokenizer}

    def vocabulary_sizes(self):
        return {"text": self.model.backbone.get_config()["vocabulary_size"]}

    def default_loss(self):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def default_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def checked_examples(self, x, y, sample_weight):
        if self.preprocessor.pairs:
            firsts, seconds = self.checked_pairs(x)
            texts, count = (firsts, seconds), len(firsts)
        else:
            texts = string_list(x, "x")
            count = len(texts)
        if y is not None:
            y = self.label_ids(y, count)
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, "float32")
            if sample_weight.shape != (count,):
                raise InputError(
                    f"sample_weight must hold one weight per input ({count}). "
                    f"Received: shape {sample_weight.shape}"
                )
        return texts, y, sample_weight, count

    def checked_pairs(self, x):
        """(texts_a, texts_b) of `x`: a tuple of the two lists (Keras's
        structure, as the preprocessor takes it) or a list of (a, b) pairs."""
        if isinstance(x, tuple):
            if len(x) != 2:
                raise InputError(
                    "x must be (texts_a, texts_b) or a list of (text_a, text_b) "
                    f"pairs. Received: a tuple of {len(x)}"
                )
            firsts = string_list(x[0], "x[0] (texts_a)")
            seconds = string_list(x[1], "x[1] (texts_b)")
            if len(firsts) != len(seconds):
                raise InputError(
                    f"x[1] (texts_b) must be as many as x[0] ({len(firsts)}). "
                    f"Received: {len(seconds)}"
                )
            return firsts, seconds
        if isinstance(x, str) or not isinstance(x, list):
            raise InputTypeError(
                "x must be (texts_a, texts_b) or a list of (text_a, text_b) "
                f"pairs. Received: {type(x).__name__}"
            )
        for item in x:
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise InputError(
                    "x must be a list of (text_a, text_b) pairs for this "
                    f"classifier of sentence pairs. Received: an item {item!r:.60}"
                )
        return (
            string_list([a for a, _ in x], "x (text_a)"),
            string_list([b for _, b in x], "x (text_b)"),
        )

    def label_ids(self, y, count):
        """`y` (class names or ids) as int32 class ids, checked."""
        if isinstance(y, str):
            raise InputTypeError("y must be a list of labels, not one string.")
        values = (
            list(np.asarray(y).tolist()) if not isinstance(y, list | tuple) else list(y)
        )
        if len(values) != count:
            raise InputError(
                f"y must hold one label per input ({count}). Received: {len(values)}"
            )
        index = {label: i for i, label in enumerate(self.labels)}
        ids = []
        for value in values:
            if isinstance(value, str) and value in index:
                ids.append(index[value])
            elif (
                isinstance(value, int | np.integer)
                and not isinstance(value, bool)
                and 0 <= value < len(self.labels)
            ):
                ids.append(int(value))
            else:
                raise InputError(
                    f"y must hold class names {self.labels} or ids in [0, "
                    f"{len(self.labels)}). Received: {value!r}"
                )
        return np.asarray(ids, "int32")

    def cut_counts(self, x, y):
        tokenizer = self.preprocessor.tokenizer
        length = self.preprocessor.sequence_length
        if self.preprocessor.pairs:
            a = tokenizer(x[0]).row_lengths().numpy()
            b = tokenizer(x[1]).row_lengths().numpy()
            return {"x": int(np.sum(a + b > length - 3))}
        return {"x": int(np.sum(tokenizer(x).row_lengths().numpy() > length - 2))}

    def probabilities(self, texts, batch_size=32):
        """`(len(texts), classes)` softmax probabilities."""
        logits = self.predict(texts, batch_size=batch_size, verbose=0)
        return keras.ops.convert_to_numpy(
            keras.ops.softmax(logits.astype("float32"), axis=-1)
        )

    def classify(self, texts, batch_size=32):
        """(the most probable label of each text, the probabilities), as
        `tfformer.load(run).classify` gives them."""
        probabilities = self.probabilities(texts, batch_size)
        return [self.labels[i] for i in probabilities.argmax(-1)], probabilities

    def get_config(self):
        return {**super().get_config(), "labels": self.labels}

    def run_files(self):
        tokenizer = self.preprocessor.tokenizer
        length = self.preprocessor.sequence_length
        manifest = TextClassificationManifest(
            tokenizers=tokenizer_entries({"text": tokenizer}),
            max_length=length,
            labels=tuple(self.labels),
            pairs=self.preprocessor.pairs,
        )
        config = {
            "task": "text_classification",
            "data": data_section(tokenizer, length),
        }
        return manifest, config
