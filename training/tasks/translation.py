"""Translation: an encoder-decoder trained on sentence pairs.

Data: the embedded number-words task (generated), two local text files
per split, or a tensorflow-datasets corpus. Model: `transformer_seq2seq`.
Loss: label-smoothed token cross-entropy over real tokens; after training,
the greedy exact match of the test split. `Translator` decodes with the
model (greedy or beam search) for the end of training, the predictor
(`tfformer.training.predictors.translation`) and the main job.
"""

import dataclasses
import time
from typing import Literal

from tfformer.errors import InputError, InputTypeError
from tfformer.training.tasks.base import (
    ModelConfig,
    PreparedData,
    TextDataConfig,
    TrainingTask,
    bucket_lengths,
    token_compile_arguments,
    tokenizer_entries,
)


@dataclasses.dataclass
class TranslationData(TextDataConfig):
    """Where the sentence pairs come from (plus `TextDataConfig`'s text settings)."""

    # number_words (embedded, generated), parallel_text (local files), tfds.
    corpus: Literal["number_words", "parallel_text", "tfds"] = "number_words"
    # number_words: sizes of the generated splits (disjoint).
    train_size: int = 40000
    validation_size: int = 1000
    test_size: int = 1000
    # parallel_text: "{split}" is replaced by train / validation / test names.
    source_path: str | None = None
    target_path: str | None = None
    validation_split_name: str = "val"
    test_split_name: str = "test_2016_flickr"
    # tfds: dataset name, its data_dir (None: tfds's default), the feature
    # keys of source and target.
    tfds_name: str | None = None
    tfds_data_dir: str | None = None
    source_key: str | None = None
    target_key: str | None = None


@dataclasses.dataclass
class TranslationModel(ModelConfig):
    """`ModelConfig` plus the encoder-decoder's embedding choices."""

    # none, decoder (tie decoder input and output), all (one vocabulary).
    tie_embeddings: Literal["none", "decoder", "all"] = "decoder"
    # sinusoidal (the paper) or learned position vectors, and whether token
    # embeddings are multiplied by sqrt(hidden_dim) (the paper).
    position: Literal["sinusoidal", "learned"] = "sinusoidal"
    scale_embeddings: bool = True


class Translator:
    """Translates sentences with a seq2seq model and its two tokenizers.

    Args:
        model: a `transformer_seq2seq` model.
        source_tokenizer, target_tokenizer: the run's tokenizers.
        source_length: sources are cut to this many tokens.
        max_length: maximum target tokens (start and end included).
        search: "greedy" or "beam".
        beam_width, length_penalty: beam search settings.
        batch_size: sentences decoded together.
    """

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        *,
        source_length,
        max_length,
        search="beam",
        beam_width=4,
        length_penalty=0.6,
        batch_size=32,
    ):
        from tfformer.decoding import Generator

        if search not in ("greedy", "beam"):
            raise InputError(f"search must be 'greedy' or 'beam'. Received: {search!r}")
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, int)
            or (batch_size < 1)
        ):
            raise InputError(
                f"batch_size must be a positive int. Received: {batch_size!r}"
            )
        self.model = model
        self.source_tokenizer, self.target_tokenizer = (
            source_tokenizer,
            target_tokenizer,
        )
        self.source_length = source_length
        self.max_length = max_length
        self.batch_size = batch_size
        self.generator = Generator(
            model,
            max_length=max_length,
            search=search,
            beam_width=beam_width,
            length_penalty=length_penalty,
            start_id=target_tokenizer.start_id,
            end_id=target_tokenizer.end_id,
            pad_id=target_tokenizer.pad_id,
        )
        self._decode = self.generator.compiled(jit_compile=False)
        self.stats = {"sentences": 0, "tokens": 0, "seconds": 0.0}

    def source_ids(self, sentences):
        """`(batch_size, source_length)` padded ids (rows beyond the batch are 0)."""
        ids = self.source_tokenizer.tokenize(sentences)[:, : self.source_length]
        return ids.to_tensor(shape=[self.batch_size, self.source_length])

    def translate_ids(self, sentences):
        """Generated target ids `(len(sentences), max_length)` (numpy)."""
        import numpy as np

        out = []
        for start in range(0, len(sentences), self.batch_size):
            chunk = list(sentences[start : start + self.batch_size])
            began = time.perf_counter()
            ids = self._decode(self.source_ids(chunk))["token_ids"].numpy()
            self.stats["seconds"] += time.perf_counter() - began
            ids = ids[: len(chunk)]
            self.stats["sentences"] += len(chunk)
            # Generated tokens: everything after the start token, end included.
            self.stats["tokens"] += int(np.sum(ids[:, 1:] != 0))
            out.append(ids)
        if not out:
            return np.zeros((0, self.max_length), "int32")
        return np.concatenate(out)

    def translate(self, sentences):
        """Translations of `sentences` (a list of str) as a list of str."""
        if isinstance(sentences, str):
            raise InputTypeError("sentences must be a list of strings, not one string.")
        ids = self.translate_ids(list(sentences))
        if not len(ids):
            return []
        texts = self.target_tokenizer.detokenize(ids).numpy()
        return [t.decode("utf-8", "replace") for t in texts]


def translate_all(translator, sources, progress=None, chunk=256):
    """Translations of `sources`, reporting progress every `chunk` sentences."""
    hypotheses = []
    for start in range(0, len(sources), chunk):
        hypotheses += translator.translate(sources[start : start + chunk])
        if progress:
            progress(f"  translated {len(hypotheses)}/{len(sources)}")
    return hypotheses


