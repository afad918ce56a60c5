import keras
import numpy as np
import pytest

from tests.testing import run_layer_test
from tfformer.layers import ConvolutionalTokenizer


def numpy_convolution(x, kernel):
    """3x3 convolution, stride 1, one pixel of zero padding, no bias."""
    height, width, _ = x.shape
    padded = np.pad(x, ((1, 1), (1, 1), (0, 0)))
    out = np.zeros((height, width, kernel.shape[-1]))
    for i in range(height):
        for j in range(width):
            out[i, j] = np.einsum("abc,abco->o", padded[i : i + 3, j : j + 3], kernel)
    return out


def numpy_max_pool(x):
    """PyTorch's MaxPool2d(3, stride=2, padding=1): -inf padding."""
    height, width, channels = x.shape
    padded = np.full((height + 2, width + 2, channels), -np.inf)
    padded[1:-1, 1:-1] = x
    rows, cols = (height - 1) // 2 + 1, (width - 1) // 2 + 1
    out = np.zeros((rows, cols, channels))
    for i in range(rows):
        for j in range(cols):
            out[i, j] = padded[2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max((0, 1))
    return out


def test_tokens_are_cct_convolutions_pools_and_positions():
    layer = ConvolutionalTokenizer(hidden_dim=5, num_layers=2, channels=4)
    images = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    out = np.asarray(layer(images))
    assert out.shape == (2, 2 * 3, 5)
    n = keras.ops.convert_to_numpy
    positions = n(layer.position_embeddings)[0]
    assert [n(c.kernel).shape for c in layer.convolutions] == [
        (3, 3, 3, 4),
        (3, 3, 4, 5),
    ]
    for b in range(2):
        x = images[b].astype("float64")
        for convolution in layer.convolutions:
            x = np.maximum(numpy_convolution(x, n(convolution.kernel)), 0)
            x = numpy_max_pool(x)
        # Row-major over the 2 x 3 grid.
        np.testing.assert_allclose(out[b], x.reshape(6, 5) + positions, atol=1e-4)


def test_layer_contract(tmp_path):
    run_layer_test(
        ConvolutionalTokenizer,
        dict(hidden_dim=8, num_layers=1, channels=4),
        {
            "inputs": np.random.default_rng(1)
            .normal(size=(2, 8, 8, 3))
            .astype("float32")
        },
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible by 2 \\*\\* num_layers = 4"):
        ConvolutionalTokenizer(8, 2)(np.zeros((1, 6, 8, 3), "float32"))
    with pytest.raises(ValueError, match="expects images"):
        ConvolutionalTokenizer(8)(np.zeros((1, 8, 3), "float32"))
    with pytest.raises(ValueError, match="num_layers must be a positive int"):
        ConvolutionalTokenizer(8, 0)
