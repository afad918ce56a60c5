"""`StringTranslator`: an encoder-decoder on strings."""

import keras
import numpy as np

from tfformer.errors import InputError
from tfformer.runs.manifest import TranslationManifest
from tfformer.training.preprocessors import Tokenizer
from tfformer.training.preprocessors.tasks import Seq2SeqPreprocessor
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
from tfformer.training.string_models.causal_lm import StringCausalLM


@keras.saving.register_keras_serializable(package="tfformer")
class StringTranslator(StringModel):
    """An encoder-decoder on strings (see `StringModel`): `fit(x=(sources,
    targets))`; `translate` as `tfformer.load(run).translate`.

    Args:
        model: a `tfformer.models.Seq2SeqLM`.
        preprocessor: a `Seq2SeqPreprocessor`.
    """

    default_learning_rate = 2e-5

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
        """The model of a translation run, with its two tokenizers."""
        directory, manifest, source, precision = opened_run(
            path, ("translation",), checkpoint, precision
        )
        changes = {} if dropout is None else {"dropout": dropout}
        # The preprocessor is tf.data code, outside the strategy's scope.
        preprocessor = Seq2SeqPreprocessor(
            Tokenizer.from_run(path, "source"),
            Tokenizer.from_run(path, "target"),
            manifest.max_length,
        )
        with scope_of(strategy):
            model = rebuilt(source, precision, **changes)
            return cls(
                model,
                preprocessor,
                dtype=precision,
                label_smoothing=run_label_smoothing(directory),
            )

    def tokenizers(self):
        return {
            "source": self.preprocessor.source_tokenizer,
            "target": self.preprocessor.target_tokenizer,
        }

    def vocabulary_sizes(self):
        config = self.model.backbone.get_config()
        return {
            "source": config["encoder_vocabulary_size"],
            "target": config["decoder_vocabulary_size"],
        }

    def default_loss(self):
        return StringCausalLM.default_loss(self)

    def default_metrics(self):
        return StringCausalLM.default_metrics(self)

    def checked_examples(self, x, y, sample_weight):
        if isinstance(x, tuple) and len(x) == 2 and y is None:
            x, y = x
        sources = string_list(x, "x (sources)")
        if y is not None:
            y = string_list(y, "y (targets)")
            if len(y) != len(sources):
                raise InputError(
                    f"targets must be as many as sources ({len(sources)}). "
                    f"Received: {len(y)}"
                )
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, "float32")
            if y is None or sample_weight.shape != (len(sources),):
                raise InputError(
                    "sample_weight must hold one weight per pair "
                    f"({len(sources)}), with targets. Received: shape "
                    f"{sample_weight.shape}"
                )
        return sources, y, sample_weight, len(sources)

    def cut_counts(self, x, y):
        length = self.preprocessor.sequence_length
        source = self.preprocessor.source_tokenizer(x).row_lengths().numpy()
        counts = {"x (sources)": int(np.sum(source > length))}
        if y is not None:
            target = self.preprocessor.target_tokenizer(y).row_lengths().numpy()
            counts["y (targets)"] = int(np.sum(target > length - 1))
        return counts

    def predict(self, x, batch_size=32, **kwargs):
        """The teacher-forced logits of `(sources, targets)` pairs (what the
        decoder predicts after each target prefix); `translate(sources)`
        decodes new sentences."""
        if not (isinstance(x, tuple) and len(x) == 2):
            raise InputError(
                "x must be (sources, targets) for predict (the teacher-forced "
                "logits); translate(sources) translates sources alone. "
                f"Received: {type(x).__name__}"
            )
        return super().predict(x, batch_size=batch_size, **kwargs)

    def translator(
        self, search="beam", beam_width=4, length_penalty=0.6, batch_size=32
    ):
        from tfformer.training.tasks.translation import Translator

        length = self.preprocessor.sequence_length
        return Translator(
            self.model,
            self.preprocessor.source_tokenizer.tokenizer,
            self.preprocessor.target_tokenizer.tokenizer,
            source_length=length,
            max_length=length,
            search=search,
            beam_width=beam_width,
            length_penalty=length_penalty,
            batch_size=batch_size,
        )

    def translate(self, texts, **decoding):
        """Translations of `texts` (a list of str), as
        `tfformer.load(run).translate` gives them (`search`, `beam_width`,
        `length_penalty`, `batch_size`)."""
        return self.translator(**decoding).translate(string_list(texts, "texts"))

    def run_files(self):
        layers = self.tokenizers()
        length = self.preprocessor.sequence_length
        manifest = TranslationManifest(
            tokenizers=tokenizer_entries(layers), max_length=length
        )
        source = data_section(layers["source"], length)
        config = {
            "task": "translation",
            "data": {
                "tokenizer": source["tokenizer"],
                "lower_case": source["lower_case"],
                "max_length": length,
            },
        }
        config["train"] = {"label_smoothing": self.label_smoothing}
        return manifest, config
