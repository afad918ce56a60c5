"""TransformerDecoderBlock: NumPy reference, causality, caches."""

import keras
import numpy as np
import pytest
from keras import ops

from tests import numpy_reference as ref
from tests.testing import ffn_weights, norm_weights, reference_attention, run_layer_test
from tfformer.layers import TransformerDecoderBlock
from tfformer.layers.padding import keras_mask

RNG = np.random.default_rng(13)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


def reference_decoder_block(block, x, memory, memory_padding):
    """Post-norm: masked self-attention, cross-attention, FFN (section 3.1)."""
    t, s = x.shape[1], memory.shape[1]
    self_masks = np.broadcast_to(ref.causal(t), (x.shape[0], t, t))
    cross_masks = np.broadcast_to(memory_padding[:, None, :], (x.shape[0], t, s))

    def ln(norm, h):
        return ref.layer_norm(h, *norm_weights(norm))

    x = ln(
        block.self_attention_norm,
        x + reference_attention(block.self_attention, x, x, self_masks)[0],
    )
    x = ln(
        block.cross_attention_norm,
        x + reference_attention(block.cross_attention, x, memory, cross_masks)[0],
    )
    return ln(block.ffn_norm, x + ref.feed_forward(x, *ffn_weights(block.ffn)))


def test_matches_numpy_reference():
    block = TransformerDecoderBlock(
        num_heads=2, intermediate_dim=32, bias_initializer="random_normal"
    )
    x, memory = _normal(2, 5, 16), _normal(2, 7, 16)
    memory_padding = np.ones((2, 7), bool)
    memory_padding[0, 4:] = False
    out = block(x, memory, encoder_padding_mask=memory_padding)
    np.testing.assert_allclose(
        out, reference_decoder_block(block, x, memory, memory_padding), atol=1e-4
    )


@pytest.mark.parametrize("with_encoder", [True, False], ids=["seq2seq", "decoder_only"])
def test_no_causal_leakage(with_encoder):
    block = TransformerDecoderBlock(
        num_heads=2, intermediate_dim=16, normalize_first=True
    )
    x, memory = _normal(1, 6, 8), _normal(1, 4, 8)
    args = (memory,) if with_encoder else ()
    base = np.asarray(block(x, *args))
    for t in range(6):
        changed = x.copy()
        changed[0, t] -= 4.0
        out = np.asarray(block(changed, *args))
        np.testing.assert_allclose(out[0, :t], base[0, :t], atol=1e-6)
        assert not np.allclose(out[0, t], base[0, t])


def test_encoder_padding_invariance():
    block = TransformerDecoderBlock(num_heads=2, intermediate_dim=16)
    x, memory = _normal(1, 3, 8), _normal(1, 4, 8)
    short = block(x, memory)
    padded = np.concatenate([memory, _normal(1, 2, 8)], axis=1)
    mask = np.array([[True] * 4 + [False] * 2])
    np.testing.assert_allclose(
        block(x, padded, encoder_padding_mask=mask), short, atol=1e-5
    )


def test_keras_masks_equal_explicit_padding_masks():
    embedding = keras.layers.Embedding(20, 16, mask_zero=True)
    block = TransformerDecoderBlock(num_heads=4, intermediate_dim=32)
    decoder_tokens = np.array([[3, 4, 0, 0], [5, 6, 7, 8]], "int32")
    encoder_tokens = np.array([[9, 0, 0, 0, 0], [1, 2, 3, 4, 0]], "int32")
    decoder, encoder = embedding(decoder_tokens), embedding(encoder_tokens)
    with_keras_masks = block(decoder, encoder)

    def plain(x):  # the same values, no Keras mask attached
        return ops.convert_to_tensor(np.asarray(x))

    decoder_mask, encoder_mask = decoder_tokens != 0, encoder_tokens != 0
    explicit = block(
        plain(decoder),
        plain(encoder),
        decoder_padding_mask=decoder_mask,
        encoder_padding_mask=encoder_mask,
    )
    np.testing.assert_array_equal(with_keras_masks, explicit)
    np.testing.assert_array_equal(keras_mask(with_keras_masks), decoder_mask)
    # Each mask matters here: dropping either one changes the outputs.
    without_decoder_mask = block(
        plain(decoder), plain(encoder), encoder_padding_mask=encoder_mask
    )
    without_encoder_mask = block(
        plain(decoder), plain(encoder), decoder_padding_mask=decoder_mask
    )
    assert not np.allclose(without_decoder_mask, explicit, atol=1e-4)
    assert not np.allclose(without_encoder_mask, explicit, atol=1e-4)


