import numpy as np
import pytest

from tests.testing import run_layer_test
from tfformer.layers import SequencePooling

RNG = np.random.default_rng(11)


def numpy_pooling(x, real, mode, normalize):
    """sentence-transformers' Pooling (+ Normalize), row by row."""
    out = []
    for row, keep in zip(x, real, strict=True):
        tokens = row[keep]
        if mode == "cls":
            v = row[0]
        elif not len(tokens):
            v = np.zeros(row.shape[-1])
        elif mode == "mean":
            v = tokens.mean(0)
        else:
            v = tokens.max(0)
        if normalize and np.linalg.norm(v) > 0:
            v = v / np.linalg.norm(v)
        out.append(v)
    return np.array(out)


@pytest.mark.parametrize("mode", ["mean", "cls", "max"])
@pytest.mark.parametrize("normalize", [False, True])
def test_matches_numpy_and_ignores_padding(mode, normalize, tmp_path):
    x = RNG.normal(size=(4, 6, 8)).astype("float32")
    real = np.array([[1] * 6, [1] * 3 + [0] * 3, [1] + [0] * 5, [0] * 6], bool)
    # Padding positions hold large values: any leak would show.
    x[~real] = 50.0
    out = run_layer_test(
        SequencePooling,
        {"mode": mode, "normalize": normalize},
        {"sequence": x, "padding_mask": real},
        tmp_path,
        fit=False,
        mixed_precision=False,
    )
    np.testing.assert_allclose(out, numpy_pooling(x, real, mode, normalize), atol=1e-5)


def test_hand_computed_mean_and_norm():
    x = np.array([[[3.0, 0.0], [1.0, 4.0], [100.0, 100.0]]], "float32")
    real = np.array([[True, True, False]])
    # mean of (3, 0), (1, 4) = (2, 2); normalized (1/sqrt2, 1/sqrt2)
    np.testing.assert_allclose(SequencePooling("mean")(x, real), [[2.0, 2.0]])
    np.testing.assert_allclose(
        SequencePooling("mean", True)(x, real), [[0.5**0.5, 0.5**0.5]], rtol=1e-6
    )
    np.testing.assert_allclose(SequencePooling("max")(x, real), [[3.0, 4.0]])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"mode must be one of .*Received: mode='sum'"):
        SequencePooling("sum")
    with pytest.raises(TypeError, match=r"normalize must be a bool\. Received: 1"):
        SequencePooling("mean", 1)
