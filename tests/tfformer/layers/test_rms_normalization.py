import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import run_layer_test
from tfformer.layers import RMSNormalization

RNG = np.random.default_rng(21)


def test_matches_numpy_formula():
    layer = RMSNormalization(epsilon=1e-5)
    x = (RNG.normal(size=(2, 5, 8)) + 1.5).astype("float32")
    layer.build(x.shape)
    gamma = RNG.normal(size=8).astype("float32")
    layer.gamma.assign(gamma)
    np.testing.assert_allclose(layer(x), ref.rms_norm(x, gamma, 1e-5), rtol=1e-5)


def test_hand_computed():
    # (3, 4): mean square 12.5, so y = (3, 4) / sqrt(12.5) = (0.8485, 1.1314);
    # no mean is subtracted (a LayerNorm would give (-1, 1)).
    layer = RMSNormalization(epsilon=1e-12)
    np.testing.assert_allclose(
        layer(np.array([[3.0, 4.0]], "float32")),
        [[3 / 12.5**0.5, 4 / 12.5**0.5]],
        rtol=1e-6,
    )


def test_half_precision_computes_in_float32():
    """Under mixed_float16, large activations (whose squares overflow
    float16) normalize as in float32; the result is float16."""
    layer = RMSNormalization(epsilon=1e-6, dtype="mixed_float16")
    x = np.full((1, 4), 300.0, "float32")  # 300^2 = 90,000 > float16's 65,504
    y = layer(x.astype("float16"))
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    np.testing.assert_allclose(np.asarray(y, "float32"), np.ones((1, 4)), rtol=1e-3)


def test_bad_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        RMSNormalization(epsilon=0)


def test_layer_contract(tmp_path):
    run_layer_test(
        RMSNormalization,
        {"epsilon": 1e-5},
        {"inputs": RNG.normal(size=(2, 5, 8)).astype("float32")},
        tmp_path,
    )
