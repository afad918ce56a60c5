"""Export of sentence-embedding runs (a converted sentence-transformers or
BERT checkpoint).

SavedModel (TF Serving), core ops only, loadable with TensorFlow alone:
- `embed` (also `serving_default`): `text` `(batch,)` strings ->
  `embedding` `(batch, dim)` float32 (the run's pooling, L2-normalised when
  the run normalizes), `num_tokens` `(batch,)` and `truncated` `(batch,)`.
  Each text's first 16 KiB are read as UTF-8, normalized and tokenized in
  the graph by the core-op WordPiece (BERT's cleanup, accent stripping and
  lower-casing as the checkpoint's tokenizer does them) and encoded as
  [CLS] text [SEP], cut to `max_length`.
- `similarity`: `text` and `text_b` `(batch,)` -> `cosine` `(batch,)`, the
  cosine similarity of each pair's embeddings.
- `tokenize`: `text` -> `token_ids` `(batch, max_length)` (0-padded) and
  `num_tokens`.

TFLite (LiteRT), builtin ops only: `model.tflite` (or `model_<quantize>`)
with `token_ids` int32 `(1, n)` in (any n up to `max_length`) and
`embedding` `(1, dim)` float32 out; `text.json` (lengths, the tokenizer's
settings and special ids), the vocabulary, `tokenizer.py` and `embed.py` (a
reference runtime with a semantic-search example).
"""

import dataclasses
import json
import os

import keras
import tensorflow as tf

from tfformer.export.tasks.text import (
    DEVICE_TOKENIZER,
    MAX_INPUT_BYTES,
    clamp_ids,
    device_text_settings,
    special_ids,
)
from tfformer.export.tasks.text_classification import BertInputs
from tfformer.export.wordpiece import probe_character_classes
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import atomic_copy, atomic_write_text

DEVICE_EMBEDDER = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "runtimes", "embed.py"
)
VOCABULARY_FILE = "text_vocab.txt"


@dataclasses.dataclass
class EmbeddingRun:
    """What export needs from a sentence-embedding run directory."""

    directory: str
    model: keras.Model
    text: object  # TokenizerSpec
    max_length: int
    vocabulary_size: int
    dimension: int
    pooling: str
    normalize: bool


def read_run(run_dir, checkpoint="model.keras"):
    run = run_dir if isinstance(run_dir, RunDirectory) else RunDirectory(run_dir)
    if run.task != "sentence_embedding":
        raise ValueError(
            f"{run.path} holds a {run.task!r} run, not a sentence_embedding run."
        )
    spec = run.tokenizer("text")
    if spec.kind != "wordpiece":
        raise ValueError(
            f"{run.path}: exporting an embedder needs a WordPiece vocabulary. "
            f"Received: {spec.kind!r}"
        )
    model = run.load_model(checkpoint)
    return EmbeddingRun(
        directory=run.path,
        model=model,
        text=spec,
        max_length=run.manifest.max_length,
        vocabulary_size=int(model.backbone.token_embedding.vocabulary_size),
        dimension=int(model.output["embedding"].shape[-1]),
        pooling=run.manifest.pooling,
        normalize=run.manifest.normalize,
    )


class EmbedderGraph(BertInputs):
    """The serving functions of one sentence-embedding run."""

    def __init__(self, run, *, character_classes=None):
        super().__init__(
            run.text, run.max_length, run.vocabulary_size, character_classes
        )
        self.model = run.model
        self.settings = {
            "max_length": run.max_length,
            "dimension": run.dimension,
            "pooling": run.pooling,
            "normalize": run.normalize,
            "max_input_bytes": MAX_INPUT_BYTES,
            "lower_case": run.text.lower_case,
            **run.text.options,
        }

    def embed(self, text):
        ids, segments, counts, truncated = self.encode(text)
        # The model is length-agnostic: run it on the batch's longest row,
        # not on max_length columns of padding.
        width = tf.maximum(
            tf.reduce_max(tf.reduce_sum(tf.cast(ids != 0, tf.int32), 1)), 2
        )
        ids, segments = ids[:, :width], segments[:, :width]
        vectors = self.model(
            {"token_ids": ids, "segment_ids": segments}, training=False
        )["embedding"]
        return {
            "embedding": tf.cast(vectors, tf.float32),
            "num_tokens": counts,
            "truncated": truncated,
        }

    def similarity(self, text, text_b):
        with tf.control_dependencies(
            [
                tf.debugging.assert_equal(
                    tf.size(text),
                    tf.size(text_b),
                    message="similarity: text and text_b must hold as many "
                    "strings (one pair per row)",
                )
            ]
        ):
            text_b = tf.identity(text_b)
        a = tf.math.l2_normalize(self.embed(text)["embedding"], axis=-1)
        b = tf.math.l2_normalize(self.embed(text_b)["embedding"], axis=-1)
        return {"cosine": tf.reduce_sum(a * b, axis=-1)}

    def tokenize(self, text):
        ids, _, counts, _ = self.encode(text)
        return {"token_ids": ids, "num_tokens": counts}

    def write(self, path):
        archive = keras.export.ExportArchive()
        archive.track(self.model)
        archive.track(self.tokenizer)
        text = tf.TensorSpec([None], tf.string, name="text")
        archive.add_endpoint("serving_default", self.embed, [text])
        archive.add_endpoint("embed", self.embed, [text])
        archive.add_endpoint(
            "similarity",
            self.similarity,
            [text, tf.TensorSpec([None], tf.string, name="text_b")],
        )
        archive.add_endpoint("tokenize", self.tokenize, [text])
        archive.write_out(path, verbose=False)