@pytest.mark.parametrize("with_encoder", [True, False], ids=["seq2seq", "decoder_only"])
def test_cached_steps_equal_full_pass(with_encoder):
    block = TransformerDecoderBlock(
        num_heads=4, intermediate_dim=16, num_key_value_heads=2, normalize_first=True
    )
    x, memory = _normal(2, 6, 16), _normal(2, 5, 16)
    memory_padding = np.array([[True] * 5, [True] * 3 + [False] * 2])
    args = (memory,) if with_encoder else ()
    kwargs = {"encoder_padding_mask": memory_padding} if with_encoder else {}
    full = np.asarray(block(x, *args, **kwargs))

    cache, cross, steps = block.init_cache(2, 8), None, []
    for i in range(6):
        outputs = block(
            x[:, i : i + 1],
            *args,
            self_attention_cache=cache,
            self_attention_cache_update_index=i,
            cross_attention_cache=cross,
            **kwargs,
        )
        if with_encoder:
            out, cache, cross = outputs
            assert cross.shape == (2, 2, 2, 5, 4)  # computed once, then reused
        else:
            out, cache = outputs
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_a_cross_attention_cache_alone_equals_the_encoder_sequence():
    """Given the encoder's keys and values as a cache and no self-attention
    cache, the block attends to them (it used to attend to itself)."""
    block = TransformerDecoderBlock(num_heads=2, intermediate_dim=16)
    x, memory = _normal(2, 4, 8), _normal(2, 5, 8)
    direct = np.asarray(block(x, memory))
    cache = block.cross_attention.compute_key_value_cache(memory)
    np.testing.assert_allclose(block(x, cross_attention_cache=cache), direct, atol=1e-5)


def test_layer_contract_with_cross_attention(tmp_path):
    mask = np.ones((2, 6), bool)
    mask[1, 2:] = False
    run_layer_test(
        TransformerDecoderBlock,
        dict(num_heads=2, intermediate_dim=16, dropout=0.1),
        {
            "decoder_sequence": _normal(2, 4, 8),
            "encoder_sequence": _normal(2, 6, 8),
            "encoder_padding_mask": mask,
        },
        tmp_path,
    )


def test_layer_contract_decoder_only(tmp_path):
    run_layer_test(
        TransformerDecoderBlock,
        dict(
            num_heads=2, intermediate_dim=16, fused_qkv=True, rotary_max_wavelength=100
        ),
        {"decoder_sequence": _normal(2, 4, 8)},
        tmp_path,
    )


def test_bad_arguments():
    block = TransformerDecoderBlock(num_heads=2, intermediate_dim=8)
    x = _normal(1, 3, 8)
    block(x)  # built without cross-attention
    with pytest.raises(ValueError, match="built without cross-attention"):
        block(x, _normal(1, 2, 8))
    with pytest.raises(ValueError, match="needs self_attention_cache_update_index"):
        block(x, self_attention_cache=block.init_cache(1, 4))
    seq2seq = TransformerDecoderBlock(num_heads=2, intermediate_dim=8)
    seq2seq(x, _normal(1, 2, 8))
    with pytest.raises(ValueError, match="needs encoder_sequence"):
        seq2seq(x)
    with pytest.raises(ValueError, match="decoder_padding_mask must cover"):
        seq2seq(x, _normal(1, 2, 8), decoder_padding_mask=np.ones((1, 2), bool))


