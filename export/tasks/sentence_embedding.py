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

Tokenization, input packing, calibration and the device files are
`bert_text`'s, shared with the text classifier.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.export import quality
from tfformer.export.archive import SignatureArchive
from tfformer.export.tasks.bert_text import (
    BertInputs,
    BertTextExporter,
    BertTextRun,
    checked_pairs,
)
from tfformer.export.tasks.text import MAX_INPUT_BYTES, clamp_ids, special_ids


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmbeddingRun(BertTextRun):
    """What export needs from a sentence-embedding run directory."""

    dimension: int  # the embedding's size
    pooling: str  # how token vectors become one ("mean", "cls")
    normalize: bool  # the embedding is L2-normalised


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
        text_b = checked_pairs(text, text_b, "similarity")
        a = tf.math.l2_normalize(self.embed(text)["embedding"], axis=-1)
        b = tf.math.l2_normalize(self.embed(text_b)["embedding"], axis=-1)
        return {"cosine": tf.reduce_sum(a * b, axis=-1)}

    def tokenize(self, text):
        ids, _, counts, _ = self.encode(text)
        return {"token_ids": ids, "num_tokens": counts}

    def write(self, path):
        archive = SignatureArchive()
        archive.track(self.model)
        archive.track(self.tokenizer)
        text = tf.TensorSpec([None], tf.string, name="text")
        # The first endpoint is also `serving_default` (the archive aliases
        # it): one trace instead of two.
        archive.add_endpoint("embed", self.embed, [text])
        archive.add_endpoint(
            "similarity",
            self.similarity,
            [text, tf.TensorSpec([None], tf.string, name="text_b")],
        )
        archive.add_endpoint("tokenize", self.tokenize, [text])
        archive.write_out(path)


class SentenceEmbeddingExporter(BertTextExporter):
    """The sentence-embedding task's exporter: `bert_text`'s, with the
    embedder's graph, the embedding on device and its settings."""

    task = "sentence_embedding"
    run_type = EmbeddingRun
    graph_type = EmbedderGraph
    runtime = "embed.py"
    model_inputs = ("token_ids",)
    # Per-channel int8 weight scales (the converter's default; tfformer
    # turns them off for tied embeddings, which this model does not
    # have): per-tensor ones cost all-MiniLM-L6-v2's dynamic int8 model
    # its accuracy (cosine to float 0.969 median, BENCHMARKS.md).
    per_channel_weights = True
    quality_metric = quality.COSINE

    def task_run(self, run, model, tokenizers):
        return EmbeddingRun(
            directory=run.path,
            model=model,
            text=tokenizers["text"],
            max_length=run.manifest.max_length,
            vocabulary_size=int(model.backbone.token_embedding.vocabulary_size),
            dimension=int(model.output["embedding"].shape[-1]),
            pooling=run.manifest.pooling,
            normalize=run.manifest.normalize,
        )

    def device_function(self, run):
        unk_id = special_ids(run.text, "unk")[0]

        def embedding(token_ids):
            ids = clamp_ids(token_ids, run.vocabulary_size, unk_id)
            vectors = run.model(
                {"token_ids": ids, "segment_ids": tf.zeros_like(ids)}, training=False
            )["embedding"]
            return {"embedding": tf.cast(vectors, tf.float32)}

        return embedding

    def device_settings(self, run):
        return {
            "dimension": run.dimension,
            "pooling": run.pooling,
            "normalize": run.normalize,
        }

    def quality_samples(self, run, path):
        """Texts, one per line (a .jsonl file: {"text"} rows); a converted
        embedder has none of its own."""
        if path is None:
            rows, where = quality.heldout_examples(run, path, ("text",))
            if rows is None:
                return None, where
        elif str(path).removesuffix(".gz").endswith(".jsonl"):
            rows, where = quality.read_rows(path, ("text",)), str(path)
        else:
            lines = quality.read_bytes(path).decode("utf-8", "replace").splitlines()
            rows, where = [{"text": line} for line in lines if line.strip()], str(path)
        texts = [str(row["text"]) for row in rows][: quality.MOST_EXAMPLES]
        if len(texts) < 2:
            raise InputError(f"--quality-data {path!r} needs 2 texts or more.")
        return texts, where

    def quality(self, run, float32_path, quantized_path, texts):
        """The mean cosine of the quantized model's embeddings to float32's
        (float32's own: 1), the least, and the share of texts whose nearest
        other text stays the same."""
        from tfformer.export.runtimes.embed import LiteRTEmbedder

        vectors = []
        for path in (float32_path, quantized_path):
            embedder = LiteRTEmbedder(path)
            v = np.stack([embedder.embed(t) for t in texts]).astype(np.float64)
            norms = np.linalg.norm(v, axis=1, keepdims=True)
            vectors.append(v / np.where(norms > 0, norms, 1.0))
        cosine = np.sum(vectors[0] * vectors[1], axis=1)
        neighbours = []
        for v in vectors:
            similarity = v @ v.T
            np.fill_diagonal(similarity, -np.inf)
            neighbours.append(np.argmax(similarity, axis=1))
        return {
            "examples": len(texts),
            "float32": 1.0,
            "quantized": round(float(np.mean(cosine)), 6),
            "cosine_min": round(float(np.min(cosine)), 6),
            "agreement": round(float(np.mean(neighbours[0] == neighbours[1])), 4),
        }


EXPORTER = SentenceEmbeddingExporter()
