import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import run_layer_test
from tfformer.layers import LayerNormalization

RNG = np.random.default_rng(11)


def with_random_weights(layer, shape):
    layer.build(shape)
    for weight in layer.weights:
        weight.assign(RNG.normal(size=weight.shape).astype("float32"))
    return layer


def test_matches_the_numpy_formula_and_keras_with_the_same_weights():
    # Large offsets: the centred form must not lose the variance to them.
    x = (RNG.normal(size=(3, 5, 16)) * 4 + 50).astype("float32")
    ours = with_random_weights(LayerNormalization(epsilon=1e-6), x.shape)
    gamma, beta = (np.asarray(w) for w in (ours.gamma, ours.beta))
    np.testing.assert_allclose(
        ours(x), ref.layer_norm(x.astype("float64"), gamma, beta, 1e-6), atol=2e-5
    )
    theirs = keras.layers.LayerNormalization(epsilon=1e-6)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(ours(x), theirs(x), atol=2e-5)


@pytest.mark.parametrize("axis", [[1, 3], [2, 3], 1])
def test_several_and_inner_axes_equal_keras(axis):
    x = RNG.normal(size=(2, 3, 4, 5)).astype("float32")
    ours = with_random_weights(LayerNormalization(axis=axis), x.shape)
    theirs = keras.layers.LayerNormalization(axis=axis)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(ours(x), theirs(x), atol=1e-5)


def test_without_scale_or_centre_equal_keras():
    x = RNG.normal(size=(2, 7, 8)).astype("float32")
    for options in ({"scale": False}, {"center": False}):
        ours = with_random_weights(LayerNormalization(**options), x.shape)
        theirs = keras.layers.LayerNormalization(**options)
        theirs.build(x.shape)
        theirs.set_weights(ours.get_weights())
        np.testing.assert_allclose(ours(x), theirs(x), atol=1e-5, err_msg=options)


def test_half_precision_computes_in_float32():
    x = (RNG.normal(size=(2, 3, 32)) * 8 + 300).astype("float32")
    layer = LayerNormalization(dtype="mixed_float16")
    layer.build(x.shape)
    out = layer(x.astype("float16"))
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    expected = ref.layer_norm(x.astype("float16").astype("float64"), 1.0, 0.0, 1e-3)
    np.testing.assert_allclose(np.asarray(out, "float32"), expected, atol=2e-3)


def test_layer_contract(tmp_path):
    run_layer_test(
        LayerNormalization,
        {"epsilon": 1e-5},
        {"inputs": RNG.normal(size=(2, 4, 8)).astype("float32")},
        tmp_path,
    )