def test_return_attention_scores_gives_the_weights_without_changing_outputs():
    block = TransformerDecoderBlock(num_heads=2, intermediate_dim=16, dropout=0.0)
    rng = np.random.default_rng(0)
    decoder = rng.normal(size=(2, 4, 8)).astype("float32")
    encoder = rng.normal(size=(2, 5, 8)).astype("float32")
    encoder_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    plain = block(decoder, encoder, encoder_padding_mask=encoder_mask)
    out, scores = block(
        decoder,
        encoder,
        encoder_padding_mask=encoder_mask,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), ops.convert_to_numpy(plain), atol=1e-6
    )
    self_scores = ops.convert_to_numpy(scores["self_attention"])
    cross = ops.convert_to_numpy(scores["cross_attention"])
    assert self_scores.shape == (2, 2, 4, 4) and cross.shape == (2, 2, 4, 5)
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)
    # Causal: no weight on later target positions; none on padded sources.
    assert np.all(np.triu(self_scores[0, 0], k=1) == 0)
    assert np.all(cross[1, :, :, 3:] == 0)
    with pytest.raises(ValueError, match="without caches only"):
        block(
            decoder[:, :1],
            encoder,
            self_attention_cache=block.init_cache(2, 4),
            self_attention_cache_update_index=0,
            return_attention_scores=True,
        )


def llama_block(**kwargs):
    return TransformerDecoderBlock(
        num_heads=4,
        intermediate_dim=24,
        num_key_value_heads=2,
        activation="silu",
        layer_norm_epsilon=1e-5,
        normalize_first=True,
        rotary_max_wavelength=500,
        normalization="rms",
        gated_ffn=True,
        use_bias=False,
        **kwargs,
    )


def reference_llama_block(block, x):
    """Llama's decoder layer in NumPy: pre-RMSNorm, grouped-query causal
    attention with rotate-half RoPE on queries and keys, SwiGLU, no biases."""
    n = np.asarray
    att, ffn = block.self_attention, block.ffn
    heads, kv, d = 4, 2, x.shape[-1] // 4
    out = []
    for seq in x:
        t = seq.shape[0]
        h = ref.rms_norm(seq, n(block.self_attention_norm.gamma), 1e-5)
        q, k, v = (h @ n(att.query_dense.kernel), h @ n(att.key_dense.kernel),
                   h @ n(att.value_dense.kernel))  # fmt: skip
        mixed = []
        for i in range(heads):
            g = i // (heads // kv)
            qi = ref.rotary(q[:, i * d : (i + 1) * d], max_wavelength=500.0)
            kg = ref.rotary(k[:, g * d : (g + 1) * d], max_wavelength=500.0)
            mixed.append(
                ref.attention(qi, kg, v[:, g * d : (g + 1) * d], ref.causal(t))[0]
            )
        seq = seq + np.concatenate(mixed, -1) @ n(att.output_dense.kernel)
        h = ref.rms_norm(seq, n(block.ffn_norm.gamma), 1e-5)
        seq = seq + ref.swiglu(
            h,
            n(ffn.gate_dense.kernel),
            n(ffn.intermediate_dense.kernel),
            n(ffn.output_dense.kernel),
        )
        out.append(seq)
    return np.stack(out)


def test_llama_style_block_matches_numpy():
    block = llama_block()
    x = _normal(2, 6, 16)
    out = block(x)
    assert not [w for w in block.weights if w.name == "bias"]
    np.testing.assert_allclose(out, reference_llama_block(block, x), atol=1e-4)
    # Cached one-token steps give the same outputs.
    cache, steps = block.init_cache(2, 8), []
    for i in range(6):
        step, cache = block(
            x[:, i : i + 1],
            self_attention_cache=cache,
            self_attention_cache_update_index=i,
        )
        steps.append(np.asarray(step))
    np.testing.assert_allclose(np.concatenate(steps, 1), out, atol=1e-5)


def test_llama_style_layer_contract(tmp_path):
    run_layer_test(
        TransformerDecoderBlock,
        dict(
            num_heads=2,
            intermediate_dim=16,
            normalization="rms",
            gated_ffn=True,
            use_bias=False,
            activation="silu",
            normalize_first=True,
        ),
        {"decoder_sequence": _normal(2, 4, 8)},
        tmp_path,
    )


def test_unknown_normalization_is_refused():
    with pytest.raises(ValueError, match=r"normalization must be one of .*'batch'"):
        TransformerDecoderBlock(num_heads=2, intermediate_dim=8, normalization="batch")
