import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import ffn_weights, run_layer_test
from tfformer.layers import FeedForward
from tfformer.layers.feed_forward import gelu_approximate

RNG = np.random.default_rng(5)


NUMPY_ACTIVATIONS = {
    "relu": ref.relu,
    "gelu": ref.gelu,
    "gelu_approximate": ref.gelu_tanh,
}


@pytest.mark.parametrize("activation", sorted(NUMPY_ACTIVATIONS))
def test_matches_numpy_formula(activation):
    layer = FeedForward(32, activation=activation, bias_initializer="random_normal")
    x = 2 * RNG.normal(size=(2, 5, 8)).astype("float32")
    out = layer(x)
    act = NUMPY_ACTIVATIONS[activation]
    np.testing.assert_allclose(
        out, ref.feed_forward(x, *ffn_weights(layer), act), atol=1e-5
    )


def test_hand_computed_relu():
    layer = FeedForward(2, output_dim=1)
    layer.build((None, 2))
    layer.intermediate_dense.kernel.assign([[1.0, -1.0], [2.0, 0.5]])
    layer.intermediate_dense.bias.assign([0.0, 1.0])
    layer.output_dense.kernel.assign([[3.0], [4.0]])
    layer.output_dense.bias.assign([0.5])
    # x = (1, 1): hidden = relu(3, 0.5) = (3, 0.5); out = 9 + 2 + 0.5
    # x = (1, -2): hidden = relu(-3, 0) = (0, 0); out = 0.5
    np.testing.assert_allclose(
        layer(np.array([[1.0, 1.0], [1.0, -2.0]])), [[11.5], [0.5]]
    )


def test_dropout_only_in_training():
    layer = FeedForward(64, dropout=0.5)
    x = RNG.normal(size=(4, 8)).astype("float32")
    np.testing.assert_array_equal(layer(x), layer(x, training=False))
    assert not np.allclose(layer(x, training=True), layer(x))


def test_layer_contract(tmp_path):
    run_layer_test(
        FeedForward,
        {"intermediate_dim": 16, "activation": "gelu", "dropout": 0.1},
        {"inputs": RNG.normal(size=(2, 5, 8)).astype("float32")},
        tmp_path,
    )


def test_gelu_approximate_is_the_tanh_form_and_survives_saving(tmp_path):
    x = np.linspace(-4, 4, 81).astype("float32")
    np.testing.assert_allclose(gelu_approximate(x), ref.gelu_tanh(x), atol=1e-6)
    # It is not the exact form: they differ by up to 4.7e-4 (at |x| = 2.7).
    assert np.abs(ref.gelu_tanh(x) - ref.gelu(x)).max() > 1e-4
    run_layer_test(
        FeedForward,
        {"intermediate_dim": 16, "activation": "gelu_approximate"},
        {"inputs": RNG.normal(size=(2, 5, 8)).astype("float32")},
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="intermediate_dim must be a positive int"):
        FeedForward(0)
    with pytest.raises(ValueError, match="dropout must be in"):
        FeedForward(4, dropout=-0.1)


def test_gated_without_biases_is_swiglu():
    layer = FeedForward(24, activation="silu", gated=True, use_bias=False)
    x = RNG.normal(size=(2, 5, 8)).astype("float32")
    out = layer(x)
    assert [w.name for w in layer.weights] == ["kernel"] * 3  # no biases
    np.testing.assert_allclose(
        out,
        ref.swiglu(
            x,
            np.asarray(layer.gate_dense.kernel),
            np.asarray(layer.intermediate_dense.kernel),
            np.asarray(layer.output_dense.kernel),
        ),
        atol=1e-5,
    )


def test_gated_hand_computed():
    # gate relu(x Wg) = relu(2, -1) = (2, 0); up x Wu = (3, 5); product (6, 0);
    # out = 6 * 1 + 0 * 7 = 6.
    layer = FeedForward(2, output_dim=1, gated=True, use_bias=False)
    layer.build((None, 2))
    layer.gate_dense.kernel.assign([[2.0, -1.0], [0.0, 0.0]])
    layer.intermediate_dense.kernel.assign([[3.0, 5.0], [1.0, 1.0]])
    layer.output_dense.kernel.assign([[1.0], [7.0]])
    np.testing.assert_allclose(layer(np.array([[1.0, 0.0]])), [[6.0]])


def test_gated_layer_contract(tmp_path):
    run_layer_test(
        FeedForward,
        {
            "intermediate_dim": 16,
            "activation": "silu",
            "gated": True,
            "use_bias": False,
        },
        {"inputs": RNG.normal(size=(2, 5, 8)).astype("float32")},
        tmp_path,
    )
