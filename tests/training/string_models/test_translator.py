"""`StringTranslator` translates as `tfformer.load(run)` does, scores on
strings as on training's examples, and writes runs the product reads."""

import os

import numpy as np
import pytest

import tfformer
from tfformer.training import pipeline
from tfformer.training.losses import MaskedSparseCategoricalCrossentropy
from tfformer.training.string_models import StringTranslator

RUN = os.path.join(
    os.path.dirname(__file__), "..", "..", "data", "legacy_runs", "translation_run"
)
SOURCES = [
    "one",
    "twenty-one",
    "five hundred and six",
    "",
    "nine nine nine nine nine nine nine",
]
TARGETS = ["eins", "einundzwanzig", "fünfhundertsechs", "", "neun"]


@pytest.fixture(scope="module")
def run_and_model():
    return tfformer.load(RUN), StringTranslator.from_run(RUN)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_translate_is_the_runs_predictor(run_and_model, search):
    predictor, model = run_and_model
    assert model.translate(SOURCES, search=search) == predictor.translate(
        SOURCES, search=search
    )


def trainings_examples(predictor, length):
    """(inputs, labels) of SOURCES and TARGETS as training builds them
    (`pipeline.seq2seq_examples`), padded to `length`."""
    examples = pipeline.seq2seq_examples(
        predictor.tokenizers["source"].tokenize(SOURCES),
        predictor.tokenizers["target"].tokenize(TARGETS),
        start_id=2,
        end_id=3,
        max_length=length,
    )
    inputs = {
        k: v.to_tensor(shape=[None, length]) for k, v in examples.features.items()
    }
    return inputs, examples.labels.to_tensor(shape=[None, length])


def test_evaluate_on_pairs_is_the_loss_on_trainings_examples(run_and_model):
    predictor, model = run_and_model
    inputs, labels = trainings_examples(predictor, model.preprocessor.sequence_length)
    logits = model.model(inputs, training=False)
    want = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)(labels, logits)
    model.compile()
    got = model.evaluate((SOURCES, TARGETS), batch_size=8, return_dict=True, verbose=0)
    np.testing.assert_allclose(got["loss"], float(want), rtol=1e-5)
    # y as the targets is the same as x = (sources, targets).
    again = model.evaluate(SOURCES, TARGETS, batch_size=8, return_dict=True, verbose=0)
    np.testing.assert_allclose(again["loss"], got["loss"], rtol=1e-6)


def test_a_fit_step_on_pairs_is_a_step_on_trainings_examples(run_and_model, tmp_path):
    import keras

    predictor, _ = run_and_model
    strings = StringTranslator.from_run(RUN, dropout=0.0)
    ids_model = type(strings.model).from_config(strings.model.get_config())
    ids_model.set_weights(strings.model.get_weights())
    before = [w.numpy().copy() for w in strings.model.weights]
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    strings.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    ids_model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    strings.fit((SOURCES, TARGETS), batch_size=len(SOURCES), verbose=0)
    inputs, labels = trainings_examples(predictor, strings.preprocessor.sequence_length)
    ids_model.fit(inputs, labels, batch_size=len(SOURCES), verbose=0)
    moved = 0
    for a, b, old in zip(strings.model.weights, ids_model.weights, before, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)
        moved += not np.allclose(a.numpy(), old)
    assert moved > len(before) // 2
    out = strings.save_run(str(tmp_path / "run"))
    assert tfformer.load(out).translate(SOURCES, search="greedy") == strings.translate(
        SOURCES, search="greedy"
    )


def test_bad_pairs_are_named(run_and_model):
    _, model = run_and_model
    with pytest.raises(
        ValueError, match=r"targets must be as many as sources \(2\)\. Received: 1"
    ):
        model.fit((["a", "b"], ["x"]))
    with pytest.raises(TypeError, match=r"x \(sources\) must be a list of strings"):
        model.fit(([1], ["x"]))


def test_keras_file_predict_and_weights(run_and_model, tmp_path):
    import keras

    _, model = run_and_model
    path = str(tmp_path / "translator.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.translate(SOURCES, search="greedy") == model.translate(
        SOURCES, search="greedy"
    )
    logits = model.predict((SOURCES, TARGETS), verbose=0)
    length = model.preprocessor.sequence_length
    assert logits.shape[:2] == (len(SOURCES), length)
    with pytest.raises(ValueError, match=r"x must be \(sources, targets\) for predict"):
        model.predict(SOURCES)
    with pytest.raises(
        ValueError, match=r"sample_weight must hold one weight per pair"
    ):
        model.fit((SOURCES, TARGETS), sample_weight=[1.0])
