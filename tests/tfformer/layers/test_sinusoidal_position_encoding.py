import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import run_layer_test
from tfformer.layers import SinusoidalPositionEncoding


def test_matches_the_paper_formula():
    x = np.zeros((2, 12, 10), "float32")
    out = np.asarray(SinusoidalPositionEncoding()(x))
    assert out.shape == (2, 12, 10)
    np.testing.assert_allclose(out[0], ref.sinusoidal_table(12, 10), atol=1e-5)
    np.testing.assert_array_equal(out[0], out[1])


def test_hand_computed_values():
    out = np.asarray(SinusoidalPositionEncoding()(np.zeros((1, 3, 4), "float32")))[0]
    # pos 0: sin 0, cos 0, sin 0, cos 0
    np.testing.assert_allclose(out[0], [0, 1, 0, 1], atol=1e-7)
    # pos 2, i=1 (features 2, 3): angle 2 / 10000^(2/4) = 0.02
    np.testing.assert_allclose(
        out[2], [np.sin(2), np.cos(2), np.sin(0.02), np.cos(0.02)], atol=1e-6
    )


def test_odd_dimension_and_start_offsets():
    x = np.zeros((2, 4, 7), "float32")
    layer = SinusoidalPositionEncoding(max_wavelength=100)
    np.testing.assert_allclose(
        layer(x, start_index=5)[0],
        ref.sinusoidal_table(4, 7, start=5, max_wavelength=100),
        atol=1e-5,
    )
    per_example = np.asarray(layer(x, start_index=np.array([0, 3])))
    np.testing.assert_allclose(
        per_example[1], ref.sinusoidal_table(4, 7, 3, 100), atol=1e-5
    )
    np.testing.assert_allclose(
        per_example[0], ref.sinusoidal_table(4, 7, 0, 100), atol=1e-5
    )


def test_layer_contract(tmp_path):
    run_layer_test(
        SinusoidalPositionEncoding,
        {},
        {"inputs": np.zeros((2, 5, 8), "float32")},
        tmp_path,
        fit=False,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_wavelength must be a positive number"):
        SinusoidalPositionEncoding(max_wavelength=0)
    with pytest.raises(ValueError, match=r"expects \(batch, length, dim\)"):
        SinusoidalPositionEncoding()(keras.ops.zeros((2, 5)))
