"""`StringClassifier` gives `tfformer.load(run).classify`'s probabilities,
scores and trains on strings exactly as on training's ids, saves with its
preprocessor, writes runs the product reads, and names bad input."""

import os
import warnings
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfformer
from tfformer.training.preprocessors import Tokenizer
from tfformer.training.preprocessors.tasks import TextClassifierPreprocessor
from tfformer.training.string_models import StringClassifier
from tfformer.training.tasks.text_classification import padded_inputs
from tfformer.training.text.wordpiece import WordPieceTokenizer

RUNS = os.path.join(os.path.dirname(__file__), "..", "..", "data", "legacy_runs")
CLASSIFIER = os.path.join(RUNS, "text_classification_run")
ENCODER = os.path.join(RUNS, "masked_lm_run")
TEXTS = [
    "a good film",
    "bad bad",
    "",
    "fine, if long: " + "very " * 20 + "long",
    "terrible acting!",
    "Ünïcode café 東京",
]


@pytest.fixture(scope="module")
def run_and_model():
    return tfformer.load(CLASSIFIER), StringClassifier.from_run(CLASSIFIER)


def test_classify_is_the_runs_predictor(run_and_model):
    predictor, model = run_and_model
    labels, probabilities = model.classify(TEXTS)
    want_labels, want = predictor.classify(TEXTS)
    assert labels == want_labels and model.labels == predictor.labels
    np.testing.assert_allclose(probabilities, want, atol=1e-6)
    np.testing.assert_allclose(probabilities.sum(-1), 1, atol=1e-6)


def test_evaluate_on_strings_is_the_loss_on_trainings_ids(run_and_model):
    predictor, model = run_and_model
    labels = [0, 1, 1, 0, 1, 0]
    ids, segments = padded_inputs(predictor.tokenizers["text"], TEXTS, 12, width=12)
    logits = model.model({"token_ids": ids, "segment_ids": segments}, training=False)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        np.array(labels), logits
    )
    accuracy = np.mean(np.argmax(logits, -1) == labels)
    model.compile()
    with pytest.warns(
        UserWarning, match=r"x: 1 of 6 are longer than the model reads \(12 tokens\)"
    ):
        got = model.evaluate(TEXTS, labels, batch_size=4, return_dict=True, verbose=0)
    np.testing.assert_allclose(got["loss"], float(loss), rtol=1e-5)
    np.testing.assert_allclose(got["accuracy"], accuracy)
    # Class names are the same labels as class ids.
    names = [model.labels[i] for i in labels]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_name = model.evaluate(TEXTS, names, return_dict=True, verbose=0)
    np.testing.assert_allclose(by_name["loss"], got["loss"], rtol=1e-6)


def test_a_fit_step_on_strings_is_a_step_on_trainings_ids():
    """A new head on a masked-LM run's encoder, no dropout, one SGD step on
    all texts at once: the same weights as the same step on ids that
    training's `padded_inputs` packs."""
    strings = StringClassifier.from_run(ENCODER, labels=["neg", "pos"], dropout=0.0)
    ids_model = type(strings.model).from_config(strings.model.get_config())
    ids_model.set_weights(strings.model.get_weights())
    head_before = strings.model.weights[-2].numpy().copy()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    labels = ["pos", "neg", "neg", "pos", "pos", "neg"]
    strings.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    ids_model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strings.fit(TEXTS, labels, batch_size=len(TEXTS), verbose=0)
    tokenizer = strings.preprocessor.tokenizer.tokenizer
    length = strings.preprocessor.sequence_length
    ids, segments = padded_inputs(tokenizer, TEXTS, length, width=length)
    y = np.array([strings.labels.index(label) for label in labels])
    ids_model.fit(
        {"token_ids": ids, "segment_ids": segments}, y, batch_size=6, verbose=0
    )
    for a, b in zip(strings.model.weights, ids_model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)
    # The step moved the weights: the comparison is not of untouched ones.
    assert np.abs(strings.model.weights[-2].numpy() - head_before).max() > 1e-3


