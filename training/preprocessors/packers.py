"""Packing layers: token ids (a `Tokenizer`'s ragged output) to the inputs
each model family reads, as training builds them, in the graph.

- `BertPacker`: `[START] a [END]` or `[START] a [END] b [END]` with segment
  ids, pairs cut longest-first as BERT's `_truncate_seq_pair` (as
  `tfformer.training.tasks.text_classification.encode_texts`).
- `Seq2SeqPacker`: source ids, and for training the decoder's inputs
  `[START] target` and labels `target [END]` (as
  `tfformer.training.pipeline.seq2seq_examples`).
- `CausalLMPacker`: each text's ids cut into windows of `sequence_length +
  1` that overlap by one id (inputs `w[:-1]`, labels `w[1:]`, as
  `tfformer.training.pipeline.language_model_examples` cuts a corpus); a
  text's last, shorter window is padded and its padding weighted 0.

Every packer pads with id 0 to a fixed `sequence_length` (what a compiled
model wants) and runs eagerly, in `tf.data.Dataset.map` and in a traced
graph. TensorFlow directly, as the tokenizers: this is `tf.data` code.
"""

import keras
import numpy as np
import tensorflow as tf

from tfformer.errors import InputError, InputTypeError
from tfformer.preprocessing.text import pair_lengths, row_heads


def checked_length(value, name, least):
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{name} must be an int >= {least}. Received: {value!r}")
    return value


def checked_id(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            f"{name} must be a token id (an int >= 0). Received: {value!r}"
        )
    return value


def ragged_ids(ids, name):
    """`ids` as an int32 RaggedTensor `(batch, None)`, and whether it was one
    sequence (rank 1) made a batch of one."""
    if isinstance(ids, list | tuple):
        raise InputTypeError(
            f"{name} must be a batch of token ids (a RaggedTensor or a tensor). "
            f"Received: a {type(ids).__name__}"
        )
    if not isinstance(ids, tf.RaggedTensor):
        ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise InputTypeError(
                f"{name} must hold integer token ids. Received: {ids.dtype.name}"
            )
        if ids.shape.rank == 1:
            return tf.RaggedTensor.from_tensor(ids[None, :]), True
        if ids.shape.rank != 2:
            raise InputError(
                f"{name} must be one sequence or a batch of them. Received: "
                f"shape {ids.shape}"
            )
        ids = tf.RaggedTensor.from_tensor(ids)
    elif ids.ragged_rank != 1 or ids.shape.rank != 2:
        raise InputError(
            f"{name} must be a (batch, None) RaggedTensor. Received: shape "
            f"{ids.shape}, ragged rank {ids.ragged_rank}"
        )
    return tf.cast(ids, tf.int32), False


def padded(ragged, length, single):
    out = ragged.to_tensor(default_value=0, shape=[None, length])
    return out[0] if single else out


class Packer(keras.layers.Layer):
    """What the packers share: ids-in layers with no weights, a length and
    the ids they add (None: not added)."""

    def __init__(self, sequence_length, start_id=None, end_id=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.sequence_length = checked_length(sequence_length, "sequence_length", 2)
        self.start_id = None if start_id is None else checked_id(start_id, "start_id")
        self.end_id = None if end_id is None else checked_id(end_id, "end_id")
        self.built = True

    def __call__(self, inputs, *args, **kwargs):
        # Keras takes tensors only as positional inputs: other values are
        # named here, NumPy arrays become tensors.
        parts = inputs if isinstance(inputs, tuple | list) else (inputs,)
        converted = []
        for part in parts:
            if isinstance(part, np.ndarray):
                part = tf.convert_to_tensor(part)
            if not isinstance(part, tf.Tensor | tf.RaggedTensor):
                raise InputTypeError(
                    "inputs must be token ids (a RaggedTensor, a tensor or a "
                    f"NumPy array), or a pair of them. Received: "
                    f"{type(part).__name__} {part!r:.60}"
                )
            converted.append(part)
        if isinstance(inputs, tuple | list):
            inputs = tuple(converted)
        else:
            inputs = converted[0]
        return super().__call__(inputs, *args, **kwargs)

    def split_pair(self, inputs, what):
        """(first ids, second ids or None) of `inputs`: one batch of ids, or
        a pair of them (`what` names the forms in the error)."""
        if not isinstance(inputs, list | tuple):
            return inputs, None
        if len(inputs) != 2:
            raise InputError(
                f"{type(self).__name__} takes {what}. "
                f"Received: a {type(inputs).__name__} of {len(inputs)}"
            )
        return inputs

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "start_id": self.start_id,
            "end_id": self.end_id,
        }


