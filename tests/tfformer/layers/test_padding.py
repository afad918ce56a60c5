"""keras_mask and resolve_padding_mask: the one place Keras masks are read."""

import keras
import numpy as np
import pytest

from tfformer.layers import MultiHeadAttention, TransformerEncoderBlock, padding

TOKENS = np.array([[3, 4, 0], [5, 0, 0]], "int32")


def test_keras_mask_reads_the_embedding_mask():
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(TOKENS)
    np.testing.assert_array_equal(padding.keras_mask(embedded), TOKENS != 0)
    plain = keras.ops.convert_to_tensor(np.asarray(embedded))
    assert padding.keras_mask(plain) is None


def test_explicit_padding_mask_wins_over_the_keras_mask():
    embedded = keras.layers.Embedding(10, 4, mask_zero=True)(TOKENS)
    explicit = np.ones_like(TOKENS, bool)
    resolved = padding.resolve_padding_mask(embedded, explicit, "padding_mask")
    np.testing.assert_array_equal(resolved, explicit)
    resolved = padding.resolve_padding_mask(embedded, None, "padding_mask")
    np.testing.assert_array_equal(resolved, TOKENS != 0)


@pytest.mark.parametrize(
    "layer",
    [
        MultiHeadAttention(num_heads=2, key_dim=2),
        TransformerEncoderBlock(num_heads=2, intermediate_dim=8),
    ],
    ids=["attention", "encoder_block"],
)
def test_a_missing_keras_reader_fails_loudly_with_the_version(layer, monkeypatch):
    """If a Keras release drops the private reader, layers must not run on
    with padding silently ignored."""
    monkeypatch.setattr(padding, "_get_keras_mask", None)
    x = np.zeros((2, 3, 4), "float32")
    with pytest.raises(RuntimeError, match=f"Keras {keras.version()} does not"):
        layer(x)