def test_the_keras_file_keeps_the_preprocessor_and_compile_state(
    run_and_model, tmp_path
):
    _, model = run_and_model
    model.compile(optimizer=keras.optimizers.AdamW(1e-4))
    path = str(tmp_path / "classifier.keras")
    model.save(path)
    with zipfile.ZipFile(path) as zf:
        assert any(n.endswith("text_vocab.txt") for n in zf.namelist())
    restored = keras.saving.load_model(path)
    assert restored.labels == model.labels
    assert isinstance(restored.optimizer, keras.optimizers.AdamW)
    np.testing.assert_allclose(
        restored.classify(TEXTS)[1], model.classify(TEXTS)[1], atol=1e-6
    )


def test_save_run_writes_a_run_that_load_and_export_read(run_and_model, tmp_path):
    from tfformer.export.saved_model import export_saved_model

    _, model = run_and_model
    out = str(tmp_path / "run")
    assert model.save_run(out) == out
    loaded = tfformer.load(out)
    assert loaded.labels == model.labels
    np.testing.assert_allclose(
        loaded.classify(TEXTS)[1], model.classify(TEXTS)[1], atol=1e-6
    )
    served = tf.saved_model.load(
        export_saved_model(out, str(tmp_path / "serving"), progress=lambda *_: None)
    )
    out_probabilities = served.signatures["classify"](text=tf.constant(TEXTS))[
        "probabilities"
    ]
    np.testing.assert_allclose(out_probabilities, model.classify(TEXTS)[1], atol=1e-5)
    # A run is never written over, and a refusal leaves nothing behind.
    with pytest.raises(ValueError, match="path must be a new or empty directory"):
        model.save_run(out)
    assert sorted(os.listdir(tmp_path)) == ["run", "serving"]


