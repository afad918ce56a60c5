"""tfformer against keras-hub, the peer implementation, with the same weights."""

import keras
import numpy as np
import pytest

from tfformer.layers import (
    MultiHeadAttention,
    RotaryEmbedding,
    SinusoidalPositionEncoding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

keras_hub = pytest.importorskip("keras_hub")
RNG = np.random.default_rng(17)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def _copy_attention(ours, keras_mha):
    ours.set_weights(MultiHeadAttention.from_keras(keras_mha).get_weights())


def _copy_common(ours, theirs):
    """Self-attention, FFN and their norms: the sublayers both blocks share."""
    _copy_attention(ours.self_attention, theirs._self_attention_layer)
    ours.self_attention_norm.set_weights(
        theirs._self_attention_layer_norm.get_weights()
    )
    ours.ffn.intermediate_dense.set_weights(
        theirs._feedforward_intermediate_dense.get_weights()
    )
    ours.ffn.output_dense.set_weights(theirs._feedforward_output_dense.get_weights())
    ours.ffn_norm.set_weights(theirs._feedforward_layer_norm.get_weights())


def test_sinusoidal_encoding_matches_keras_hub():
    x = np.zeros((2, 9, 12), "float32")
    theirs = keras_hub.layers.SinePositionEncoding()(x)
    np.testing.assert_allclose(SinusoidalPositionEncoding()(x), theirs, atol=1e-5)


def test_rotary_embedding_matches_keras_hub():
    x = _normal(2, 7, 3, 8)
    theirs = keras_hub.layers.RotaryEmbedding(max_wavelength=500)(x, start_index=3)
    ours = RotaryEmbedding(max_wavelength=500)(x, start_index=3)
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_llama3_frequency_scaling_matches_keras_hubs_llama_rotary_embedding():
    """Heads of 16 features at base 500: of the 8 frequencies, 3 are kept,
    2 blended and 3 divided by the factor; positions 40 to 79."""
    from keras_hub.src.models.llama.llama_rotary_embedding import (
        LlamaRotaryEmbedding,
    )

    x = _normal(2, 40, 3, 16)
    theirs = LlamaRotaryEmbedding(
        max_wavelength=500,
        frequency_adjustment_factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        pretraining_sequence_length=256,
    )(x, start_index=40)
    scaling = {
        "rope_type": "llama3",
        "factor": 8,
        "low_freq_factor": 1,
        "high_freq_factor": 4,
        "original_max_position_embeddings": 256,
    }
    ours = RotaryEmbedding(max_wavelength=500, frequency_scaling=scaling)
    # Angles reach 80 radians, where float32 steps by 8e-6: the two layers
    # round them differently (1.2e-5 seen).
    np.testing.assert_allclose(ours(x, start_index=40), theirs, atol=5e-5)
    plain = RotaryEmbedding(max_wavelength=500)(x, start_index=40)
    assert np.abs(np.asarray(plain) - np.asarray(theirs)).max() > 0.1


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_block_matches_keras_hub(normalize_first):
    kwargs = dict(intermediate_dim=32, num_heads=4, layer_norm_epsilon=1e-5)
    theirs = keras_hub.layers.TransformerEncoder(
        normalize_first=normalize_first, **kwargs
    )
    ours = TransformerEncoderBlock(normalize_first=normalize_first, **kwargs)
    x = _normal(2, 6, 16)
    padding = np.array([[True] * 6, [True] * 4 + [False] * 2])
    want = np.asarray(theirs(x, padding_mask=padding))
    ours(x)
    _copy_common(ours, theirs)
    got = np.asarray(ours(x, padding_mask=padding))
    np.testing.assert_allclose(got[padding], want[padding], atol=1e-5)


def test_decoder_block_matches_keras_hub():
    kwargs = dict(intermediate_dim=32, num_heads=4, layer_norm_epsilon=1e-5)
    theirs = keras_hub.layers.TransformerDecoder(**kwargs)
    ours = TransformerDecoderBlock(**kwargs)
    x, memory = _normal(2, 5, 16), _normal(2, 7, 16)
    memory_padding = np.array([[True] * 7, [True] * 3 + [False] * 4])
    want = theirs(x, memory, encoder_padding_mask=memory_padding)
    ours(x, memory)
    _copy_common(ours, theirs)
    _copy_attention(ours.cross_attention, theirs._cross_attention_layer)
    ours.cross_attention_norm.set_weights(
        theirs._cross_attention_layer_norm.get_weights()
    )
    got = ours(x, memory, encoder_padding_mask=memory_padding)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert isinstance(theirs._cross_attention_layer, keras.layers.MultiHeadAttention)
