"""What the BERT-text exporters share (`text_classification`,
`sentence_embedding`): texts to a BERT encoder's inputs in the graph, and
the LiteRT side (a model on token ids, calibration on raw sentences, and
`tokenizer.py`, the vocabulary, `text.json` and the task's runtime beside
it). Each task adds only its serving graph, its device function and its
settings.

BERT input packing, as training encodes (`tfformer.training.tasks.
text_classification.encode_texts`) and `classify.py` / `embed.py` do on
device: [START] a [END] for one text, [START] a [END] b [END] for a pair,
cut longest-first to `max_length` (the longer text loses its last token
until both fit; on a tie the second). [START] and [END] are the
vocabulary's own ids ([CLS] and [SEP] in a converted one).
"""

import dataclasses
import os
from typing import ClassVar

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.export import runtimes
from tfformer.export.archive import SignatureArchive, traced_once
from tfformer.export.exporter import Exporter, ExportRun, TFLiteSource
from tfformer.export.tasks.text import (
    MAX_INPUT_BYTES,
    clamp_ids,
    device_text_settings,
    make_tokenizer,
    special_ids,
    valid_utf8,
)
from tfformer.export.wordpiece import probe_character_classes
from tfformer.preprocessing.text import pair_lengths, row_heads
from tfformer.runs.files import atomic_copy

VOCABULARY_FILE = "text_vocab.txt"


@dataclasses.dataclass(frozen=True, kw_only=True)
class BertTextRun(ExportRun):
    """What a BERT-text export needs from its run directory."""

    text: object  # TokenizerSpec (WordPiece)
    max_length: int  # inputs are cut and padded to it
    vocabulary_size: int  # ids at or past it become [UNK]
    pairs: bool = False  # the model reads sentence pairs


def checked_pairs(text, text_b, signature):
    """`text_b`, once the graph has checked it holds as many strings as
    `text` (one pair per row); the error names `signature`."""
    with tf.control_dependencies(
        [
            tf.debugging.assert_equal(
                tf.size(text),
                tf.size(text_b),
                message=f"{signature}: text and text_b must hold as many "
                "strings (one pair per row)",
            )
        ]
    ):
        return tf.identity(text_b)


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
        # Traced once and called by every signature, for both texts of a
        # pair: the in-graph WordPiece is most of an export's tracing.
        self._traced_ids = traced_once(self._ids, tf.TensorSpec([None], tf.string))

    def _ids(self, text):
        """Ragged ids of each text's first 16 KiB (then made valid UTF-8),
        and whether a text was longer."""
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
        first, cut = self._traced_ids(tf.reshape(text, [-1]))
        count_a = tf.cast(first.row_lengths(), tf.int32)
        rows = first.nrows(out_type=tf.int32)
        start = tf.fill([rows, 1], self.start_id)
        end = tf.fill([rows, 1], self.end_id)
        if text_b is None:
            keep_a = tf.minimum(count_a, self.max_length - 2)
            pieces = [start, row_heads(first, keep_a), end]
            segments = [tf.zeros_like(p) for p in pieces]
            counts = count_a
        else:
            text_b = checked_pairs(text, text_b, "classify")
            second, cut_b = self._traced_ids(tf.reshape(text_b, [-1]))
            cut = cut | cut_b
            count_b = tf.cast(second.row_lengths(), tf.int32)
            keep_a, keep_b = pair_lengths(count_a, count_b, self.max_length - 3)
            pieces = [
                start,
                row_heads(first, keep_a),
                end,
                row_heads(second, keep_b),
                end,
            ]
            segments = [tf.zeros_like(p) for p in pieces[:3]] + [
                tf.ones_like(p) for p in pieces[3:]
            ]
            counts = count_a + count_b
        shape = [None, self.max_length]
        ids = tf.concat(pieces, axis=1).to_tensor(shape=shape)
        segment_ids = tf.concat(segments, axis=1).to_tensor(shape=shape)
        limit = self.max_length - (3 if text_b is not None else 2)
        return ids, segment_ids, counts, cut | (counts > limit)


