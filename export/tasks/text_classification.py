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
    make_tokenizer,
    special_ids,
    valid_utf8,
)
from tfformer.export.wordpiece import probe_character_classes
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import atomic_copy, atomic_write_text

DEVICE_CLASSIFIER = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "runtimes", "classify.py"
)
VOCABULARY_FILE = "text_vocab.txt"


@dataclasses.dataclass
class ClassificationRun:
    """What export needs from a text-classification run directory."""

    directory: str
    model: keras.Model
    text: object  # TokenizerSpec
    max_length: int
    labels: list
    pairs: bool
    vocabulary_size: int


def read_run(run_dir, checkpoint="model.keras"):
    run = run_dir if isinstance(run_dir, RunDirectory) else RunDirectory(run_dir)
    if run.task != "text_classification":
        raise ValueError(
            f"{run.path} holds a {run.task!r} run, not a text_classification run."
        )
    spec = run.tokenizer("text")
    if spec.kind != "wordpiece":
        raise ValueError(
            f"{run.path}: exporting a classifier needs a WordPiece vocabulary. "
            f"Received: data.tokenizer={spec.kind!r}"
        )
    model = run.load_model(checkpoint)
    return ClassificationRun(
        directory=run.path,
        model=model,
        text=spec,
        max_length=run.manifest.max_length,
        labels=list(run.manifest.labels),
        pairs=run.manifest.pairs,
        vocabulary_size=int(model.backbone.token_embedding.vocabulary_size),
    )


def pair_lengths(first, second, budget):
    """Token counts kept of a pair, as BERT's longest-first loop keeps them
    (the longer text loses a token until both fit `budget`; on a tie the
    second): closed form, int32 tensors."""
    half_up = (budget + 1) // 2
    half_down = budget // 2
    return (
        tf.minimum(first, tf.maximum(budget - second, half_up)),
        tf.minimum(second, tf.maximum(budget - first, half_down)),
    )


class BertInputs(tf.Module):
    """Texts (or pairs) to a BERT encoder's `token_ids` and `segment_ids`, in
    the graph, as training encodes them.

    Args:
        spec: the run's text `TokenizerSpec`.
        max_length: the length inputs are cut and padded to.
        vocabulary_size: ids at or past it become [UNK].
        character_classes: `probe_character_classes()` (computed if None).
    """

    def __init__(self, spec, max_length, vocabulary_size, character_classes=None):
        super().__init__()
        self.tokenizer = make_tokenizer(spec, character_classes)
        # The vocabulary's own [START]/[END] ([CLS]/[SEP] in a converted one).
        self.start_id, self.end_id = special_ids(spec)
        self.max_length = max_length
        self.vocabulary_size = vocabulary_size

    def _ids(self, text):
        """Ragged ids of each text's first 16 KiB (then made valid UTF-8),
        and whether a text was longer."""
        text = tf.reshape(text, [-1])
        size = tf.strings.length(text)
        text = tf.strings.substr(
            text, tf.zeros_like(size), tf.fill(tf.shape(size), MAX_INPUT_BYTES)
        )
        ids = tf.cast(self.tokenizer.tokenize(valid_utf8(text)), tf.int32)
        ids = tf.ragged.map_flat_values(
            clamp_ids, ids, self.vocabulary_size, self.tokenizer.unk_id
        )
        return ids, size > MAX_INPUT_BYTES

    def encode(self, text, text_b=None):
        """(token_ids, segment_ids) `(batch, max_length)`, the token counts
        of each text's first 16 KiB, and whether anything was cut (bytes
        past 16 KiB, or tokens past `max_length`)."""
        first, cut = self._ids(text)
        count_a = tf.cast(first.row_lengths(), tf.int32)
        rows = first.nrows(out_type=tf.int32)
        start = tf.fill([rows, 1], self.start_id)
        end = tf.fill([rows, 1], self.end_id)
        if text_b is None:
            keep_a = tf.minimum(count_a, self.max_length - 2)
            pieces = [start, _head(first, keep_a), end]
            segments = [tf.zeros_like(p) for p in pieces]
            counts = count_a
        else:
            with tf.control_dependencies(
                [
                    tf.debugging.assert_equal(
                        tf.size(text),
                        tf.size(text_b),
                        message="classify: text and text_b must hold as many "
                        "strings (one pair per row)",
                    )
                ]
            ):
                text_b = tf.identity(text_b)
            second, cut_b = self._ids(text_b)
            cut = cut | cut_b
            count_b = tf.cast(second.row_lengths(), tf.int32)
            keep_a, keep_b = pair_lengths(count_a, count_b, self.max_length - 3)
            pieces = [start, _head(first, keep_a), end, _head(second, keep_b), end]
            segments = [tf.zeros_like(p) for p in pieces[:3]] + [
                tf.ones_like(p) for p in pieces[3:]
            ]
            counts = count_a + count_b
        shape = [None, self.max_length]
        ids = tf.concat(pieces, axis=1).to_tensor(shape=shape)
        segment_ids = tf.concat(segments, axis=1).to_tensor(shape=shape)
        limit = self.max_length - (3 if text_b is not None else 2)
        return ids, segment_ids, counts, cut | (counts > limit)


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
        archive = keras.export.ExportArchive()
        archive.track(self.model)
        archive.track(self.tokenizer)
        inputs = [tf.TensorSpec([None], tf.string, name="text")]
        if self.pairs:
            inputs.append(tf.TensorSpec([None], tf.string, name="text_b"))
        archive.add_endpoint("serving_default", self.classify, inputs)
        archive.add_endpoint("classify", self.classify, inputs)
        archive.add_endpoint("embed", self.embed, inputs)
        archive.add_endpoint("tokenize", self.tokenize, inputs)
        archive.write_out(path, verbose=False)


