"""Translation: an encoder-decoder trained on sentence pairs.

Data: the embedded number-words task (generated), two local text files
per split, or a tensorflow-datasets corpus. Model: `transformer_seq2seq`.
Loss: label-smoothed token cross-entropy over real tokens. Evaluation:
exact match, sacreBLEU and chrF. Prediction: greedy or beam search.
"""

import dataclasses
import os
import time
from typing import Literal

from tfformer.training.tasks.base import (
    ModelConfig,
    PreparedData,
    Task,
    TextDataConfig,
    token_compile_arguments,
)

CORPORA = ("number_words", "parallel_text", "tfds")


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
            raise ValueError(f"search must be 'greedy' or 'beam'. Received: {search!r}")
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

    @classmethod
    def from_run(cls, run_dir, *, checkpoint="model.keras", max_length=None, **kwargs):
        """A translator of a finished translation run directory."""
        run = TASK.load(run_dir, checkpoint)
        length = run.directory.manifest.max_length
        return cls(
            run.model,
            run.tokenizers["source"],
            run.tokenizers["target"],
            source_length=length,
            max_length=max_length or length,
            **kwargs,
        )

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
            raise TypeError("sentences must be a list of strings, not one string.")
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


def _decoding_arguments(parser):
    parser.add_argument("--search", default="beam", choices=["greedy", "beam"])
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=32)


class TranslationTask(Task):
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
                raise ValueError(f"data.corpus={d.corpus!r} needs data.{name}.")

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
        return {
            split: read_parallel_text(
                d.source_path.format(split=name), d.target_path.format(split=name)
            )
            for split, name in names.items()
        }

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
            {"source": source, "target": target}, examples, raw, self.bucket_lengths(d)
        )

    # -- model -------------------------------------------------------------------

    def run_manifest(self, config, data):
        from tfformer.runs.manifest import TranslationManifest

        return TranslationManifest(
            tokenizers=self.tokenizer_entries(config, data),
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

    # -- inference ---------------------------------------------------------------

    def add_predict_arguments(self, parser):
        _decoding_arguments(parser)

    def _translator(self, args, **kwargs):
        return Translator.from_run(
            args.checkpoint,
            checkpoint=args.model,
            search=args.search,
            beam_width=args.beam_width,
            length_penalty=args.length_penalty,
            batch_size=args.batch_size,
            **kwargs,
        )

    def predict(self, run_dir, args, inputs):
        del run_dir
        translator = self._translator(args)
        yield from translator.translate(inputs)

    def add_evaluate_arguments(self, parser):
        _decoding_arguments(parser)
        parser.add_argument(
            "--source", help="test source file (default: the run's test split)"
        )
        parser.add_argument("--target", help="test reference file")
        parser.add_argument(
            "--attention-plot",
            metavar="PNG",
            help="also plot the cross-attention of the first test sentence to PNG",
        )

    def evaluate(self, run_dir, args, progress=print):
        from tfformer.training.sources.text_files import read_parallel_text

        if bool(args.source) != bool(args.target):
            raise ValueError("--source and --target go together.")
        translator = self._translator(args)
        if args.source:
            pairs = read_parallel_text(args.source, args.target)
        else:
            pairs = self.raw_splits(self.load(run_dir, args.model).config.data)["test"]
        if args.limit:
            pairs = pairs[: args.limit]
        results, _ = evaluate_translator(translator, pairs, progress=progress)
        if args.attention_plot:
            from tfformer.training.evaluation.attention_maps import attention_map_for

            attention_map_for(translator, pairs[0][0], args.attention_plot)
            results["attention_plot"] = os.path.abspath(args.attention_plot)
        return results

    def input_and_reference(self, example):
        return example

    def keras_evaluation(self, run_dir, pairs, progress=print):
        """Greedy (as the exported TFLite loop is): exact match, BLEU, chrF."""
        translator = Translator.from_run(run_dir, search="greedy")
        scores, hypotheses = evaluate_translator(translator, pairs, progress=progress)
        scores.pop("examples")
        progress(f"  {self.headline(scores)}")
        return scores, hypotheses

    def headline(self, scores):
        return (
            f"exact match {scores['exact_match']:.1%} of {scores['sentences']}, "
            f"chrF {scores['chrf_cased']}, BLEU {scores['bleu_cased']} (words), "
            f"{scores['bleu_char']} (characters)"
        )

    def main_job_export_options(self, export_format):
        # Greedy, as the Keras and TFLite columns are: the three should agree.
        return ["--search", "greedy"] if export_format == "saved_model" else []

    def exported_predictions(self, export_format, path, inputs):
        if export_format == "saved_model":
            return _saved_model_translations(path, inputs)
        return _tflite_translations(path, inputs)


def _saved_model_translations(path, sentences, batch_size=64):
    """Translations by the SavedModel's `serving_default`, loaded as a server
    would (TensorFlow only)."""
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    out = []
    for start in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[start : start + batch_size])
        texts = serve(text=batch)["translation"].numpy()
        out += [t.decode("utf-8", "replace") for t in texts]
    return out


def load_device_tokenizer(directory):
    """The `tokenizer.py` an export writes next to its `.tflite`: exactly what
    a device app would port."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tfformer_device_tokenizer", os.path.join(directory, "tokenizer.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DeviceTokenizer(directory)


def _tflite_translations(path, sentences):
    """Translations by the `.tflite` in the LiteRT interpreter, with the
    standard-library tokenizer written next to it, as a device would."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    tokenizer = load_device_tokenizer(os.path.dirname(path))
    runner = Interpreter(model_path=path).get_signature_runner()
    out = []
    for sentence in sentences:
        ids = np.array([tokenizer.tokenize(sentence)], "int32")
        token_ids = runner(source_ids=ids)["token_ids"][0]
        out.append(tokenizer.detokenize(token_ids.tolist()))
    return out


TASK = TranslationTask()
__all__ = ["TASK", "TranslationData", "TranslationModel", "Translator"]
