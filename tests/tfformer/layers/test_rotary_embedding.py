import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import run_layer_test
from tfformer.layers import RotaryEmbedding
from tfformer.layers.rotary_embedding import llama3_frequency_multipliers

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


LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64.0,
}


def test_llama3_multipliers_by_hand():
    """Base 100, 8 features: wavelengths 2 pi 100^(i/4) = 6.28, 19.9, 62.8,
    199. With 64 positions, factors 1 and 4: below 16 kept, above 64
    divided by 8, between blended with s = (64 / wavelength - 1) / 3."""
    got = llama3_frequency_multipliers(LLAMA3, 100, 8)
    s1 = (64 / (2 * np.pi * 100**0.25) - 1) / 3
    s2 = (64 / (2 * np.pi * 10) - 1) / 3
    expected = [1.0, (1 - s1) / 8 + s1, (1 - s2) / 8 + s2, 1 / 8]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_layer_contract(tmp_path):
    run_layer_test(
        RotaryEmbedding,
        {"max_wavelength": 1000, "frequency_scaling": LLAMA3},
        {"inputs": RNG.normal(size=(2, 5, 2, 4)).astype("float32")},
        tmp_path,
        fit=False,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="scaling_factor must be a positive number"):
        RotaryEmbedding(scaling_factor=0)
    with pytest.raises(ValueError, match=r'rope_type "llama3"\. Received'):
        RotaryEmbedding(frequency_scaling={"rope_type": "yarn", "factor": 2})
    with pytest.raises(ValueError, match=r"missing \['high_freq_factor'\]"):
        incomplete = {k: v for k, v in LLAMA3.items() if k != "high_freq_factor"}
        RotaryEmbedding(frequency_scaling=incomplete)
    with pytest.raises(ValueError, match=r"\['factor'\] must be a positive"):
        RotaryEmbedding(frequency_scaling={**LLAMA3, "factor": float("nan")})
    with pytest.raises(ValueError, match="even, known last dimension"):
        RotaryEmbedding()(np.zeros((1, 2, 5), "float32"))