def evaluate_translator(translator, pairs, *, progress=print):
    """Translates the sources of `pairs`; returns scores, speed and examples."""
    from tfformer.training.evaluation.translation import exact_match, score_translations

    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    translator.translate(sources[: translator.batch_size])  # compile once
    translator.stats = {"sentences": 0, "tokens": 0, "seconds": 0.0}
    hypotheses = translate_all(translator, sources, progress)
    stats = translator.stats
    results = score_translations(hypotheses, references)
    results.update(
        sentences=len(pairs),
        exact_match=exact_match(hypotheses, references, translator.target_tokenizer),
        decode_seconds=round(stats["seconds"], 3),
        sentences_per_second=round(stats["sentences"] / max(stats["seconds"], 1e-9), 2),
        tokens_per_second=round(stats["tokens"] / max(stats["seconds"], 1e-9), 1),
        search=translator.generator.search,
        beam_width=translator.generator.beam_width,
        length_penalty=translator.generator.length_penalty,
        examples=[
            {"source": s, "reference": r, "translation": h}
            for s, r, h in list(zip(sources, references, hypotheses, strict=True))[:5]
        ],
    )
    return results, hypotheses


class TranslationTask(TrainingTask):
    name = "translation"
    DataConfig = TranslationData
    ModelConfig = TranslationModel
    backbone_name = "Seq2SeqBackbone"
    default_preset = "transformer_tiny"

    def validate(self, config):
        super().validate(config)
        d = config.data
        needs = {
            "parallel_text": ("source_path", "target_path"),
            "tfds": ("tfds_name", "source_key", "target_key"),
        }.get(d.corpus, ())
        for name in needs:
            if not getattr(d, name):
                raise InputError(f"data.corpus={d.corpus!r} needs data.{name}.")

    # -- data --------------------------------------------------------------------

    def raw_splits(self, data_config):
        d = data_config
        if d.corpus == "number_words":
            from tfformer.training.sources.number_words import number_words_splits

            return number_words_splits(
                d.seed, d.train_size, d.validation_size, d.test_size
            )
        if d.corpus == "tfds":
            from tfformer.training.sources.tfds_source import tfds_translation_splits

            return tfds_translation_splits(
                d.tfds_name,
                source_key=d.source_key,
                target_key=d.target_key,
                data_dir=d.tfds_data_dir,
            )
        from tfformer.training.sources.text_files import read_parallel_text

        names = {
            "train": "train",
            "validation": d.validation_split_name,
            "test": d.test_split_name,
        }
        paths = {}
        for split, name in names.items():
            try:
                paths[split] = (
                    d.source_path.format(split=name),
                    d.target_path.format(split=name),
                )
            except (ValueError, KeyError, IndexError) as e:
                raise InputError(
                    "data.source_path and data.target_path may hold {split} and "
                    f"no other braces ({type(e).__name__}: {e}). Received: "
                    f"{d.source_path!r}, {d.target_path!r}"
                ) from None
        return {split: read_parallel_text(*pair) for split, pair in paths.items()}

    def prepare(self, config, raw, directory, progress=print):
        from tfformer.training import pipeline
        from tfformer.training.text.vocabulary import learn_or_load

        d = config.data
        source = learn_or_load(
            d, (s for s, _ in raw["train"]), directory, "source", progress
        )
        target = learn_or_load(
            d, (t for _, t in raw["train"]), directory, "target", progress
        )
        examples = {
            split: pipeline.seq2seq_examples(
                source.tokenize([s for s, _ in pairs]),
                target.tokenize([t for _, t in pairs]),
                start_id=target.start_id,
                end_id=target.end_id,
                max_length=d.max_length,
            )
            for split, pairs in raw.items()
        }
        return PreparedData(
            {"source": source, "target": target}, examples, raw, bucket_lengths(d)
        )

    # -- model -------------------------------------------------------------------

    def save_heldout(self, data, run):
        pairs = data.raw["test"][: self.HELDOUT_EXAMPLES]
        run.write_heldout([{"source": s, "target": t} for s, t in pairs])

    def run_manifest(self, config, data):
        from tfformer.runs.manifest import TranslationManifest

        return TranslationManifest(
            tokenizers=tokenizer_entries(config, data),
            max_length=config.data.max_length,
        )

    def build_model(self, config, data):
        from tfformer.models import from_preset

        m = config.model
        sizes = self.model_sizes(m)
        sizes.pop("tie_embeddings", None)
        return from_preset(
            self.preset(m),
            data.tokenizers["source"].vocabulary_size,
            data.tokenizers["target"].vocabulary_size,
            tie_embeddings=m.tie_embeddings,
            position=m.position,
            scale_embeddings=m.scale_embeddings,
            **{**sizes, "max_sequence_length": max(config.data.max_length, 8)},
        )

    def compile_arguments(self, config):
        return token_compile_arguments(config)

    def final_evaluation(self, config, model, data, progress=print):
        from tfformer.training.evaluation.translation import exact_match

        pairs = data.raw["test"][: config.train.final_evaluation_examples]
        progress(f"Greedy-translating {len(pairs)} test sentences for exact match")
        translator = Translator(
            model,
            data.tokenizers["source"],
            data.tokenizers["target"],
            source_length=config.data.max_length,
            max_length=config.data.max_length,
            search="greedy",
            batch_size=64,
        )
        hypotheses = translator.translate([s for s, _ in pairs])
        return {
            "test_exact_match": exact_match(
                hypotheses, [t for _, t in pairs], data.tokenizers["target"]
            ),
            "test_examples": [
                [s, t, h] for (s, t), h in list(zip(pairs, hypotheses, strict=True))[:5]
            ],
        }


TASK = TranslationTask()
__all__ = ["TASK", "TranslationData", "TranslationModel", "Translator"]
