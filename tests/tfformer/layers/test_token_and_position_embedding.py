import math

import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import run_layer_test
from tfformer.layers import TokenAndPositionEmbedding
from tfformer.layers.padding import keras_mask

IDS = np.array([[4, 9, 1, 0], [7, 7, 2, 3]], "int32")


def test_scaled_token_embedding_plus_sinusoid():
    layer = TokenAndPositionEmbedding(12, 6)
    out = np.asarray(layer(IDS))
    table = keras.ops.convert_to_numpy(layer.token_embeddings)
    want = table[IDS] * math.sqrt(6) + ref.sinusoidal_table(4, 6)[None]
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_learned_positions_without_scaling_and_with_offset():
    layer = TokenAndPositionEmbedding(
        12, 6, sequence_length=8, position="learned", scale_embeddings=False
    )
    out = np.asarray(layer(IDS[:, :2], start_index=3))
    tokens = keras.ops.convert_to_numpy(layer.token_embeddings)
    positions = keras.ops.convert_to_numpy(layer.position_embedding.position_embeddings)
    np.testing.assert_allclose(
        out, tokens[IDS[:, :2]] + positions[3:5][None], atol=1e-6
    )


def test_tied_reverse_uses_the_embedding_matrix():
    layer = TokenAndPositionEmbedding(12, 6, position="none")
    hidden = np.random.default_rng(0).normal(size=(2, 3, 6)).astype("float32")
    logits = np.asarray(layer(hidden, reverse=True))
    table = keras.ops.convert_to_numpy(layer.token_embeddings)
    np.testing.assert_allclose(logits, hidden @ table.T, atol=1e-5)
    assert len(layer.weights) == 1


def test_untied_reverse_has_its_own_matrix():
    layer = TokenAndPositionEmbedding(12, 6, tie_weights=False)
    layer(IDS)
    hidden = np.ones((1, 1, 6), "float32")
    own = keras.ops.convert_to_numpy(layer.reverse_embeddings)
    np.testing.assert_allclose(layer(hidden, reverse=True)[0, 0], own.sum(0), atol=1e-5)


@pytest.mark.parametrize("tie", [True, False])
def test_padding_logit_replaces_id_zeros_column(tie):
    layer = TokenAndPositionEmbedding(
        12, 6, position="none", tie_weights=tie, padding_logit=-1e4
    )
    layer(IDS)
    hidden = np.random.default_rng(1).normal(size=(2, 3, 6)).astype("float32")
    matrix = keras.ops.convert_to_numpy(
        layer.token_embeddings if tie else keras.ops.transpose(layer.reverse_embeddings)
    )
    want = hidden @ matrix.T
    want[..., 0] = -1e4
    np.testing.assert_allclose(layer(hidden, reverse=True), want, atol=1e-5)
    # Saved and loaded with its setting (run_layer_test compares outputs).
    assert TokenAndPositionEmbedding.from_config(layer.get_config()).padding_logit == (
        -1e4
    )


def test_mask_zero_attaches_the_padding_mask():
    layer = TokenAndPositionEmbedding(12, 6, mask_zero=True)
    mask = keras_mask(layer(IDS))
    np.testing.assert_array_equal(mask, IDS != 0)


def test_layer_contract(tmp_path):
    run_layer_test(
        TokenAndPositionEmbedding,
        dict(
            vocabulary_size=12, embedding_dim=8, sequence_length=6, position="learned"
        ),
        {"inputs": IDS},
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="position must be one of"):
        TokenAndPositionEmbedding(10, 4, position="relative")
    with pytest.raises(ValueError, match="needs sequence_length"):
        TokenAndPositionEmbedding(10, 4, position="learned")
    with pytest.raises(ValueError, match="vocabulary_size must be a positive int"):
        TokenAndPositionEmbedding(0, 4)
    for bad in (float("-inf"), "low", True):
        with pytest.raises(ValueError, match="padding_logit must be None or a finite"):
            TokenAndPositionEmbedding(10, 4, padding_logit=bad)
    layer = TokenAndPositionEmbedding(10, 4)
    with pytest.raises(TypeError, match="expects integer token ids"):
        layer(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        layer(np.zeros((1, 3, 2), "int32"))
    with pytest.raises(ValueError, match="hidden states with last axis 4"):
        layer(np.zeros((1, 3, 5), "float32"), reverse=True)
    learned = TokenAndPositionEmbedding(10, 4, sequence_length=3, position="learned")
    with pytest.raises(ValueError, match="longer than the position table"):
        learned(np.ones((1, 4), "int32"))
