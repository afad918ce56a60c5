"""Export of text-classification (BERT) runs.

SavedModel (TF Serving), core ops only, loadable with TensorFlow alone:
- `classify` (also `serving_default`): `text` `(batch,)` strings (and
  `text_b` for a run trained on sentence pairs) -> `probabilities` `(batch,
  classes)` float32, `label` `(batch,)` string, `label_id` `(batch,)` int32,
  `label_names` `(batch, classes)` string (every row the same, so the
  output keeps TF Serving's batch-major row format), `num_tokens` `(batch,)`
  (the tokens of the first 16 KiB, before the cut to `max_length`) and
  `truncated` `(batch,)` bool (bytes past 16 KiB, or tokens past
  `max_length`, were dropped). Each input's first 16 KiB are read as UTF-8
  (invalid bytes become U+FFFD), tokenized in the graph by the core-op
  WordPiece and encoded as in training ([START] a [END] (b [END]), cut
  longest-first to `max_length`). Keras prediction and `classify.py` do
  not cut at 16 KiB; an input whose tokens within `max_length` lie past
  its first 16 KiB (16 KiB of spaces, say) is encoded differently.
- `embed`: the same inputs -> `embedding` `(batch, hidden)`, the pooled
  [START] vector the classifier reads, and `mean_embedding` `(batch,
  hidden)`, the mean of the last layer over the real tokens, L2-normalised
  (the sentence-transformers recipe).
- `tokenize`: the same inputs -> `token_ids` and `segment_ids` `(batch,
  max_length)`, 0-padded, exactly what the model reads.

TFLite (LiteRT), builtin ops only: `model.tflite` (or `model_<quantize>`)
with `token_ids` and `segment_ids` int32 `(1, n)` in (any n up to
`max_length`; [START] a [END] as `tokenizer.py` + `classify.py` build them)
and `probabilities` `(1, classes)` out; `text.json` (lengths, labels), the
vocabulary, `tokenizer.py` (the translator's reference tokenizer, reused)
and `classify.py` (a reference runtime).

Tokenization, input packing, calibration and the device files are
`bert_text`'s, shared with the sentence embedder.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tfformer.export import quality
from tfformer.export.archive import SignatureArchive
from tfformer.export.tasks.bert_text import BertInputs, BertTextExporter, BertTextRun
from tfformer.export.tasks.text import MAX_INPUT_BYTES, clamp_ids, special_ids


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClassificationRun(BertTextRun):
    """What export needs from a text-classification run directory."""

    labels: list


class ClassifierGraph(BertInputs):
    """The serving functions of one text-classification run."""

    def __init__(self, run, *, character_classes=None):
        super().__init__(
            run.text, run.max_length, run.vocabulary_size, character_classes
        )
        self.model = run.model
        # The BertBackbone: `sequence_output` and `pooled_output`.
        self.encoder = run.model.backbone
        self.pairs = run.pairs
        self.labels = tf.constant(run.labels)
        self.settings = {
            "max_length": run.max_length,
            "labels": run.labels,
            "pairs": run.pairs,
            "max_input_bytes": MAX_INPUT_BYTES,
            "tokenizer": run.text.kind,
            "lower_case": run.text.lower_case,
        }

    def _inputs(self, text, text_b):
        ids, segments, counts, truncated = self.encode(text, text_b)
        return {"token_ids": ids, "segment_ids": segments}, counts, truncated

    def classify(self, text, text_b=None):
        inputs, counts, truncated = self._inputs(text, text_b)
        logits = tf.cast(self.model(inputs, training=False), tf.float32)
        probabilities = tf.nn.softmax(logits, axis=-1)
        best = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        rows = tf.shape(best)[0]
        return {
            "probabilities": probabilities,
            "label": tf.gather(self.labels, best),
            "label_id": best,
            "label_names": tf.tile(self.labels[None, :], [rows, 1]),
            "num_tokens": counts,
            "truncated": truncated,
        }

    def embed(self, text, text_b=None):
        inputs, counts, truncated = self._inputs(text, text_b)
        out = self.encoder(inputs, training=False)
        real = tf.cast(inputs["token_ids"] != 0, tf.float32)[..., None]
        sequence = tf.cast(out["sequence_output"], tf.float32)
        mean = tf.reduce_sum(sequence * real, axis=1) / tf.reduce_sum(real, axis=1)
        return {
            "embedding": tf.cast(out["pooled_output"], tf.float32),
            "mean_embedding": tf.math.l2_normalize(mean, axis=-1),
            "num_tokens": counts,
            "truncated": truncated,
        }

    def tokenize(self, text, text_b=None):
        ids, segments, counts, _ = self.encode(text, text_b)
        return {"token_ids": ids, "segment_ids": segments, "num_tokens": counts}

    def write(self, path):
        archive = SignatureArchive()
        archive.track(self.model)
        archive.track(self.tokenizer)
        inputs = [tf.TensorSpec([None], tf.string, name="text")]
        if self.pairs:
            inputs.append(tf.TensorSpec([None], tf.string, name="text_b"))
        # The first endpoint is also `serving_default` (the archive aliases
        # it): one trace instead of two.
        archive.add_endpoint("classify", self.classify, inputs)
        archive.add_endpoint("embed", self.embed, inputs)
        archive.add_endpoint("tokenize", self.tokenize, inputs)
        archive.write_out(path)


class TextClassificationExporter(BertTextExporter):
    """The text-classification task's exporter: `bert_text`'s, with the
    classifier's graph, probabilities on device and labels."""

    task = "text_classification"
    run_type = ClassificationRun
    graph_type = ClassifierGraph
    runtime = "classify.py"
    model_inputs = ("token_ids", "segment_ids")
    quality_metric = quality.ACCURACY

    def task_run(self, run, model, tokenizers):
        return ClassificationRun(
            directory=run.path,
            model=model,
            text=tokenizers["text"],
            max_length=run.manifest.max_length,
            labels=list(run.manifest.labels),
            pairs=run.manifest.pairs,
            vocabulary_size=int(model.backbone.token_embedding.vocabulary_size),
        )

    def device_function(self, run):
        segments = run.model.backbone.num_segments
        unk_id = special_ids(run.text, "unk")[0]

        def probabilities(token_ids, segment_ids):
            ids = clamp_ids(token_ids, run.vocabulary_size, unk_id)
            # An id outside the segment table would read past it (TFLite's
            # GATHER does not check): clamp it into the table.
            segment_ids = tf.clip_by_value(segment_ids, 0, segments - 1)
            logits = run.model(
                {"token_ids": ids, "segment_ids": segment_ids}, training=False
            )
            return {"probabilities": tf.nn.softmax(tf.cast(logits, tf.float32))}

        return probabilities

    def device_settings(self, run):
        return {"labels": run.labels, "pairs": run.pairs}

    def quality_samples(self, run, path):
        """Labelled texts: JSON lines {"text", ("text_b",) "label"} (a
        name or an id), or TSV rows "text<TAB>(text_b<TAB>)label"."""
        manifest = run.manifest
        keys = ("text", "text_b", "label") if manifest.pairs else ("text", "label")
        rows, where = quality.heldout_examples(run, path, keys)
        if rows is None:
            return None, where
        samples = []
        for row in rows[: quality.MOST_EXAMPLES]:
            text = (row["text"], row["text_b"]) if manifest.pairs else row["text"]
            label = quality.label_id(row["label"], list(manifest.labels), where)
            samples.append((text, label))
        return samples, where

    def quality(self, run, float32_path, quantized_path, samples):
        from tfformer.export.runtimes.classify import LiteRTClassifier

        answers = []
        for path in (float32_path, quantized_path):
            classifier = LiteRTClassifier(path)
            answers.append(
                [int(np.argmax(classifier.classify(t)[1])) for t, _ in samples]
            )
        return quality.class_figures(answers, [label for _, label in samples])


EXPORTER = TextClassificationExporter()
