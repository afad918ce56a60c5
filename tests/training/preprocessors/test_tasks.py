"""The task preprocessors: strings (and labels) to what `fit` reads, the
same whichever way the pairs come (a tuple, `y`, `tf.data` elements), as
the packers make them from the tokenizers' ids, and saved with a model."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.training.preprocessors.test_tokenizer import round_trip
from tfformer.training import pipeline
from tfformer.training.preprocessors import Tokenizer
from tfformer.training.preprocessors.tasks import (
    CausalLMPreprocessor,
    Seq2SeqPreprocessor,
    TextClassifierPreprocessor,
)
from tfformer.training.tasks.text_classification import padded_inputs

RUN = os.path.join(
    os.path.dirname(__file__), "..", "..", "data", "legacy_runs", "translation_run"
)
SOURCES = ["one", "twenty-one", "", "five hundred and six and six and six and six"]
TARGETS = ["eins", "einundzwanzig", "null", ""]


@pytest.fixture(scope="module")
def tokenizers():
    return Tokenizer.from_run(RUN, "source"), Tokenizer.from_run(RUN, "target")


def assert_same(got, want):
    tf.nest.map_structure(
        lambda g, w: np.testing.assert_array_equal(np.asarray(g), np.asarray(w)),
        got,
        want,
    )


def seq2seq_want(source, target, length):
    """Training's examples (`pipeline.seq2seq_examples`), padded, with
    weights 1 on labels."""
    examples = pipeline.seq2seq_examples(
        source.tokenizer.tokenize(SOURCES),
        target.tokenizer.tokenize(TARGETS),
        start_id=target.start_id,
        end_id=target.end_id,
        max_length=length,
    )
    labels = examples.labels.to_tensor(shape=[None, length])
    inputs = {
        k: v.to_tensor(shape=[None, length]) for k, v in examples.features.items()
    }
    return inputs, labels, tf.cast(labels != 0, tf.float32)


def test_seq2seq_pairs_every_way_are_trainings_examples(tokenizers):
    source, target = tokenizers
    pre = Seq2SeqPreprocessor(source, target, 8)
    want = seq2seq_want(source, target, 8)
    assert_same(pre((SOURCES, TARGETS)), want)
    assert_same(pre(SOURCES, TARGETS), want)
    dataset = tf.data.Dataset.from_tensor_slices((SOURCES, TARGETS)).batch(4).map(pre)
    assert_same(next(iter(dataset)), want)
    assert_same(pre(SOURCES), {"encoder_token_ids": want[0]["encoder_token_ids"]})
    # Sample weights scale each pair's label weights.
    weighted = pre(SOURCES, TARGETS, sample_weight=[1.0, 0.0, 2.0, 1.0])
    np.testing.assert_array_equal(weighted[2], want[2] * np.array([[1], [0], [2], [1]]))
    with pytest.raises(ValueError, match=r"x must be sources, or a pair .* tuple of 3"):
        pre((SOURCES, TARGETS, TARGETS))


def test_classifier_texts_and_pairs_are_trainings_inputs(tokenizers):
    text, _ = tokenizers
    single = TextClassifierPreprocessor(text, 8)
    pairs = TextClassifierPreprocessor(text, 8, pairs=True)
    ids, segments = padded_inputs(text.tokenizer, SOURCES, 8, width=8)
    assert_same(single(SOURCES), {"token_ids": ids, "segment_ids": segments})
    both = list(zip(SOURCES, TARGETS, strict=True))
    ids, segments = padded_inputs(text.tokenizer, both, 8, width=8)
    want = {"token_ids": ids, "segment_ids": segments}
    assert_same(pairs((SOURCES, TARGETS)), want)
    labels = np.array([0, 1, 1, 0])
    assert_same(pairs((SOURCES, TARGETS), labels), (want, labels))
    dataset = tf.data.Dataset.from_tensor_slices(((SOURCES, TARGETS), labels)).batch(4)
    assert_same(next(iter(dataset.map(pairs))), (want, labels))
    with pytest.raises(ValueError, match=r"x must be a pair \(texts_a, texts_b\)"):
        pairs(SOURCES)


def test_causal_lm_windows_are_trainings_and_take_no_labels(tokenizers):
    text, _ = tokenizers
    stream = " ".join(SOURCES * 6)
    ids = text.tokenizer.tokenize([stream])[0].numpy()
    examples = pipeline.language_model_examples(ids, sequence_length=4)
    full = len(examples.lengths)
    inputs, labels, _ = CausalLMPreprocessor(text, 4)([stream])
    np.testing.assert_array_equal(
        inputs["token_ids"][:full], examples.features["token_ids"].to_tensor()
    )
    np.testing.assert_array_equal(labels[:full], examples.labels.to_tensor())
    # With an end id, each text's labels end with it.
    _, labels, weights = CausalLMPreprocessor(text, 4, end_id=text.end_id)(
        ["one", "two"]
    )
    last = [
        row[w > 0][-1]
        for row, w in zip(np.asarray(labels), np.asarray(weights), strict=True)
    ]
    assert last == [text.end_id] * len(last)
    with pytest.raises(
        ValueError, match="y and sample_weight must be None for a causal LM"
    ):
        CausalLMPreprocessor(text, 4)(SOURCES, [1, 2, 3, 4])


def test_saved_with_a_model_and_read_back(tokenizers, tmp_path):
    source, target = tokenizers
    pre = Seq2SeqPreprocessor(source, target, 8)
    restored, _ = round_trip(pre, str(tmp_path))
    assert type(restored) is Seq2SeqPreprocessor
    assert_same(restored(SOURCES, TARGETS), pre(SOURCES, TARGETS))
    assert restored.get_config()["sequence_length"] == 8
