"""The packing layers give what training builds (`encode_texts`,
`seq2seq_examples`, `language_model_examples`, each a separate
implementation) and hand-computed rows, eagerly, in `tf.data`, traced and
rebuilt from their configs."""

import random

import numpy as np
import pytest
import tensorflow as tf

from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.training import pipeline
from tfformer.training.preprocessors import (
    BertPacker,
    CausalLMPacker,
    Seq2SeqPacker,
    Tokenizer,
)
from tfformer.training.tasks.text_classification import padded_inputs

BYTES = Tokenizer(ByteTokenizer())
START, END = 2, 3


def random_texts(n, seed, longest=40):
    rng = random.Random(seed)
    return [
        "".join(rng.choice("abcdefgh") for _ in range(rng.randint(0, longest)))
        for _ in range(n)
    ]


def modes(layer, *inputs):
    """`layer`'s outputs on `inputs` eagerly, traced, mapped over a
    `tf.data` batch of all rows, and from a layer rebuilt from its config."""
    rebuilt = type(layer).from_config(layer.get_config())
    dataset = tf.data.Dataset.from_tensors(inputs).map(
        lambda *x: layer(x if len(x) > 1 else x[0])
    )
    arg = inputs if len(inputs) > 1 else inputs[0]
    return {
        "eager": layer(arg),
        "traced": tf.function(lambda: layer(arg))(),
        "tf.data": next(iter(dataset)),
        "rebuilt": rebuilt(arg),
    }


def assert_same(got, want, how):
    got = tf.nest.map_structure(np.asarray, got)
    want = tf.nest.map_structure(np.asarray, want)
    tf.nest.map_structure(
        lambda g, w: np.testing.assert_array_equal(g, w, err_msg=how), got, want
    )


@pytest.mark.parametrize("length", [5, 8, 16, 48])
def test_bert_packing_is_trainings_for_texts_and_pairs(length):
    firsts, seconds = random_texts(300, 0), random_texts(300, 1)
    for texts, ids in (
        (firsts, (BYTES(firsts),)),
        (list(zip(firsts, seconds, strict=True)), (BYTES(firsts), BYTES(seconds))),
    ):
        token_ids, segment_ids = padded_inputs(
            ByteTokenizer(), texts, length, width=length
        )
        want = {"token_ids": token_ids, "segment_ids": segment_ids}
        for how, got in modes(BertPacker(length, START, END), *ids).items():
            assert_same(got, want, f"{how}, length {length}")


def test_bert_packing_by_hand():
    packer = BertPacker(6, START, END)
    a, b = BYTES(["abcdef", "a"]), BYTES(["xy", "bcdefgh"])
    out = packer((a, b))
    # Budget 3: (6, 2) keeps 2 + 1 (the longer loses); (1, 7) keeps 1 + 2.
    np.testing.assert_array_equal(
        out["token_ids"], [[2, 101, 102, 3, 124, 3], [2, 101, 3, 102, 103, 3]]
    )
    np.testing.assert_array_equal(
        out["segment_ids"], [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]]
    )
    one = packer(BYTES("ab"))  # one sequence: rows of (6,)
    np.testing.assert_array_equal(one["token_ids"], [2, 101, 102, 3, 0, 0])


@pytest.mark.parametrize("length", [2, 5, 32])
def test_seq2seq_packing_is_trainings(length):
    sources, targets = random_texts(200, 2), random_texts(200, 3)
    source_ids, target_ids = BYTES(sources), BYTES(targets)
    examples = pipeline.seq2seq_examples(
        source_ids, target_ids, start_id=START, end_id=END, max_length=length
    )

    def dense(ragged):
        return ragged.to_tensor(shape=[None, length])

    labels = dense(examples.labels)
    want = (
        {name: dense(ids) for name, ids in examples.features.items()},
        labels,
        tf.cast(labels != 0, tf.float32),
    )
    for how, got in modes(
        Seq2SeqPacker(length, START, END), source_ids, target_ids
    ).items():
        assert_same(got, want, how)
    alone = Seq2SeqPacker(length, START, END)(source_ids)
    assert_same(
        alone, {"encoder_token_ids": want[0]["encoder_token_ids"]}, "source alone"
    )


