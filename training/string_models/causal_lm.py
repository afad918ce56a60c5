"""`StringCausalLM`: a causal LM on strings."""

import keras
import numpy as np
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.runs.manifest import CausalLMManifest
from tfformer.training.predictors.causal_lm import TextGeneration
from tfformer.training.preprocessors import Tokenizer
from tfformer.training.preprocessors.tasks import CausalLMPreprocessor
from tfformer.training.string_models.base import (
    StringModel,
    data_section,
    opened_run,
    rebuilt,
    run_label_smoothing,
    scope_of,
    string_list,
    tokenizer_entries,
)


@keras.saving.register_keras_serializable(package="tfformer")
class StringCausalLM(TextGeneration, StringModel):
    """A causal LM on strings (see `StringModel`): `fit(x=texts)` trains on
    the next token of every window of each text (a text longer than the
    context gives several windows, cut as training cuts its corpus, and
    its last, shorter one padded where training drops it);
    `generate` and `stream` continue prompts as `tfformer.load(run)` does.

    Args:
        model: a `tfformer.models.CausalLM`.
        preprocessor: a `CausalLMPreprocessor`.
        end_ids: the ids generation stops at (None: the tokenizer's end).
    """

    default_learning_rate = 2e-5

    def __init__(self, model, preprocessor, end_ids=None, **kwargs):
        self.stop_ids = None if end_ids is None else [int(i) for i in end_ids]
        super().__init__(model, preprocessor, **kwargs)

    @classmethod
    def from_run(
        cls,
        path,
        *,
        checkpoint="model.keras",
        dropout=None,
        strategy=None,
        precision=None,
    ):
        """The decoder of a causal-LM run, with its tokenizer and context."""
        directory, manifest, source, precision = opened_run(
            path, ("causal_lm",), checkpoint, precision
        )
        changes = {} if dropout is None else {"dropout": dropout}
        # The preprocessor is tf.data code, outside the strategy's scope.
        tokenizer = Tokenizer.from_run(path, "text")
        preprocessor = CausalLMPreprocessor(tokenizer, manifest.max_length)
        with scope_of(strategy):
            model = rebuilt(source, precision, **changes)
            return cls(
                model,
                preprocessor,
                manifest.ends(tokenizer.end_id),
                dtype=precision,
                label_smoothing=run_label_smoothing(directory),
            )

    @property
    def tokenizer(self):
        return self.preprocessor.tokenizer.tokenizer

    @property
    def context(self):
        return self.preprocessor.sequence_length

    @property
    def end_ids(self):
        return self.stop_ids or [self.tokenizer.end_id]

    def tokenizers(self):
        return {"text": self.preprocessor.tokenizer}

    def vocabulary_sizes(self):
        return {"text": self.model.backbone.get_config()["vocabulary_size"]}

    def default_loss(self):
        from tfformer.training.losses import MaskedSparseCategoricalCrossentropy

        return MaskedSparseCategoricalCrossentropy(label_smoothing=self.label_smoothing)

    def default_metrics(self):
        from tfformer.training.metrics import MaskedAccuracy

        return [MaskedAccuracy()]

    def checked_examples(self, x, y, sample_weight):
        if y is not None or sample_weight is not None:
            raise InputError(
                "y and sample_weight must be None for a causal LM: its labels "
                "are the next tokens of x."
            )
        texts = string_list(x, "x")
        return texts, None, None, len(texts)

    def rebatched(self, data, x, batch_size, shuffle, seed):
        # A text gives as many windows as it needs: batches of windows
        # (shuffled across texts, as training shuffles its windows), as many
        # as Keras is told (it cannot count them through `unbatch`).
        if isinstance(x, tf.data.Dataset):
            return data.unbatch().batch(batch_size)
        packer = self.preprocessor.packer
        added = (packer.start_id is not None) + (packer.end_id is not None)
        lengths = self.preprocessor.tokenizer(x).row_lengths().numpy() + added
        windows = int(np.sum(np.maximum(lengths - 2, -1) // self.context + 1))
        if windows == 0:
            raise InputError(
                "x must hold a text of 2 or more tokens (a window needs an "
                f"input and its label). Received: {len(x)} shorter texts"
            )
        batches = -(-windows // batch_size)
        data = data.unbatch()
        if shuffle:
            buffer = min(windows, 100_000)
            data = data.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
        data = data.batch(batch_size)
        return data.apply(tf.data.experimental.assert_cardinality(batches))

    def unpacked(self, data, name):
        # A causal LM's validation data is texts alone.
        if isinstance(data, list):
            return (data, None, None)
        return super().unpacked(data, name)

    def get_config(self):
        return {**super().get_config(), "end_ids": self.stop_ids}

    def run_files(self):
        tokenizer = self.preprocessor.tokenizer
        ends = [i for i in self.end_ids if i != tokenizer.end_id] or None
        manifest = CausalLMManifest(
            tokenizers=tokenizer_entries({"text": tokenizer}),
            max_length=self.context,
            end_ids=None if ends is None else (tokenizer.end_id, *ends),
        )
        config = {"task": "causal_lm", "data": data_section(tokenizer, self.context)}
        config["train"] = {"label_smoothing": self.label_smoothing}
        return manifest, config
