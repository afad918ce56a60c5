import numpy as np
import pytest

from tests.testing import FIT_STEP, run_model_test
from tfformer.models import vit

SMALL = dict(
    patch_size=4, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32
)
IMAGES = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")


@FIT_STEP
def test_model_contract(tmp_path, jit_compile):
    model = run_model_test(
        # One layer: a second adds nothing the contract checks, and doubles
        # the XLA compile of its fit step.
        lambda: vit((8, 12), 5, **{**SMALL, "num_layers": 1}),
        IMAGES,
        np.array([1, 4]),
        tmp_path,
        jit_compile=jit_compile,
    )
    assert model.backbone.patch_embedding.num_patches == 2 * 3


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


def test_pixel_normalization_in_front():
    mean, std = [100.0, 110.0, 120.0], [50.0, 60.0, 70.0]
    raw = vit((8, 12), 5, **SMALL, pixel_mean=mean, pixel_std=std)
    plain = vit((8, 12), 5, **SMALL)
    plain.set_weights(raw.get_weights())
    pixels = np.random.default_rng(1).uniform(0, 255, (2, 8, 12, 3)).astype("float32")
    np.testing.assert_allclose(
        raw(pixels), plain((pixels - np.array(mean)) / np.array(std)), atol=1e-4
    )
    with pytest.raises(ValueError, match="Give both pixel_mean and pixel_std"):
        vit(8, 3, **SMALL, pixel_mean=mean)
    with pytest.raises(ValueError, match="one value per channel"):
        vit(8, 3, **SMALL, pixel_mean=[1.0], pixel_std=[2.0])
    with pytest.raises(ValueError, match="pixel_std must be positive"):
        vit(8, 3, **SMALL, pixel_mean=mean, pixel_std=[1.0, 0.0, 1.0])