def test_seq2seq_packing_by_hand():
    inputs, labels, weights = Seq2SeqPacker(4, START, END)(
        (BYTES(["abcdef"]), BYTES(["xy"]))
    )
    np.testing.assert_array_equal(inputs["encoder_token_ids"], [[101, 102, 103, 104]])
    np.testing.assert_array_equal(inputs["decoder_token_ids"], [[2, 124, 125, 0]])
    np.testing.assert_array_equal(labels, [[124, 125, 3, 0]])
    np.testing.assert_array_equal(weights, [[1, 1, 1, 0]])


@pytest.mark.parametrize("length", [3, 16, 64])
def test_causal_lm_windows_are_trainings_on_a_stream(length):
    stream = "".join(random_texts(40, 4, longest=200))
    ids = np.frombuffer(stream.encode(), np.uint8).astype(np.int32) + 4
    examples = pipeline.language_model_examples(ids, sequence_length=length)
    full = len(examples.lengths)
    for how, (inputs, labels, weights) in modes(
        CausalLMPacker(length), BYTES([stream])
    ).items():
        # ceil((n - 1) / length) windows: the full ones are training's.
        assert len(labels) == -(-(len(ids) - 1) // length), how
        np.testing.assert_array_equal(
            inputs["token_ids"][:full], examples.features["token_ids"].to_tensor(), how
        )
        np.testing.assert_array_equal(labels[:full], examples.labels.to_tensor(), how)
        np.testing.assert_array_equal(weights[:full], 1, how)
        # Every id but the first is a label exactly once.
        np.testing.assert_array_equal(
            np.asarray(labels)[np.asarray(weights) == 1], ids[1:], how
        )


def test_causal_lm_windows_by_hand():
    inputs, labels, weights = CausalLMPacker(3)(BYTES(["abcdefg", "a", "ab", ""]))
    np.testing.assert_array_equal(
        inputs["token_ids"], [[101, 102, 103], [104, 105, 106], [101, 0, 0]]
    )
    np.testing.assert_array_equal(
        labels, [[102, 103, 104], [105, 106, 107], [102, 0, 0]]
    )
    np.testing.assert_array_equal(weights, [[1, 1, 1], [1, 1, 1], [1, 0, 0]])
    inputs, labels, weights = CausalLMPacker(4, START, END)(BYTES(["ab"]))
    np.testing.assert_array_equal(inputs["token_ids"], [[2, 101, 102, 0]])
    np.testing.assert_array_equal(labels, [[101, 102, 3, 0]])
    np.testing.assert_array_equal(weights, [[1, 1, 1, 0]])


def test_bad_arguments_name_themselves():
    with pytest.raises(
        ValueError, match=r"sequence_length must be an int >= 3\. Received: 2"
    ):
        BertPacker(2, START, END)
    with pytest.raises(
        ValueError, match=r"sequence_length must be an int >= 2\. Received: '8'"
    ):
        CausalLMPacker("8")
    with pytest.raises(
        ValueError, match=r"start_id must be a token id .* Received: -1"
    ):
        Seq2SeqPacker(8, -1, END)
    with pytest.raises(
        ValueError, match=r"end_id must be a token id .* Received: True"
    ):
        CausalLMPacker(8, end_id=True)
    packer = BertPacker(8, START, END)
    with pytest.raises(
        TypeError, match=r"inputs must be token ids .* Received: list \[\[1, 2\]\]"
    ):
        packer(([[1, 2]],))
    with pytest.raises(
        TypeError, match=r"inputs must hold integer token ids\. Received: float32"
    ):
        packer(tf.constant([[1.0]]))
    with pytest.raises(ValueError, match=r"Received: shape \(1, 1, 1\)"):
        packer(tf.zeros([1, 1, 1], tf.int32))
    with pytest.raises(
        ValueError, match=r"or a pair \(ids_a, ids_b\)\. Received: a tuple of 3"
    ):
        packer((BYTES(["a"]),) * 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many rows"):
        packer((BYTES(["a"]), BYTES(["a", "b"])))
