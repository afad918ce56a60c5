import keras
import numpy as np
import pytest

from tfformer.training.losses import MaskedSparseCategoricalCrossentropy
from tfformer.training.metrics import MaskedAccuracy, RealTokens


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_matches_the_smoothed_cross_entropy_formula(smoothing):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 7)).astype("float32")
    labels = np.array([[4, 2, 6, 0, 0], [1, 1, 0, 0, 0], [5, 3, 2, 4, 6]])
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    got = float(loss(labels, logits))
    # NumPy: target = (1 - e) one_hot + e / V, mean over non-pad tokens.
    target = (1 - smoothing) * np.eye(7)[labels] + smoothing / 7
    per_token = -(target * log_softmax(logits)).sum(-1)
    mask = labels != 0
    np.testing.assert_allclose(got, per_token[mask].mean(), rtol=1e-5)
    # The same as Keras's own CategoricalCrossentropy on the real tokens.
    keras_loss = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=smoothing
    )
    expected = float(keras_loss(np.eye(7)[labels[mask]], logits[mask]))
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_padding_positions_change_nothing():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    labels = np.array([[3, 2, 0, 0], [5, 0, 0, 0]])
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    changed = logits.copy()
    changed[:, 2:] = 100.0 * rng.normal(size=(2, 2, 6))
    changed[1, 1:] = 0.0
    np.testing.assert_allclose(
        float(loss(labels, logits)), float(loss(labels, changed)), rtol=1e-6
    )
    # A batch of only padding gives 0, not NaN.
    assert float(loss(np.zeros((2, 4), "int32"), logits)) == 0.0


def test_config_round_trip_and_bad_smoothing():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.2, pad_id=0)
    again = MaskedSparseCategoricalCrossentropy.from_config(loss.get_config())
    assert again.label_smoothing == 0.2
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=1.0)


def test_masked_accuracy_and_token_count_ignore_padding():
    labels = np.array([[1, 2, 0], [3, 0, 0]])
    logits = np.zeros((2, 3, 5), "float32")
    logits[0, 0, 1] = logits[0, 1, 4] = logits[1, 0, 3] = 1.0  # 2 of 3 right
    logits[0, 2, 0] = logits[1, 1, 0] = logits[1, 2, 0] = 9.0  # pads "right"
    accuracy = MaskedAccuracy()
    accuracy.update_state(labels, logits)
    np.testing.assert_allclose(float(accuracy.result()), 2 / 3, rtol=1e-6)
    tokens = RealTokens()
    tokens.update_state(labels, logits)
    tokens.update_state(labels, logits)
    assert float(tokens.result()) == 6.0


def test_next_sentence_loss_and_accuracy_shift_the_labels_and_skip_padding():
    from tfformer.training.losses import NextSentenceLoss
    from tfformer.training.metrics import NextSentenceAccuracy

    logits = np.array([[2.0, -1.0], [0.5, 1.5], [3.0, 0.0], [9.0, -9.0]], "float32")
    # 1 = next (class 0), 2 = random (class 1), 0 = a padding row.
    labels = np.array([[1], [1], [2], [0]], "int32")
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_p[0, 0] + log_p[1, 0] + log_p[2, 1]) / 3
    loss = float(NextSentenceLoss()(labels, logits))
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    accuracy = NextSentenceAccuracy()
    accuracy.update_state(labels, logits)
    # Row 0 right (class 0), rows 1 and 2 wrong; the padding row not counted.
    np.testing.assert_allclose(float(accuracy.result()), 1 / 3, rtol=1e-6)
