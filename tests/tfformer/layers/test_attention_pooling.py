import keras
import numpy as np
import pytest

from tests.testing import run_layer_test
from tfformer.layers import AttentionPooling


def test_pooled_vector_is_the_softmax_weighted_mean():
    layer = AttentionPooling()
    x = np.random.default_rng(0).normal(size=(3, 5, 4)).astype("float32")
    out = np.asarray(layer(x))
    n = keras.ops.convert_to_numpy
    kernel, bias = n(layer.score.kernel)[:, 0], n(layer.score.bias)[0]
    for b in range(3):
        scores = x[b] @ kernel + bias
        w = np.exp(scores - scores.max())
        w /= w.sum()
        np.testing.assert_allclose(n(layer.weights_of(x))[b], w, atol=1e-6)
        np.testing.assert_allclose(out[b], w @ x[b], atol=1e-5)


def test_layer_contract(tmp_path):
    run_layer_test(
        AttentionPooling,
        {},
        {"sequence": np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")},
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="expects \\(batch, tokens, dim\\)"):
        AttentionPooling()(np.zeros((2, 8), "float32"))
