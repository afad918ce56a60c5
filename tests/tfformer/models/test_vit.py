import numpy as np
import pytest

from tests.testing import run_model_test
from tfformer.models import vit

SMALL = dict(
    patch_size=4, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32
)
IMAGES = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")


def test_model_contract(tmp_path):
    model = run_model_test(
        lambda: vit((8, 12), 5, **SMALL), IMAGES, np.array([1, 4]), tmp_path
    )
    assert model.get_layer("patch_embedding").num_patches == 2 * 3


def test_positions_make_patch_order_matter():
    model = vit((8, 12), 5, **SMALL)
    swapped = IMAGES.copy()
    swapped[:, :4, :4], swapped[:, 4:, 8:] = IMAGES[:, 4:, 8:], IMAGES[:, :4, :4]
    assert not np.allclose(model(swapped), model(IMAGES), atol=1e-4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="divisible by patch_size=5"):
        vit(8, 3, **{**SMALL, "patch_size": 5})
    with pytest.raises(ValueError, match="num_classes must be a positive int"):
        vit(8, 0, **SMALL)
