import keras
import numpy as np
import pytest

from tests.testing import run_layer_test
from tfformer.layers import PatchEmbedding


def test_patches_are_linear_projections_plus_class_token_and_positions():
    layer = PatchEmbedding(patch_size=2, hidden_dim=5)
    images = np.random.default_rng(0).normal(size=(1, 4, 6, 3)).astype("float32")
    out = np.asarray(layer(images))
    assert out.shape == (1, 1 + 2 * 3, 5)
    n = keras.ops.convert_to_numpy
    kernel = n(layer.projection.kernel).reshape(-1, 5)  # (2*2*3, 5)
    bias, positions = n(layer.projection.bias), n(layer.position_embeddings)[0]
    # Patch (row 1, col 2) covers pixels [2:4, 4:6]; it is token 1 + 1*3 + 2.
    patch = images[0, 2:4, 4:6, :].reshape(-1)
    np.testing.assert_allclose(
        out[0, 6], patch @ kernel + bias + positions[6], atol=1e-5
    )
    np.testing.assert_allclose(out[0, 0], n(layer.class_token)[0, 0] + positions[0])


def test_layer_contract(tmp_path):
    run_layer_test(
        PatchEmbedding,
        dict(patch_size=4, hidden_dim=8),
        {
            "inputs": np.random.default_rng(1)
            .normal(size=(2, 8, 8, 3))
            .astype("float32")
        },
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible by patch_size=4"):
        PatchEmbedding(4, 8)(np.zeros((1, 6, 8, 3), "float32"))
    with pytest.raises(ValueError, match="expects images"):
        PatchEmbedding(4, 8)(np.zeros((1, 8, 3), "float32"))
    with pytest.raises(ValueError, match="patch_size must be a positive int"):
        PatchEmbedding(0, 8)