class SentenceEmbeddingExporter:
    """The sentence-embedding task's exporters, as `tfformer-export` calls them."""

    name = "sentence_embedding"

    def add_arguments(self, parser):
        del parser

    def saved_model_options(self, args):
        del args
        return {}

    def tflite_options(self, args):
        del args
        return {}

    def read(self, run_dir, checkpoint):
        return read_run(run_dir, checkpoint)

    def check_saved_model_options(self, **_):
        pass

    def saved_model(self, run, path, **_):
        graph = EmbedderGraph(run, character_classes=probe_character_classes())
        graph.write(path)
        return graph.settings

    def tflite_sources(self, run, staging, quantize=None):
        del quantize  # one graph for every quantization
        path = os.path.join(staging, "embedder")
        archive = keras.export.ExportArchive()
        archive.track(run.model)
        unk_id = special_ids(run.text, "unk")[0]

        def embedding(token_ids):
            ids = clamp_ids(token_ids, run.vocabulary_size, unk_id)
            vectors = run.model(
                {"token_ids": ids, "segment_ids": tf.zeros_like(ids)}, training=False
            )["embedding"]
            return {"embedding": tf.cast(vectors, tf.float32)}

        archive.add_endpoint(
            "serving_default",
            embedding,
            [tf.TensorSpec([1, None], tf.int32, name="token_ids")],
        )
        archive.write_out(path, verbose=False)
        # Per-channel int8 weight scales (the converter's default; tfformer
        # turns them off for tied embeddings, which this model does not
        # have): per-tensor ones cost all-MiniLM-L6-v2's dynamic int8 model
        # its accuracy (cosine to float 0.969 median, BENCHMARKS.md).
        return [("model", path, None, {"per_channel_weights": True})]

    def calibration(self, run, texts, limit=200):
        """Full-int8 samples: the model's `token_ids` for real texts."""
        texts = [t for t in texts if t.strip()][:limit]
        if not texts:
            raise ValueError(
                "representative_sentences is empty; full-int8 calibration needs "
                "real inputs (for example sentences of the domain)."
            )
        inputs = BertInputs(
            run.text, run.max_length, run.vocabulary_size, probe_character_classes()
        )
        samples = []
        for text in texts:
            ids, _, _, _ = inputs.encode(tf.constant([text]))
            n = int(tf.reduce_sum(tf.cast(ids != 0, tf.int32)))
            samples.append(("serving_default", {"token_ids": ids.numpy()[:, :n]}))
        return samples

    def device_files(self, run, out_dir):
        """The vocabulary, `text.json`, `tokenizer.py` and `embed.py`."""
        atomic_copy(run.text.path, os.path.join(out_dir, VOCABULARY_FILE))
        settings = device_text_settings(
            run.text.kind,
            run.text.lower_case,
            probe_character_classes(),
            spec=run.text,
            source_length=run.max_length,
            max_length=run.max_length,
            dimension=run.dimension,
            pooling=run.pooling,
            normalize=run.normalize,
            source_vocabulary=VOCABULARY_FILE,
            target_vocabulary=VOCABULARY_FILE,
        )
        atomic_write_text(
            os.path.join(out_dir, "text.json"), json.dumps(settings, indent=1)
        )
        atomic_copy(DEVICE_TOKENIZER, os.path.join(out_dir, "tokenizer.py"))
        atomic_copy(DEVICE_EMBEDDER, os.path.join(out_dir, "embed.py"))


EXPORTER = SentenceEmbeddingExporter()