@keras.saving.register_keras_serializable(package="tfformer")
class BertPacker(Packer):
    """Ids of texts (or of pairs: a tuple of two) to a BERT encoder's
    `{"token_ids", "segment_ids"}`, `(batch, sequence_length)` int32.

    One text: `[START] a [END]`, `a` cut to `sequence_length - 2` ids. A pair:
    `[START] a [END] b [END]`, segment ids 0 then 1, the longer text losing
    its last id until both fit `sequence_length - 3` (on a tie the second:
    BERT's longest-first). Padding is id 0 and segment 0.

    Args:
        sequence_length: the packed length (the model's `max_length`).
        start_id, end_id: the vocabulary's [START] / [END] (BERT's [CLS] and
            [SEP] in a converted one; `Tokenizer.start_id`, `.end_id`).
    """

    def __init__(self, sequence_length, start_id, end_id, **kwargs):
        checked_length(sequence_length, "sequence_length", 3)
        checked_id(start_id, "start_id")
        checked_id(end_id, "end_id")
        super().__init__(sequence_length, start_id, end_id, **kwargs)

    def call(self, inputs):
        first, second = self.split_pair(
            inputs, "the ids of texts, or a pair (ids_a, ids_b)"
        )
        pair = second is not None
        first, single = ragged_ids(first, "inputs")
        rows = first.nrows(out_type=tf.int32)
        start = tf.fill([rows, 1], self.start_id)
        end = tf.fill([rows, 1], self.end_id)
        count_a = tf.cast(first.row_lengths(), tf.int32)
        if not pair:
            pieces = [start, first[:, : self.sequence_length - 2], end]
            segments = [tf.zeros_like(p) for p in pieces]
        else:
            second, _ = ragged_ids(second, "inputs[1]")
            tf.debugging.assert_equal(
                second.nrows(out_type=tf.int32),
                rows,
                message="BertPacker: ids_a and ids_b must hold as many rows",
            )
            count_b = tf.cast(second.row_lengths(), tf.int32)
            keep_a, keep_b = pair_lengths(count_a, count_b, self.sequence_length - 3)
            head_a, head_b = row_heads(first, keep_a), row_heads(second, keep_b)
            pieces = [start, head_a, end, head_b, end]
            segments = [tf.zeros_like(p) for p in pieces[:3]]
            segments += [tf.ones_like(p) for p in pieces[3:]]
        length = self.sequence_length
        return {
            "token_ids": padded(tf.concat(pieces, axis=1), length, single),
            "segment_ids": padded(tf.concat(segments, axis=1), length, single),
        }


@keras.saving.register_keras_serializable(package="tfformer")
class Seq2SeqPacker(Packer):
    """Source ids (and target ids, for training) to an encoder-decoder's
    inputs, `(batch, sequence_length)` int32 each.

    `call(source_ids)`: `{"encoder_token_ids"}` (the source cut to
    `sequence_length`), what generation starts from. `call((source_ids,
    target_ids))`: `(inputs, labels, sample_weight)` for `fit`: inputs
    `{"encoder_token_ids", "decoder_token_ids": [START] target}`, labels
    `target [END]` (the target cut to `sequence_length - 1`), weights 1
    on labels and 0 on padding.

    Args:
        sequence_length: the packed length (the run's `max_length`).
        start_id, end_id: the target vocabulary's [START] / [END].
    """

    def __init__(self, sequence_length, start_id, end_id, **kwargs):
        checked_id(start_id, "start_id")
        checked_id(end_id, "end_id")
        super().__init__(sequence_length, start_id, end_id, **kwargs)

    def call(self, inputs):
        source, target = self.split_pair(
            inputs, "source ids, or (source_ids, target_ids)"
        )
        source, single = ragged_ids(source, "source_ids")
        length = self.sequence_length
        encoder = padded(source[:, :length], length, single)
        if target is None:
            return {"encoder_token_ids": encoder}
        target, _ = ragged_ids(target, "target_ids")
        tf.debugging.assert_equal(
            target.nrows(),
            source.nrows(),
            message="Seq2SeqPacker: source_ids and target_ids must hold as many rows",
        )
        target = target[:, : length - 1]
        rows = target.nrows(out_type=tf.int32)
        starts = tf.fill([rows, 1], self.start_id)
        ends = tf.fill([rows, 1], self.end_id)
        decoder = padded(tf.concat([starts, target], axis=1), length, single)
        labels = tf.concat([target, ends], axis=1)
        weights = padded(tf.ones_like(labels, tf.float32), length, single)
        inputs = {"encoder_token_ids": encoder, "decoder_token_ids": decoder}
        return inputs, padded(labels, length, single), weights


@keras.saving.register_keras_serializable(package="tfformer")
class CausalLMPacker(Packer):
    """Ids of texts to a causal LM's `(inputs, labels, sample_weight)`.

    Each text's ids (after `start_id`, and before `end_id`, when given) are
    cut into windows of `sequence_length + 1` starting every
    `sequence_length` ids, so every id but the first is a label once;
    inputs `{"token_ids": w[:-1]}`, labels `w[1:]`. A text's last window
    may be shorter: it is padded with id 0 and its padding weighted 0. A
    text of n ids gives ceil((n - 1) / sequence_length) windows (none for a
    text of fewer than 2), so the output has as many rows as windows, not
    as texts: map it over a `tf.data` batch and `rebatch` after.

    Args:
        sequence_length: the model's context.
        start_id, end_id: ids put before and after each text, or None
            (tfformer's causal-LM runs train on a plain stream: none).
    """

    def call(self, inputs):
        ids, _ = ragged_ids(inputs, "inputs")
        rows = ids.nrows(out_type=tf.int32)
        if self.start_id is not None:
            ids = tf.concat([tf.fill([rows, 1], self.start_id), ids], axis=1)
        if self.end_id is not None:
            ids = tf.concat([ids, tf.fill([rows, 1], self.end_id)], axis=1)
        length = self.sequence_length
        counts = tf.cast(ids.row_lengths(), tf.int32)
        windows = tf.maximum(counts - 2, -1) // length + 1  # ceil((n - 1) / L)
        # Every window's text row and first position in it.
        row = tf.repeat(tf.range(rows), windows)
        first = tf.ragged.range(windows).flat_values * length
        ends = tf.minimum(first + length + 1, tf.gather(counts, row))
        starts = tf.cast(tf.gather(ids.row_starts(), row), tf.int32)
        cut = tf.gather(ids.values, tf.ragged.range(starts + first, starts + ends))
        inputs = padded(cut[:, :-1], length, False)
        labels = cut[:, 1:]
        weights = padded(tf.ones_like(labels, tf.float32), length, False)
        return {"token_ids": inputs}, padded(labels, length, False), weights
