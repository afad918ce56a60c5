"""`StringCausalLM` generates as `tfformer.load(run)` does, scores and
trains on strings as on training's windows (on one device or mirrored on
two), and saves with its preprocessor."""

import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfformer
from tfformer.training import pipeline
from tfformer.training.losses import MaskedSparseCategoricalCrossentropy
from tfformer.training.string_models import StringCausalLM

RUN = os.path.join(
    os.path.dirname(__file__), "..", "..", "data", "legacy_runs", "causal_lm_run"
)
PROMPTS = ["ab", "", "the quick brown fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def run_and_model():
    return tfformer.load(RUN), StringCausalLM.from_run(RUN)


@pytest.mark.parametrize(
    "settings",
    [dict(max_new_tokens=6), dict(max_new_tokens=5, search="sample", seed=3, top_k=5)],
)
def test_generate_is_the_runs_predictor(run_and_model, settings):
    predictor, model = run_and_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert model.generate(PROMPTS, **settings) == predictor.generate(
            PROMPTS, **settings
        )
    assert (
        "".join(model.stream("ab", max_new_tokens=6))
        == predictor.generate(["ab"], max_new_tokens=6)[0]
    )


def windows_loss(model, ids, length):
    """The trainer's loss on `language_model_examples` windows of `ids`."""
    examples = pipeline.language_model_examples(ids, sequence_length=length)
    inputs = examples.features["token_ids"].to_tensor()
    logits = model.model({"token_ids": inputs}, training=False)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    return float(loss(examples.labels.to_tensor(), logits))


def test_evaluate_on_a_text_is_the_loss_on_trainings_windows(run_and_model):
    _, model = run_and_model
    length = model.context  # 16
    text = "".join(chr(97 + i % 26) for i in range(5 * length + 1))  # 5 full windows
    ids = np.frombuffer(text.encode(), np.uint8).astype(np.int32) + 4
    model.compile()
    got = model.evaluate([text], batch_size=2, return_dict=True, verbose=0)
    np.testing.assert_allclose(got["loss"], windows_loss(model, ids, length), rtol=1e-5)


def test_mirrored_on_two_cpus_trains_as_one_device():
    """One SGD step on 4 full windows (no padding): two replicas' averaged
    gradient is the one-device gradient."""
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.skip("needs the 2 logical CPUs that tests/conftest.py configures")
    text = "the quick brown fox jumps over the lazy dog " * 2
    text = text[: 4 * 16 + 1]
    weights = {}
    for name, strategy in (
        ("one", tf.distribute.OneDeviceStrategy("/cpu:0")),
        ("two", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])),
    ):
        model = StringCausalLM.from_run(RUN, dropout=0.0, strategy=strategy)
        model.compile(optimizer=keras.optimizers.SGD(1.0))
        history = model.fit([text], batch_size=4, verbose=0)
        weights[name] = (
            [w.numpy() for w in model.model.weights],
            history.history["loss"][0],
        )
    np.testing.assert_allclose(weights["two"][1], weights["one"][1], rtol=1e-5)
    for a, b in zip(weights["one"][0], weights["two"][0], strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_fit_lowers_the_loss_and_the_keras_file_and_run_keep_it(
    run_and_model, tmp_path
):
    _, model = run_and_model
    model = StringCausalLM.from_run(RUN)
    texts = ["abcabcabcabcabcabcabcabcabcabcabcabc"] * 8
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(texts, batch_size=4, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0] - 0.5
    path = str(tmp_path / "lm.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    want = model.generate(["abca"], max_new_tokens=8)
    assert restored.generate(["abca"], max_new_tokens=8) == want
    out = model.save_run(str(tmp_path / "run"))
    assert tfformer.load(out).generate(["abca"], max_new_tokens=8) == want


def test_labels_are_refused(run_and_model):
    _, model = run_and_model
    with pytest.raises(
        ValueError, match="y and sample_weight must be None for a causal LM"
    ):
        model.fit(["abc"], ["d"])
    with pytest.raises(ValueError, match="path must be a causal_lm run"):
        StringCausalLM.from_run(os.path.join(os.path.dirname(RUN), "translation_run"))


def test_validation_texts_short_texts_and_datasets(run_and_model):
    model = StringCausalLM.from_run(RUN)
    texts = ["abcdefghijklmnopqrstuvwxyz" * 3] * 4
    history = model.fit(texts, batch_size=4, validation_data=texts[:2], verbose=0)
    assert np.isfinite(history.history["val_loss"][0])
    with pytest.raises(ValueError, match="x must hold a text of 2 or more tokens"):
        model.fit(["a", ""])
    # A dataset of batched texts: its windows are batched by batch_size.
    data = tf.data.Dataset.from_tensor_slices(texts).batch(2)
    rows = [len(b[1]) for b in model.dataset(data, batch_size=3)]
    assert rows == [3, 3, 3, 3, 3, 3, 2]  # 4 texts x 5 windows = 20


def test_the_default_loss_smooths_labels_as_the_run_trained():
    """The trained run's config says 0.1; a converted checkpoint's records
    no training: 0."""
    assert StringCausalLM.from_run(RUN).label_smoothing == 0.1
    converted = StringCausalLM.from_run(
        os.path.join(os.path.dirname(RUN), "gpt2_converted")
    )
    assert converted.label_smoothing == 0.0
    converted.compile()
    assert converted.loss.label_smoothing == 0.0