def _head(ragged, counts):
    """The first `counts[r]` values of each row of `ragged`."""
    positions = tf.ragged.range(tf.cast(ragged.row_lengths(), tf.int32))
    return tf.ragged.boolean_mask(ragged, positions < counts[:, None])


class TextClassificationExporter:
    """The text-classification task's exporters, as `tfformer-export` calls them."""

    name = "text_classification"

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
        graph = ClassifierGraph(run, character_classes=_classes(run))
        graph.write(path)
        return graph.settings

    def tflite_sources(self, run, staging, quantize=None):
        del quantize  # one graph for every quantization
        path = os.path.join(staging, "classifier")
        archive = keras.export.ExportArchive()
        archive.track(run.model)

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

        archive.add_endpoint(
            "serving_default",
            probabilities,
            [
                tf.TensorSpec([1, None], tf.int32, name="token_ids"),
                tf.TensorSpec([1, None], tf.int32, name="segment_ids"),
            ],
        )
        archive.write_out(path, verbose=False)
        return [("model", path, None)]

    def calibration(self, run, texts, limit=200):
        """Full-int8 samples: the model's inputs for real texts (for pair
        runs, "a<TAB>b" lines)."""
        texts = [t for t in texts if t.strip()][:limit]
        if not texts:
            raise ValueError(
                "representative_sentences is empty; full-int8 calibration needs "
                "real inputs (for example training sentences)."
            )
        graph = ClassifierGraph(run, character_classes=_classes(run))
        samples = []
        for text in texts:
            if run.pairs:
                a, _, b = text.partition("\t")
                ids, segments, _, _ = graph.encode(tf.constant([a]), tf.constant([b]))
            else:
                ids, segments, _, _ = graph.encode(tf.constant([text]))
            n = int(tf.reduce_sum(tf.cast(ids != 0, tf.int32)))
            samples.append(
                (
                    "serving_default",
                    {
                        "token_ids": ids.numpy()[:, :n],
                        "segment_ids": segments.numpy()[:, :n],
                    },
                )
            )
        return samples

    def device_files(self, run, out_dir):
        """The vocabulary, `text.json`, `tokenizer.py` and `classify.py`."""
        atomic_copy(run.text.path, os.path.join(out_dir, VOCABULARY_FILE))
        settings = device_text_settings(
            run.text.kind,
            run.text.lower_case,
            _classes(run),
            spec=run.text,
            source_length=run.max_length,
            max_length=run.max_length,
            labels=run.labels,
            pairs=run.pairs,
            source_vocabulary=VOCABULARY_FILE,
            target_vocabulary=VOCABULARY_FILE,
        )
        atomic_write_text(
            os.path.join(out_dir, "text.json"), json.dumps(settings, indent=1)
        )
        atomic_copy(DEVICE_TOKENIZER, os.path.join(out_dir, "tokenizer.py"))
        atomic_copy(DEVICE_CLASSIFIER, os.path.join(out_dir, "classify.py"))


def _classes(run):
    del run  # read_run refused byte tokenizers already
    return probe_character_classes()


EXPORTER = TextClassificationExporter()