class BertTextExporter(Exporter):
    """An exporter of a BERT encoder on WordPiece text.

    Subclasses set `task`, `run_type`, `graph_type` (a `BertInputs` with the
    serving signatures, `settings` and `write(path)`), `runtime` (the
    runtime file shipped) and `model_inputs`, and define `task_run`,
    `device_function` and `device_settings`.
    """

    tokenizer_kinds = ("wordpiece",)
    # The serving graph: `graph_type(run, character_classes=...)`.
    graph_type: ClassVar[type] = None
    # The runtime shipped beside the model ("classify.py").
    runtime: ClassVar[str] = None
    # The LiteRT model's int32 `(1, n)` inputs, in signature order.
    model_inputs: ClassVar[tuple] = ("token_ids",)
    # Dynamic int8 keeps per-channel weight scales (`TFLiteSource`).
    per_channel_weights: ClassVar[bool] = False

    def saved_model(self, run, path, **_):
        graph = self.graph_type(run, character_classes=probe_character_classes())
        graph.write(path)
        return graph.settings

    def device_function(self, run):
        """`(token_ids[, segment_ids]) -> {output: (1, ...)}`, the LiteRT
        model's computation on the `model_inputs`."""
        raise NotImplementedError(f"{type(self).__name__} must define device_function")

    def device_settings(self, run):
        """The task's entries of `text.json` (labels; pooling, ...)."""
        raise NotImplementedError(f"{type(self).__name__} must define device_settings")

    def tflite_sources(self, run, staging, quantize):
        """One `serving_default` on the `model_inputs` `(1, n)`, any n up to
        `max_length`, for every quantization."""
        del quantize
        path = os.path.join(staging, self.task)
        archive = SignatureArchive()
        archive.track(run.model)
        archive.add_endpoint(
            "serving_default",
            self.device_function(run),
            [tf.TensorSpec([1, None], tf.int32, name=n) for n in self.model_inputs],
        )
        archive.write_out(path)
        return [
            TFLiteSource("model", path, per_channel_weights=self.per_channel_weights)
        ]

    def calibration(self, run, texts, quantize, limit=200):
        """Full-int8 samples: the model's inputs for real texts, encoded as
        the serving graph encodes them (for pair runs, "a<TAB>b" lines)."""
        del quantize  # the model's inputs: the same for both
        texts = [t for t in texts if t.strip()][:limit]
        if not texts:
            raise InputError(
                "representative_sentences is empty; full-int8 calibration needs "
                "real inputs (for example training sentences)."
            )
        inputs = BertInputs(
            run.text, run.max_length, run.vocabulary_size, probe_character_classes()
        )
        samples = []
        for text in texts:
            if run.pairs:
                a, _, b = text.partition("\t")
                ids, segments, _, _ = inputs.encode(tf.constant([a]), tf.constant([b]))
            else:
                ids, segments, _, _ = inputs.encode(tf.constant([text]))
            n = int(tf.reduce_sum(tf.cast(ids != 0, tf.int32)))
            values = {"token_ids": ids.numpy(), "segment_ids": segments.numpy()}
            samples.append(
                (
                    "serving_default",
                    {name: values[name][:, :n] for name in self.model_inputs},
                )
            )
        return samples

    def device_files(self, run, out_dir):
        """The vocabulary, `text.json`, `tokenizer.py` and the runtime."""
        atomic_copy(run.text.path, os.path.join(out_dir, VOCABULARY_FILE))
        settings = device_text_settings(
            run.text.kind,
            run.text.lower_case,
            probe_character_classes(),
            spec=run.text,
            source_length=run.max_length,
            max_length=run.max_length,
            **self.device_settings(run),
            source_vocabulary=VOCABULARY_FILE,
            target_vocabulary=VOCABULARY_FILE,
        )
        runtimes.write_settings(out_dir, "text.json", settings)
        runtimes.ship(out_dir, "tokenizer.py", self.runtime)
