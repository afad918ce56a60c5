"""Export of translation runs.

SavedModel (TF Serving): raw strings in, translations out. The graph holds
tokenization (`CoreWordPiece` or the byte tokenizer, core ops only), the
encoder, the KV-cached greedy or beam search of `tfformer.decoding.Generator`
and detokenization.

TFLite (LiteRT): source ids in, generated ids out, the greedy KV-cached
decoding loop inside the model (one WHILE op), builtin ops only. The output
directory is what an app ships:
- `model.tflite` (or `model_<quantize>.tflite`): input `source_ids` int32
  `(1, source_length)`, output `token_ids` int32 `(1, max_length)` (start
  token, the translation, end token, then 0s);
- `source_vocab.txt`, `target_vocab.txt` (WordPiece runs);
- `text.json`: what on-device tokenization needs (lower-casing, the code-point
  class ranges, lengths, reserved ids);
- `tokenizer.py`: a dependency-free Python reference of the on-device
  tokenize / detokenize steps (`export/runtimes/tokenizer.py`), to port;
- `translate.py`: the reference runtime (`export/runtimes/translate.py`):
  `Translator(model_path).translate(texts)`, or
  `python translate.py model.tflite "text" ...`.

Inputs are clamped in the graph: ids outside the source vocabulary become
[UNK] (1). The TFLite input shape is fixed; the reference tokenizer cuts
sources to `source_length` tokens and pads with 0. Any other shape is refused
by the interpreter with a ValueError, never a crash.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tfformer.decoding import Generator
from tfformer.errors import InputError
from tfformer.export import quality, runtimes
from tfformer.export.archive import SignatureArchive, traced_once
from tfformer.export.exporter import Exporter, ExportRun, TFLiteSource
from tfformer.export.tasks.text import (
    MAX_INPUT_BYTES,
    clamp_ids,
    device_text_settings,
    make_tokenizer,
)
from tfformer.export.wordpiece import probe_character_classes
from tfformer.runs.files import atomic_copy

SEARCHES = ("greedy", "beam")

SIGNATURES = {
    "serving_default": "text (batch,) string -> translation (batch,) string, "
    "score (batch,) float32, token_ids (batch, max_length) int32",
    "translate_ids": "source_ids (batch, length) int32 -> token_ids, score",
    "logits": "encoder_token_ids (batch, S) int32, decoder_token_ids (batch, T) "
    "int32 -> logits (batch, T, vocabulary) float32",
    "tokenize": "text (batch,) string -> token_ids (batch, source_length) int32",
    "detokenize": "token_ids (batch, length) int32 -> text (batch,) string",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TranslationRun(ExportRun):
    """What export needs from a translation run directory."""

    source: object  # TokenizerSpec
    target: object
    source_length: int  # sources are cut to this many tokens
    max_length: int  # the decoder's length: start token, output, end token
    source_vocabulary_size: int  # ids the encoder embedding accepts
    vocabulary_size: int  # target ids the decoder writes

    @property
    def tokenizer(self):
        return self.source.kind

    @property
    def lower_case(self):
        return self.source.lower_case

    def files(self):
        """The vocabulary files to ship next to an exported model."""
        return [
            p for p in (self.source.vocabulary_file, self.target.vocabulary_file) if p
        ]


class TranslatorGraph(tf.Module):
    """The serving functions of one run, built from tracked pieces.

    Args:
        run: a `TranslationRun`.
        search, beam_width, length_penalty, max_length: decoding settings
            (see `tfformer.decoding.Generator`); `max_length` defaults to
            the training `data.max_length`.
        jit_compile: compile the decoding loop with XLA (faster on CPU and
            GPU, but the server must have XLA; off by default).
    """

    def __init__(
        self,
        run,
        *,
        search="beam",
        beam_width=4,
        length_penalty=0.6,
        max_length=None,
        jit_compile=False,
        character_classes=None,
    ):
        super().__init__()
        if search not in SEARCHES:
            raise InputError(
                f"search must be one of {SEARCHES}. Received: search={search!r}"
            )
        if run.source.kind == "wordpiece" and character_classes is None:
            character_classes = probe_character_classes()
        self.model = run.model
        self.source = make_tokenizer(run.source, character_classes)
        self.target = make_tokenizer(run.target, character_classes)
        self.source_length = run.source_length
        self.max_length = max_length or run.max_length
        self.source_vocabulary_size = run.source_vocabulary_size
        self.generator = Generator(
            run.model,
            max_length=self.max_length,
            search=search,
            beam_width=beam_width,
            length_penalty=length_penalty,
        )
        self._decode = (
            self.generator.compiled(jit_compile=True)
            if jit_compile
            else self.generator.__call__
        )
        self.settings = {
            "search": search,
            "beam_width": beam_width if search == "beam" else None,
            "length_penalty": length_penalty if search == "beam" else None,
            "max_length": self.max_length,
            "source_length": self.source_length,
            "max_input_bytes": MAX_INPUT_BYTES,
            "jit_compile": bool(jit_compile),
            "tokenizer": run.tokenizer,
            "lower_case": run.lower_case,
            "signatures": SIGNATURES,
        }
        # Traced once each, though two signatures call each of them.
        self._tokenize = traced_once(self.tokenize, tf.TensorSpec([None], tf.string))
        self._translate_ids = traced_once(
            self.translate_ids, tf.TensorSpec([None, None], tf.int32)
        )
        self._detokenize = traced_once(
            self.detokenize, tf.TensorSpec([None, None], tf.int32)
        )

    def clamp_source(self, ids):
        """Ids `(batch, any length)` to `(batch, source_length)`: cut or padded
        with 0; ids outside the vocabulary become [UNK] (1)."""
        ids = clamp_ids(ids, self.source_vocabulary_size)[:, : self.source_length]
        missing = self.source_length - tf.shape(ids)[1]
        return tf.pad(ids, [[0, 0], [0, missing]])

    def tokenize(self, text):
        text = tf.strings.substr(tf.reshape(text, [-1]), 0, MAX_INPUT_BYTES)
        ids = self.source.tokenize(text)[:, : self.source_length]
        return ids.to_tensor(shape=[None, self.source_length])

    def translate_ids(self, source_ids):
        out = self._decode(self.clamp_source(source_ids))
        return {"token_ids": out["token_ids"], "score": out["scores"]}

    def translate(self, text):
        out = dict(self._translate_ids(self._tokenize(text)))
        out["translation"] = self._detokenize(out["token_ids"])["text"]
        return out

    def logits(self, encoder_token_ids, decoder_token_ids):
        logits = self.model(
            {
                "encoder_token_ids": self.clamp_source(encoder_token_ids),
                "decoder_token_ids": tf.cast(decoder_token_ids, tf.int32),
            },
            training=False,
        )
        return {"logits": tf.cast(logits, tf.float32)}

    def detokenize(self, token_ids):
        return {"text": self.target.detokenize(token_ids)}

    def write(self, path):
        """Writes the signatures as a SavedModel at `path` (no atomicity)."""
        archive = SignatureArchive()
        archive.track(self.model)
        archive.track(self.source)
        archive.track(self.target)
        text = tf.TensorSpec([None], tf.string, name="text")
        archive.add_endpoint("serving_default", self.translate, [text])
        archive.add_endpoint(
            "translate_ids",
            self._translate_ids,
            [tf.TensorSpec([None, None], tf.int32, name="source_ids")],
        )
        archive.add_endpoint(
            "logits",
            self.logits,
            [
                tf.TensorSpec([None, None], tf.int32, name="encoder_token_ids"),
                tf.TensorSpec([None, None], tf.int32, name="decoder_token_ids"),
            ],
        )
        archive.add_endpoint(
            "tokenize", lambda t: {"token_ids": self._tokenize(t)}, [text]
        )
        archive.add_endpoint(
            "detokenize",
            self._detokenize,
            [tf.TensorSpec([None, None], tf.int32, name="token_ids")],
        )
        archive.write_out(path)


def decoding_function(run, max_length=None):
    """`source_ids (1, S) int32 -> {"token_ids": (1, max_length) int32}`."""
    generator = Generator(
        run.model,
        max_length=max_length or run.max_length,
        search="greedy",
        carry_constants=True,
    )

    def decode(source_ids):
        ids = clamp_ids(source_ids, run.source_vocabulary_size)
        return {"token_ids": generator(ids)["token_ids"]}

    return decode


def representative_ids(sentences, tokenizer, source_length, limit=200):
    """Calibration inputs for full-int8 quantization: `(1, S)` int32 arrays."""
    sentences = [s for s in sentences if s.strip()][:limit]
    if not sentences:
        raise InputError(
            "representative_sentences is empty; full-int8 calibration needs real "
            "source sentences (for example the training sources)."
        )
    ids = tokenizer.tokenize(tf.constant(sentences))[:, :source_length]
    ids = ids.to_tensor(shape=[None, source_length]).numpy().astype(np.int32)
    return [row[None, :] for row in ids]


class TranslationExporter(Exporter):
    """The translation task's exporter."""

    task = "translation"
    run_type = TranslationRun
    tokenizer_kinds = ("wordpiece", "byte")
    quality_metric = quality.BLEU
    # The most sentences the gate translates with each model.
    quality_sentences = 200

    def add_arguments(self, parser):
        parser.add_argument(
            "--search", default="beam", help="saved_model: beam or greedy"
        )
        parser.add_argument("--beam-width", type=int, default=4)
        parser.add_argument("--length-penalty", type=float, default=0.6)
        parser.add_argument(
            "--max-length",
            type=int,
            help="decoder length (default: training max_length)",
        )
        parser.add_argument(
            "--jit-compile",
            action="store_true",
            help="saved_model: XLA-compile the decoding loop (the server needs XLA)",
        )

    def saved_model_options(self, args):
        return {
            "search": args.search,
            "beam_width": args.beam_width,
            "length_penalty": args.length_penalty,
            "max_length": args.max_length,
            "jit_compile": args.jit_compile,
        }

    def tflite_options(self, args):
        return {"max_length": args.max_length}

    def check_saved_model_options(self, search="beam", **_):
        if search not in SEARCHES:
            raise InputError(
                f"search must be one of {SEARCHES}. Received: search={search!r}"
            )

    def task_run(self, run, model, tokenizers):
        length = run.manifest.max_length
        return TranslationRun(
            directory=run.path,
            model=model,
            source=tokenizers["source"],
            target=tokenizers["target"],
            source_length=length,
            max_length=length,
            source_vocabulary_size=int(model.backbone.encoder_vocabulary_size),
            vocabulary_size=int(model.backbone.decoder_vocabulary_size),
        )

    def saved_model(self, run, path, **options):
        graph = TranslatorGraph(run, **options)
        graph.write(path)
        return graph.settings

    def tflite_sources(self, run, staging, quantize, max_length=None):
        """One `serving_default` with the greedy decoding loop, for every
        quantization."""
        del quantize
        path = os.path.join(staging, "translator")
        archive = SignatureArchive()
        archive.track(run.model)
        archive.add_endpoint(
            "serving_default",
            decoding_function(run, max_length),
            [tf.TensorSpec([1, run.source_length], tf.int32, name="source_ids")],
        )
        archive.write_out(path)
        return [TFLiteSource("model", path)]

    def calibration(self, run, sentences, quantize, max_length=None):
        """Full-int8 calibration inputs from raw source sentences."""
        del quantize, max_length  # the encoder's inputs: the same for all
        tokenizer = make_tokenizer(run.source)
        return representative_ids(sentences, tokenizer, run.source_length)

    def device_files(self, run, out_dir, max_length=None):
        """The vocabularies, `text.json`, `tokenizer.py` and `translate.py`."""
        classes = probe_character_classes() if run.tokenizer == "wordpiece" else None
        for source in run.files():
            atomic_copy(source, os.path.join(out_dir, os.path.basename(source)))
        settings = device_text_settings(
            run.tokenizer,
            run.lower_case,
            classes,
            source_length=run.source_length,
            max_length=max_length or run.max_length,
        )
        runtimes.write_settings(out_dir, "text.json", settings)
        runtimes.ship(out_dir, "tokenizer.py", "translate.py")

    def quality_samples(self, run, path):
        """(source, reference) pairs: JSON lines {"source", "target"}, or
        TSV rows "source<TAB>target"."""
        rows, where = quality.heldout_examples(run, path, ("source", "target"))
        if rows is None:
            return None, where
        rows = rows[: self.quality_sentences]
        return [(str(r["source"]), str(r["target"])) for r in rows], where

    def quality(self, run, float32_path, quantized_path, pairs):
        """Lowercased sacreBLEU of each model's greedy translations against
        the references (as `tfformer-evaluate` reports it), and the share
        of sentences translated alike."""
        import sacrebleu

        from tfformer.export.runtimes.translate import Translator

        sources = [source for source, _ in pairs]
        references = [reference for _, reference in pairs]
        outputs = [
            Translator(p).translate(sources) for p in (float32_path, quantized_path)
        ]
        bleu = sacrebleu.metrics.BLEU(lowercase=True)
        scores = [bleu.corpus_score(o, [references]).score for o in outputs]
        same = sum(a == b for a, b in zip(*outputs, strict=True)) / len(pairs)
        return {
            "examples": len(pairs),
            "float32": round(scores[0], 4),
            "quantized": round(scores[1], 4),
            "agreement": round(same, 4),
            "bleu_signature": str(bleu.get_signature()),
        }


EXPORTER = TranslationExporter()
# A translation run as a `TranslationRun`, for scripts and tests.
