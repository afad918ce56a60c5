import keras
import numpy as np
import pytest

from tests.testing import FIT_STEP, run_model_test
from tfformer.models import from_preset, vit

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


CCT = dict(
    tokenizer="convolution",
    tokenizer_layers=2,
    tokenizer_channels=4,
    num_layers=1,
    hidden_dim=16,
    num_heads=2,
    intermediate_dim=16,
)


@FIT_STEP
def test_cct_model_contract(tmp_path, jit_compile):
    model = run_model_test(
        lambda: vit((8, 12), 5, **CCT),
        IMAGES,
        np.array([1, 4]),
        tmp_path,
        jit_compile=jit_compile,
    )
    backbone = model.backbone
    assert backbone.patch_embedding is None and not backbone.class_token
    assert backbone.token_stride == 4 and model.pooling == "attention"


def test_cct_logits_are_the_head_on_attention_pooled_tokens():
    """The classifier's logits from its own pieces: backbone tokens (no class
    token), softmax-weighted by the pooling's score, then the head."""
    model = vit((8, 12), 5, **CCT)
    tokens = np.asarray(model.backbone(IMAGES))
    assert tokens.shape == (2, 6, 16)
    n = keras.ops.convert_to_numpy
    score = model.pooling_layer.score
    scores = tokens @ n(score.kernel)[:, 0] + n(score.bias)[0]
    w = np.exp(scores - scores.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    pooled = np.einsum("bt,btd->bd", w, tokens)
    want = pooled @ n(model.head.kernel) + n(model.head.bias)
    np.testing.assert_allclose(np.asarray(model(IMAGES)), want, atol=1e-4)


def test_vit_with_attention_pooling_skips_the_class_token():
    model = vit((8, 12), 5, pooling="attention", **SMALL)
    tokens = np.asarray(model.backbone(IMAGES))[:, 1:]
    pooled = np.asarray(model.pooling_layer(tokens))
    n = keras.ops.convert_to_numpy
    want = pooled @ n(model.head.kernel) + n(model.head.bias)
    np.testing.assert_allclose(np.asarray(model(IMAGES)), want, atol=1e-4)


def test_cct_preset_size():
    """CCT-4/3x2 counted by hand: convolutions 3*3*3*64 and 3*3*64*128 (no
    bias), 64 positions, 4 blocks (attention 4(d^2 + d), MLP 2 d^2 + 2 d at
    ratio 1, two LayerNorms), the final LayerNorm, the pooling score
    (d + 1) and a 10-class head; the paper gives 0.48 M."""
    model = from_preset("cct_4_3x2", image_size=32, num_classes=10)
    d = 128
    block = 4 * (d * d + d) + 2 * d * d + 2 * d + 4 * d
    want = 27 * 64 + 9 * 64 * d + 64 * d + 4 * block + 2 * d + (d + 1) + 10 * d + 10
    assert model.count_params() == want
    assert round(want / 1e6, 2) == 0.48


def test_bad_tokenizer_arguments():
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        vit(8, 3, **{**CCT, "tokenizer": "conv"})
    with pytest.raises(ValueError, match="patch_size applies to tokenizer='patch'"):
        vit(8, 3, patch_size=4, **CCT)
    with pytest.raises(ValueError, match="divisible by 2 \\*\\* num_layers = 4"):
        vit(6, 3, **CCT)
    with pytest.raises(ValueError, match="pooling='class_token' needs a backbone"):
        vit(8, 3, pooling="class_token", **CCT)
    with pytest.raises(ValueError, match="pooling must be one of"):
        vit(8, 3, pooling="mean", **SMALL)
