import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import run_layer_test
from tfformer.layers import RotaryEmbedding

RNG = np.random.default_rng(3)


def test_matches_numpy_rotation_for_each_head():
    x = RNG.normal(size=(2, 5, 3, 8)).astype("float32")  # (batch, L, heads, d)
    out = np.asarray(RotaryEmbedding()(x, start_index=4))
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(
                out[b, :, h], ref.rotary(x[b, :, h], start=4), atol=1e-5
            )


def test_dot_products_depend_only_on_relative_position():
    rope = RotaryEmbedding(max_wavelength=100)
    q = RNG.normal(size=(1, 1, 8)).astype("float32")
    k = RNG.normal(size=(1, 1, 8)).astype("float32")

    def score(m, n):
        return float(
            np.sum(
                np.asarray(rope(q, start_index=m)) * np.asarray(rope(k, start_index=n))
            )
        )

    np.testing.assert_allclose(score(3, 1), score(10, 8), rtol=1e-4)
    np.testing.assert_allclose(score(0, 0), float(np.sum(q * k)), rtol=1e-5)
    assert abs(score(3, 1) - score(3, 2)) > 1e-3


def test_rotation_preserves_norms():
    x = RNG.normal(size=(2, 6, 8)).astype("float32")
    out = np.asarray(RotaryEmbedding()(x))
    np.testing.assert_allclose(
        np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5
    )


def test_scaling_factor_interpolates_positions():
    x = RNG.normal(size=(1, 1, 8)).astype("float32")
    scaled = RotaryEmbedding(scaling_factor=2.0)(x, start_index=6)
    np.testing.assert_allclose(scaled, RotaryEmbedding()(x, start_index=3), atol=1e-6)


def test_layer_contract(tmp_path):
    run_layer_test(
        RotaryEmbedding,
        {"max_wavelength": 1000},
        {"inputs": RNG.normal(size=(2, 5, 2, 4)).astype("float32")},
        tmp_path,
        fit=False,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="scaling_factor must be a positive number"):
        RotaryEmbedding(scaling_factor=0)
    with pytest.raises(ValueError, match="even, known last dimension"):
        RotaryEmbedding()(np.zeros((1, 2, 5), "float32"))
