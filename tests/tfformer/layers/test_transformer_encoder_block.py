"""TransformerEncoderBlock against the paper's add & norm equations in NumPy."""

import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import (
    ffn_weights,
    norm_weights,
    reference_attention,
    run_layer_test,
)
from tfformer.layers import TransformerEncoderBlock
from tfformer.layers.padding import keras_mask

RNG = np.random.default_rng(11)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def reference_encoder_block(block, x, padding):
    """x' = LN(x + MHA(x)); out = LN(x' + FFN(x')), or the pre-norm variant."""
    masks = padding[:, :, None] & padding[:, None, :]
    act = ref.relu if block.activation.__name__ == "relu" else ref.gelu

    def ln(norm, h):
        return ref.layer_norm(h, *norm_weights(norm))

    def ffn(h):
        return ref.feed_forward(h, *ffn_weights(block.ffn), act)

    if block.normalize_first:
        h = ln(block.self_attention_norm, x)
        x = x + reference_attention(block.self_attention, h, h, masks)[0]
        return x + ffn(ln(block.ffn_norm, x))
    x = ln(
        block.self_attention_norm,
        x + reference_attention(block.self_attention, x, x, masks)[0],
    )
    return ln(block.ffn_norm, x + ffn(x))


@pytest.mark.parametrize(
    "normalize_first", [False, True], ids=["post_norm", "pre_norm"]
)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_matches_numpy_reference(normalize_first, activation):
    block = TransformerEncoderBlock(
        num_heads=2,
        intermediate_dim=32,
        normalize_first=normalize_first,
        activation=activation,
        bias_initializer="random_normal",
    )
    x = _normal(2, 6, 16)
    padding = np.ones((2, 6), bool)
    padding[1, 4:] = False
    out = np.asarray(block(x, padding_mask=padding))
    want = reference_encoder_block(block, x, padding)
    np.testing.assert_allclose(out[padding], want[padding], atol=1e-4)


def test_padding_invariance():
    block = TransformerEncoderBlock(num_heads=2, intermediate_dim=32)
    x = _normal(1, 5, 16)
    short = np.asarray(block(x))
    padded = np.concatenate([x, _normal(1, 3, 16)], axis=1)
    mask = np.array([[True] * 5 + [False] * 3])
    np.testing.assert_allclose(
        block(padded, padding_mask=mask)[:, :5], short, atol=1e-5
    )


def test_keras_mask_equals_explicit_padding_mask():
    embedding = keras.layers.Embedding(20, 16, mask_zero=True)
    block = TransformerEncoderBlock(num_heads=4, intermediate_dim=32)
    tokens = np.array([[3, 4, 0, 0], [5, 6, 7, 8]], "int32")
    embedded = embedding(tokens)
    with_keras_mask = block(embedded)
    plain = keras.ops.convert_to_tensor(np.asarray(embedded))
    np.testing.assert_array_equal(
        with_keras_mask, block(plain, padding_mask=tokens != 0)
    )
    assert keras_mask(with_keras_mask) is not None  # passed on


def test_attention_mask_is_applied():
    block = TransformerEncoderBlock(num_heads=2, intermediate_dim=16)
    x = _normal(1, 4, 8)
    only_self = np.eye(4, dtype=bool)[None]
    out = np.asarray(block(x, attention_mask=only_self))
    # With attention to itself only, changing token 3 leaves tokens 0..2 alone.
    changed = x.copy()
    changed[0, 3] += 3.0
    np.testing.assert_allclose(
        block(changed, attention_mask=only_self)[0, :3], out[0, :3], atol=1e-6
    )


def test_dropout_reaches_every_sublayer_in_training():
    block = TransformerEncoderBlock(num_heads=2, intermediate_dim=16, dropout=0.3)
    x = _normal(2, 4, 8)
    np.testing.assert_array_equal(block(x), block(x, training=False))
    assert not np.allclose(block(x, training=True), block(x))
    assert block.self_attention.dropout == 0.3 and block.ffn.dropout == 0.3


def test_activation_dropout_is_the_feed_forward_hidden_rate():
    """None follows `dropout` (the hidden activations drop with the sublayer
    outputs); a number sets the FFN's hidden rate alone, and survives the
    config."""
    x = _normal(2, 4, 8)
    sizes = dict(num_heads=2, intermediate_dim=16, attention_dropout=0.0)
    only_hidden = TransformerEncoderBlock(**sizes, dropout=0.0, activation_dropout=0.5)
    assert not np.allclose(only_hidden(x, training=True), only_hidden(x))
    assert only_hidden.ffn.dropout == 0.5 and only_hidden.self_attention.dropout == 0
    # Sublayer dropout only: the hidden rate is 0, the block still drops.
    no_hidden = TransformerEncoderBlock(**sizes, dropout=0.3, activation_dropout=0.0)
    assert not np.allclose(no_hidden(x, training=True), no_hidden(x))
    assert no_hidden.ffn.dropout == 0.0
    clone = TransformerEncoderBlock.from_config(no_hidden.get_config())
    clone(x)
    assert clone.ffn.dropout == 0.0 and clone.dropout == 0.3
    none = TransformerEncoderBlock(**sizes, dropout=0.0, activation_dropout=0.0)
    np.testing.assert_array_equal(none(x, training=True), none(x))
    follows = TransformerEncoderBlock(**sizes, dropout=0.2)
    follows(x)
    assert follows.ffn.dropout == 0.2


def test_layer_contract(tmp_path):
    run_layer_test(
        TransformerEncoderBlock,
        dict(
            num_heads=2,
            intermediate_dim=16,
            dropout=0.1,
            activation_dropout=0.0,
            num_key_value_heads=1,
        ),
        {"inputs": _normal(2, 5, 8)},
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="hidden_dim must be divisible by num_heads"):
        TransformerEncoderBlock(num_heads=3, intermediate_dim=8)(_normal(1, 2, 8))
    with pytest.raises(ValueError, match="inputs must have shape"):
        TransformerEncoderBlock(num_heads=2, intermediate_dim=8)(_normal(2, 8))
    with pytest.raises(ValueError, match="padding_mask must cover every position"):
        TransformerEncoderBlock(num_heads=2, intermediate_dim=8)(
            _normal(1, 4, 8), padding_mask=np.ones((1, 3), bool)
        )
    with pytest.raises(ValueError, match=r"activation_dropout must be in \[0, 1\)"):
        TransformerEncoderBlock(num_heads=2, intermediate_dim=8, activation_dropout=1)
    with pytest.raises(ValueError, match="layer_norm_epsilon must be a positive"):
        TransformerEncoderBlock(num_heads=2, intermediate_dim=8, layer_norm_epsilon=0)
    # key_dim makes any hidden size work.
    out = TransformerEncoderBlock(num_heads=3, intermediate_dim=8, key_dim=4)(
        _normal(1, 2, 8)
    )
    assert out.shape == (1, 2, 8)