def test_strategy_and_mixed_precision():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    model = StringClassifier.from_run(
        CLASSIFIER, strategy=strategy, precision="mixed_bfloat16"
    )
    assert model.distribute_strategy is strategy
    assert model.model.backbone.compute_dtype == "bfloat16"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = model.fit(TEXTS, [0, 1, 1, 0, 1, 0], batch_size=3, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert model.predict(TEXTS, verbose=0).dtype == np.float32


def test_bad_input_names_the_argument(run_and_model, tmp_path):
    _, model = run_and_model
    with pytest.raises(TypeError, match="x must be a list of strings, not one string"):
        model.fit("a film", [0])
    with pytest.raises(TypeError, match=r"x must be a list of strings \(not nested\)"):
        model.fit([["a", "film"]], [0])
    with pytest.raises(TypeError, match="item of type int"):
        model.predict([1, 2])
    with pytest.raises(
        ValueError, match=r"y must hold one label per input \(2\)\. Received: 1"
    ):
        model.fit(["a", "b"], [0])
    with pytest.raises(
        ValueError, match=r"y must hold class names .* Received: 'maybe'"
    ):
        model.fit(["a", "b"], [0, "maybe"])
    with pytest.raises(ValueError, match=r"ids in \[0, 2\)\. Received: 2"):
        model.evaluate(["a"], [2])
    with pytest.raises(
        ValueError, match=r"labels must name 2 or more distinct classes"
    ):
        StringClassifier.from_run(ENCODER)
    with pytest.raises(ValueError, match="labels must be None or the run's"):
        StringClassifier.from_run(CLASSIFIER, labels=["a", "b"])
    with pytest.raises(
        ValueError, match=r"sequence_length must be an int in \[3, 12\]"
    ):
        StringClassifier.from_run(CLASSIFIER, sequence_length=64)
    with pytest.raises(ValueError, match="path must be a text_classification"):
        StringClassifier.from_run(os.path.join(RUNS, "translation_run"))
    with pytest.raises(
        ValueError, match=r"precision must be None \(the run's\) or one of"
    ):
        StringClassifier.from_run(CLASSIFIER, precision="bfloat16")
    big = Tokenizer(
        WordPieceTokenizer(
            ["[PAD]", "[UNK]", "[START]", "[END]", *map(str, range(200))]
        )
    )
    with pytest.raises(
        ValueError,
        match=r"the text tokenizer has 204 tokens, the model's embedding 56 rows",
    ):
        StringClassifier(model.model, TextClassifierPreprocessor(big, 12), model.labels)
    with pytest.raises(
        ValueError,
        match=r"y and sample_weight must be None when x is a tf\.data\.Dataset",
    ):
        model.fit(tf.data.Dataset.from_tensor_slices(["a"]), [0])


def test_a_loaded_run_gives_its_string_model():
    from tfformer.training.string_models import StringCausalLM, StringTranslator

    predictor = tfformer.load(CLASSIFIER)
    model = predictor.string_model()
    assert isinstance(model, StringClassifier)
    np.testing.assert_allclose(
        model.classify(TEXTS)[1], predictor.classify(TEXTS)[1], atol=1e-6
    )
    head = tfformer.load(ENCODER).string_model(labels=["a", "b", "c"])
    assert head.labels == ["a", "b", "c"] and head.model.num_classes == 3
    assert isinstance(
        tfformer.load(os.path.join(RUNS, "causal_lm_run")).string_model(),
        StringCausalLM,
    )
    assert isinstance(
        tfformer.load(os.path.join(RUNS, "translation_run")).string_model(),
        StringTranslator,
    )
    with pytest.raises(
        ValueError, match="image_classification run has no model on strings"
    ):
        tfformer.load(os.path.join(RUNS, "vit_converted")).string_model()


def test_pairs_come_as_two_lists_or_a_list_of_pairs(run_and_model):
    """A classifier of pairs (the run's model under a pair preprocessor):
    both spellings of x give the logits of training's pair packing."""
    _, model = run_and_model
    tokenizer = model.preprocessor.tokenizer
    pairs = StringClassifier(
        model.model, TextClassifierPreprocessor(tokenizer, 12, pairs=True), model.labels
    )
    firsts, seconds = TEXTS, TEXTS[::-1]
    ids, segments = padded_inputs(
        tokenizer.tokenizer, list(zip(firsts, seconds, strict=True)), 12, width=12
    )
    want = model.model({"token_ids": ids, "segment_ids": segments}, training=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        columns = pairs.predict((firsts, seconds), verbose=0)
        rows = pairs.predict(list(zip(firsts, seconds, strict=True)), verbose=0)
    np.testing.assert_allclose(columns, want, atol=1e-5)
    np.testing.assert_allclose(rows, want, atol=1e-5)
    with pytest.raises(ValueError, match=r"x\[1\] \(texts_b\) must be as many as"):
        pairs.predict((firsts, seconds[:2]))
    with pytest.raises(ValueError, match="x must hold at least one input"):
        model.predict([])


def test_precision_defaults_to_the_runs_and_mixed_float16_scales_the_loss(tmp_path):
    bfloat16 = StringClassifier.from_run(CLASSIFIER, precision="mixed_bfloat16")
    saved = bfloat16.save_run(str(tmp_path / "bf16"))
    again = StringClassifier.from_run(saved)
    assert again.model.backbone.compute_dtype == "bfloat16"
    assert StringClassifier.from_run(CLASSIFIER).model.backbone.compute_dtype == (
        "float32"
    )
    half = StringClassifier.from_run(CLASSIFIER, precision="mixed_float16")
    half.compile()
    assert isinstance(half.optimizer, keras.optimizers.LossScaleOptimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = half.fit(TEXTS, [0, 1, 1, 0, 1, 0], batch_size=3, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_the_optimizer_state_survives_the_keras_file(tmp_path):
    model = StringClassifier.from_run(CLASSIFIER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(TEXTS, [0, 1, 1, 0, 1, 0], batch_size=2, epochs=2, verbose=0)
    path = str(tmp_path / "fitted.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations) == 6
    for a, b in zip(
        restored.optimizer.variables, model.optimizer.variables, strict=True
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), err_msg=a.path)
