"""The predictor of translation runs: sentences in, translations out.

Example:

    translator = tfformer.load("runs/number_words")
    translator.translate(["twenty-one", "five hundred"], search="greedy")
    translator.evaluate(search="greedy", limit=200)["chrf_cased"]
"""

import os

from tfformer.errors import InputError
from tfformer.training.predictors.base import Option, Predictor

DECODING_OPTIONS = (
    Option("--search", default="beam", choices=["greedy", "beam"]),
    Option("--beam-width", type=int, default=4),
    Option("--length-penalty", type=float, default=0.6),
    Option("--batch-size", type=int, default=32),
)


class TranslationPredictor(Predictor):
    """Translates with an encoder-decoder run (see `Predictor` for the
    arguments and attributes).

    Decoding settings, as keywords of `translate`, `predict` and `evaluate`:
    `search` ("beam" or "greedy"), `beam_width` and `length_penalty` (beam
    search: GNMT's alpha), `batch_size` (sentences decoded together).
    """

    task = "translation"
    predict_options = DECODING_OPTIONS
    evaluate_options = (
        *DECODING_OPTIONS,
        Option(
            "--source",
            dest="source_path",
            help="test source file (default: the run's test split)",
        ),
        Option("--target", dest="target_path", help="test reference file"),
        Option(
            "--attention-plot",
            metavar="PNG",
            help="also plot the cross-attention of the first test sentence to PNG",
        ),
    )

    def __init__(self, run, *, checkpoint="model.keras"):
        super().__init__(run, checkpoint=checkpoint)
        # {settings: Translator}: each compiles its decoding loop once.
        self._translators = {}

    def translator(
        self,
        *,
        search="beam",
        beam_width=4,
        length_penalty=0.6,
        batch_size=32,
        max_length=None,
    ):
        """A `tfformer.training.tasks.translation.Translator` of this run
        with these settings (`max_length`: target tokens, start and end
        included; None: the run's `max_length`). The same settings give the
        same translator."""
        from tfformer.training.tasks.translation import Translator

        length = self.manifest.max_length
        settings = (search, beam_width, length_penalty, batch_size, max_length)
        if settings not in self._translators:
            self._translators[settings] = Translator(
                self.model,
                self.tokenizers["source"],
                self.tokenizers["target"],
                source_length=length,
                max_length=max_length or length,
                search=search,
                beam_width=beam_width,
                length_penalty=length_penalty,
                batch_size=batch_size,
            )
        return self._translators[settings]

    def translate(self, texts, **decoding):
        """Translations of `texts` (a list of str) as a list of str."""
        return self.translator(**decoding).translate(texts)

    def predict(self, inputs, **decoding):
        """`translate(inputs)`: one translation per sentence."""
        return self.translate(inputs, **decoding)

    def evaluate(
        self,
        *,
        source_path=None,
        target_path=None,
        attention_plot=None,
        limit=None,
        progress=print,
        **decoding,
    ):
        """sacreBLEU's BLEU and chrF (cased and lowercased), exact match and
        decoding speed on the run's test split, or on the sentence pairs of
        the files `source_path` and `target_path`; with `attention_plot` (a
        PNG path), the cross-attention of the first test sentence too."""
        from tfformer.training.tasks.translation import TASK, evaluate_translator

        if (source_path is None) != (target_path is None):
            raise InputError(
                "source_path and target_path go together. Received: "
                f"source_path={source_path!r}, target_path={target_path!r}"
            )
        translator = self.translator(**decoding)
        if source_path is not None:
            from tfformer.training.sources.text_files import read_parallel_text

            pairs = read_parallel_text(source_path, target_path)
        else:
            pairs = TASK.raw_splits(self.config.data)["test"]
        if limit:
            pairs = pairs[:limit]
        results, _ = evaluate_translator(translator, pairs, progress=progress)
        if attention_plot:
            from tfformer.training.evaluation.attention_maps import attention_map_for

            attention_map_for(translator, pairs[0][0], attention_plot)
            results["attention_plot"] = os.path.abspath(attention_plot)
        return results
