"""MultiHeadAttention against the paper's formula, Keras, and itself cached."""

import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import reference_attention, run_layer_test
from tfformer.layers import MultiHeadAttention

RNG = np.random.default_rng(7)


def _tensorflow():
    """TensorFlow, for the tests of TF-only paths (XLA graphs, TFLite)."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("needs the TensorFlow backend")
    return pytest.importorskip("tensorflow")


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_heads=4, key_dim=8),
        dict(num_heads=4, key_dim=8, value_dim=6, output_dim=10),
        dict(num_heads=4, key_dim=8, num_key_value_heads=2),  # grouped-query
        dict(num_heads=4, key_dim=8, num_key_value_heads=1),  # multi-query
        dict(num_heads=4, key_dim=8, num_key_value_heads=2, fused_qkv=True),
    ],
    ids=["mha", "value_dim", "gqa", "mqa", "fused_gqa"],
)
def test_self_attention_matches_numpy_with_padding_and_causal_mask(kwargs):
    layer = MultiHeadAttention(**kwargs)
    x = _normal(3, 6, 16)
    padding = np.ones((3, 6), bool)
    padding[1, 4:] = False
    padding[2, 1:] = False
    out, scores = layer(
        x, query_mask=padding, use_causal_mask=True, return_attention_scores=True
    )
    masks = padding[:, :, None] & padding[:, None, :] & ref.causal(6)[None]
    want_out, want_scores = reference_attention(layer, x, x, masks)
    np.testing.assert_allclose(out, want_out, atol=1e-5)
    np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    # Causal: no weight above the diagonal; padding: none on padded keys.
    assert np.all(
        np.asarray(scores)[:, :, np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]]
        == 0
    )
    assert np.all(np.asarray(scores)[1, :, :, 4:] == 0)


def test_cross_attention_matches_numpy_with_key_padding_and_attention_mask():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, num_key_value_heads=1)
    x_q, x_kv = _normal(2, 5, 12), _normal(2, 7, 9)
    value_mask = np.ones((2, 7), bool)
    value_mask[0, 5:] = False
    attention_mask = RNG.random((2, 5, 7)) > 0.3
    out = layer(x_q, x_kv, value_mask=value_mask, attention_mask=attention_mask)
    want, _ = reference_attention(
        layer, x_q, x_kv, value_mask[:, None, :] & attention_mask
    )
    np.testing.assert_allclose(out, want, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_from_keras_matches_keras_with_masks(causal):
    theirs = keras.layers.MultiHeadAttention(num_heads=3, key_dim=5, value_dim=4)
    x_q, x_kv = _normal(2, 6, 10), _normal(2, 6, 8)
    value_mask = np.ones((2, 6), bool)
    value_mask[1, 3:] = False
    attention_mask = RNG.random((2, 6, 6)) > 0.2
    kwargs = dict(
        value_mask=value_mask,
        attention_mask=attention_mask,
        use_causal_mask=causal,
        return_attention_scores=True,
    )
    want, want_scores = theirs(x_q, x_kv, **kwargs)
    ours = MultiHeadAttention.from_keras(theirs)
    got, got_scores = ours(x_q, x_kv, **kwargs)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(got_scores, want_scores, atol=1e-6)


def test_from_keras_builds_the_class_it_is_called_on():
    class Subclass(MultiHeadAttention):
        pass

    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3)
    x = _normal(2, 4, 6)
    want = theirs(x, x)
    ours = Subclass.from_keras(theirs)
    assert type(ours) is Subclass
    np.testing.assert_allclose(ours(x), want, atol=1e-5)


def test_from_keras_matches_keras_with_keras_masks_in_a_model():
    """Masks attached by `mask_zero=True` reach both layers the same way."""
    ids = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(20, 8, mask_zero=True)
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    embedded = embedding(ids)
    keras_model = keras.Model(ids, theirs(embedded, embedded, use_causal_mask=True))
    ours = MultiHeadAttention.from_keras(theirs)
    # Keras's layer strips the mask off its inputs, so embed again for ours.
    our_model = keras.Model(ids, ours(embedding(ids), use_causal_mask=True))
    tokens = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 1]], "int32")
    ours_out, keras_out = np.asarray(our_model(tokens)), np.asarray(keras_model(tokens))
    real = tokens != 0
    np.testing.assert_allclose(ours_out[real], keras_out[real], atol=1e-5)
    # Padded query rows attend to nothing here (output = the output bias, 0 at
    # init). Keras does the same eagerly but not inside a functional model, so
    # only real positions are compared.
    np.testing.assert_array_equal(ours_out[~real], 0.0)


@pytest.mark.parametrize("case", ["causal_self", "self", "cross"])
def test_keras_mask_and_explicit_mask_give_identical_results(case):
    embedding = keras.layers.Embedding(30, 16, mask_zero=True)
    layer = MultiHeadAttention(num_heads=4, key_dim=4)
    tokens = np.array([[5, 6, 7, 0, 0], [1, 2, 3, 4, 0]], "int32")
    memory_tokens = np.array([[8, 9, 0], [1, 0, 0]], "int32")
    embedded = embedding(tokens)  # carries a Keras mask
    plain = keras.ops.convert_to_tensor(np.asarray(embedded))  # no mask attached
    causal = case == "causal_self"
    if case == "cross":
        memory = embedding(memory_tokens)
        plain_memory = keras.ops.convert_to_tensor(np.asarray(memory))
        with_keras_mask = layer(embedded, memory)
        explicit = layer(
            plain,
            plain_memory,
            query_mask=tokens != 0,
            value_mask=memory_tokens != 0,
        )
        unmasked = layer(plain, plain_memory)
    else:
        with_keras_mask = layer(embedded, use_causal_mask=causal)
        explicit = layer(plain, query_mask=tokens != 0, use_causal_mask=causal)
        unmasked = layer(plain, use_causal_mask=causal)
    np.testing.assert_array_equal(with_keras_mask, explicit)
    # The masks matter here: a layer that ignored them would differ.
    assert not np.allclose(unmasked, explicit, atol=1e-4)
    # Without the mask, real tokens would attend to the padded keys.
    masked = layer(plain, query_mask=tokens != 0)
    assert not np.allclose(layer(plain)[0, :3], masked[0, :3], atol=1e-4)


def test_no_causal_leakage():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, rotary_max_wavelength=10000)
    x = _normal(1, 8, 16)
    base = np.asarray(layer(x, use_causal_mask=True))
    for t in range(8):
        changed = x.copy()
        changed[0, t] += 5.0
        out = np.asarray(layer(changed, use_causal_mask=True))
        np.testing.assert_allclose(out[0, :t], base[0, :t], atol=1e-6)
        assert not np.allclose(out[0, t], base[0, t])


def test_padding_invariance():
    """Extra padded keys change no output at real positions."""
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    x = _normal(1, 5, 16)
    short = layer(x, use_causal_mask=True)
    padded = np.concatenate([x, _normal(1, 3, 16)], axis=1)
    mask = np.array([[True] * 5 + [False] * 3])
    long = layer(padded, query_mask=mask, use_causal_mask=False)
    short_bidirectional = layer(x)
    np.testing.assert_allclose(long[:, :5], short_bidirectional, atol=1e-5)
    long_causal = layer(padded, query_mask=mask, use_causal_mask=True)
    np.testing.assert_allclose(long_causal[:, :5], short, atol=1e-5)


def test_masked_keys_with_huge_scores_are_ignored():
    """Masked scores are set 30 below the row minimum (not -1e9); a masked
    key whose score dwarfs the real ones still gets exactly zero weight."""
    layer = MultiHeadAttention(num_heads=2, key_dim=8)
    query = _normal(1, 3, 16)
    value = _normal(1, 6, 16)
    value[0, 4:] *= 1e3  # keys 4 and 5: enormous scores
    mask = np.array([[True] * 4 + [False] * 2])
    out, weights = layer(query, value, value_mask=mask, return_attention_scores=True)
    short, short_weights = layer(query, value[:, :4], return_attention_scores=True)
    assert np.all(np.asarray(weights)[..., 4:] == 0)
    np.testing.assert_allclose(np.asarray(weights)[..., :4], short_weights, atol=1e-6)
    np.testing.assert_allclose(out, short, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_heads=4, key_dim=8),
        dict(num_heads=4, key_dim=8, num_key_value_heads=2, fused_qkv=True),
        dict(num_heads=4, key_dim=8, num_key_value_heads=1, rotary_max_wavelength=500),
    ],
    ids=["mha", "fused_gqa", "mqa_rotary"],
)
def test_cached_steps_equal_full_causal_pass(kwargs):
    layer = MultiHeadAttention(**kwargs)
    x = _normal(2, 7, 16)
    full = np.asarray(layer(x, use_causal_mask=True))
    cache = layer.init_cache(2, 10)  # longer than needed: unused slots masked
    # A 3-token prompt in one call, then one token at a time.
    out, cache = layer(
        x[:, :3], use_causal_mask=True, cache=cache, cache_update_index=0
    )
    steps = [np.asarray(out)]
    for i in range(3, 7):
        out, cache = layer(
            x[:, i : i + 1], use_causal_mask=True, cache=cache, cache_update_index=i
        )
        steps.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    assert cache.shape == (2, 2, layer.kv_heads, 10, 8)
    assert np.all(np.asarray(cache)[:, :, :, 7:] == 0)  # nothing written past index


def test_cache_layout_is_head_major_keys_then_values():
    """The documented layout, (batch, 2, kv_heads, max_length, key_dim),
    against keys and values projected by hand."""
    layer = MultiHeadAttention(num_heads=4, key_dim=8, num_key_value_heads=2)
    x = _normal(2, 3, 16)
    _, cache = layer(x, cache=layer.init_cache(2, 6), cache_update_index=2)
    cache = np.asarray(cache)
    assert cache.shape == (2, 2, 2, 6, 8)

    def heads(dense):
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in dense.weights)
        projected = (x @ kernel + bias).reshape(2, 3, 2, 8)  # (B, T, KV, d)
        return projected.transpose(0, 2, 1, 3)  # (B, KV, T, d)

    np.testing.assert_allclose(cache[:, 0, :, 2:5], heads(layer.key_dense), atol=1e-5)
    np.testing.assert_allclose(cache[:, 1, :, 2:5], heads(layer.value_dense), atol=1e-5)
    assert np.all(cache[:, :, :, :2] == 0) and np.all(cache[:, :, :, 5:] == 0)
    np.testing.assert_array_equal(layer.compute_key_value_cache(x), cache[..., 2:5, :])


def test_unwritten_cache_slots_are_never_attended():
    """Without a causal mask, a cached prefill sees all its own tokens (a
    bidirectional prefix) but not the empty slots after them."""
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x = _normal(1, 3, 8)
    out, _ = layer(x, cache=layer.init_cache(1, 6), cache_update_index=0)
    np.testing.assert_allclose(out, layer(x), atol=1e-6)


def test_cache_step_compiles_with_xla_and_a_tensor_index():
    tf = _tensorflow()
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x = _normal(2, 5, 8)
    full = np.asarray(layer(x, use_causal_mask=True))

    @tf.function(jit_compile=True)
    def decode(x):
        cache = layer.init_cache(2, 5)
        outputs = tf.TensorArray(tf.float32, size=5)
        for i in tf.range(5):
            out, cache = layer(
                x[:, i][:, tf.newaxis],
                use_causal_mask=True,
                cache=cache,
                cache_update_index=i,
            )
            outputs = outputs.write(i, out[:, 0])
        return tf.transpose(outputs.stack(), [1, 0, 2])

    np.testing.assert_allclose(decode(x), full, atol=1e-5)


def test_precomputed_cross_attention_cache_equals_direct_call():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x_q, memory = _normal(2, 3, 8), _normal(2, 6, 8)
    memory_mask = np.array([[True] * 6, [True] * 2 + [False] * 4])
    direct = layer(x_q, memory, value_mask=memory_mask)
    cache = layer.compute_key_value_cache(memory)
    out, same_cache = layer(x_q, value_mask=memory_mask, cache=cache)
    np.testing.assert_allclose(out, direct, atol=1e-6)
    np.testing.assert_array_equal(same_cache, cache)


@pytest.mark.parametrize("qk_norm_epsilon", [None, 1e-6], ids=["plain", "qk_norm"])
def test_a_rotary_cross_attention_cache_equals_the_direct_call(qk_norm_epsilon):
    """Rotary cross-attention rotates queries and keys from position 0; the
    precomputed cache must hold the keys (normalized, then) rotated as the
    direct call does."""
    layer = MultiHeadAttention(
        num_heads=4,
        key_dim=8,
        num_key_value_heads=2,
        rotary_max_wavelength=100,
        qk_norm_epsilon=qk_norm_epsilon,
    )
    x_q, memory = _normal(2, 3, 16), _normal(2, 6, 16)
    direct = layer(x_q, memory)
    if qk_norm_epsilon:  # scales far from 1, so a path without them differs
        layer.query_norm.gamma.assign(np.linspace(0.2, 3.0, 8, dtype="float32"))
        layer.key_norm.gamma.assign(np.linspace(3.0, 0.5, 8, dtype="float32"))
        direct = layer(x_q, memory)
    out, _ = layer(x_q, cache=layer.compute_key_value_cache(memory))
    np.testing.assert_allclose(out, direct, atol=1e-5)


def test_qk_norm_normalizes_each_head_before_the_rotation(tmp_path):
    """Qwen3's q_norm and k_norm by hand: the scores of a layer whose query
    and key heads are RMS-normalized (scale `gamma`) before rotary; and its
    config round trip."""
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, rotary_max_wavelength=100, qk_norm_epsilon=1e-6
    )
    x = _normal(1, 3, 8)
    layer(x)
    gamma = np.array([0.5, 2.0, 1.5, 0.25], "float32")
    layer.query_norm.gamma.assign(gamma)
    layer.key_norm.gamma.assign(gamma[::-1].copy())
    _, scores = layer(x, return_attention_scores=True)

    def heads(dense, scale):
        h = (x @ dense.kernel.numpy() + dense.bias.numpy()).reshape(1, 3, 2, 4)
        h = h / np.sqrt(np.mean(h**2, axis=-1, keepdims=True) + 1e-6) * scale
        rotated = [ref.rotary(h[0, :, i], max_wavelength=100) for i in range(2)]
        return np.stack(rotated)

    q, k = heads(layer.query_dense, gamma), heads(layer.key_dense, gamma[::-1])
    logits = q @ k.transpose(0, 2, 1) / 2.0  # sqrt(key_dim)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(scores)[0], expected, atol=1e-5)
    clone = MultiHeadAttention.from_config(layer.get_config())
    assert clone.qk_norm_epsilon == 1e-6


def test_dropout_reaches_attention_weights_only_in_training():
    layer = MultiHeadAttention(num_heads=2, key_dim=8, dropout=0.5, seed=1)
    x = _normal(2, 6, 16)
    inference = [np.asarray(layer(x, training=False)) for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    training = np.asarray(layer(x, training=True))
    assert not np.allclose(training, inference[0])


def test_causal_attention_converts_to_tflite_with_builtin_ops_only():
    """With a dynamic length, Keras's own causal mask needs a Flex StridedSlice
    (`x[None, None]`); ours must convert with builtin ops and run at any length."""
    tf = _tensorflow()
    x = keras.Input((None, 16))
    layer = MultiHeadAttention(num_heads=2, key_dim=8, num_key_value_heads=1)
    model = keras.Model(x, layer(x, use_causal_mask=True))
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    flatbuffer = converter.convert()  # raises if any op needs Flex
    interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    index = interpreter.get_input_details()[0]["index"]
    for length in (3, 7):
        interpreter.resize_tensor_input(index, [2, length, 16])
        interpreter.allocate_tensors()
        data = _normal(2, length, 16)
        interpreter.set_tensor(index, data)
        interpreter.invoke()
        got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        np.testing.assert_allclose(got, model(data), atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(query=(2, 5, 8), value=None, kwargs=dict(use_causal_mask=True)),
        dict(query=(2, 5, 8), value=(2, 7, 6), kwargs=dict()),
    ],
    ids=["causal_self", "cross"],
)
def test_layer_contract(case, tmp_path):
    inputs = {"query": _normal(*case["query"])}
    if case["value"]:
        inputs["value"] = _normal(*case["value"])
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=2, key_dim=4, num_key_value_heads=1, dropout=0.1),
        inputs,
        tmp_path,
        call_kwargs=case["kwargs"],
    )


def test_layer_contract_with_explicit_mask_input(tmp_path):
    mask = np.ones((2, 5), bool)
    mask[0, 3:] = False
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=2, key_dim=4, fused_qkv=True, rotary_max_wavelength=100),
        {"query": _normal(2, 5, 8), "query_mask": mask},
        tmp_path,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, key_dim=4), "num_heads must be a positive int"),
        (dict(num_heads=2, key_dim="4"), "key_dim must be a positive int"),
        (dict(num_heads=3, key_dim=4, num_key_value_heads=2), "multiple of"),
        (dict(num_heads=2, key_dim=4, dropout=1.5), "dropout must be in"),
        (dict(num_heads=2, key_dim=5, rotary_max_wavelength=100), "even key_dim"),
        (
            dict(num_heads=2, key_dim=4, rotary_scaling={"rope_type": "llama3"}),
            "rotary_scaling of rope_type llama3 takes exactly",
        ),
        (
            dict(
                num_heads=2,
                key_dim=4,
                rotary_scaling={
                    "rope_type": "llama3",
                    "factor": 8,
                    "low_freq_factor": 1,
                    "high_freq_factor": 4,
                    "original_max_position_embeddings": 64,
                },
            ),
            "rotary_scaling needs rotary_max_wavelength",
        ),
        (
            dict(num_heads=2, key_dim=4, qk_norm_epsilon=0),
            "qk_norm_epsilon must be a positive number",
        ),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


def test_bad_call_arguments():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x = _normal(2, 5, 8)
    with pytest.raises(ValueError, match="query must have shape"):
        layer(_normal(2, 8))
    with pytest.raises(ValueError, match="value_mask must match the key length 5"):
        layer(x, value_mask=np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="attention_mask must match the key length"):
        layer(x, _normal(2, 6, 8), attention_mask=np.ones((2, 5, 5), bool))
    with pytest.raises(ValueError, match="attention_mask must have rank 3"):
        layer(x, attention_mask=np.ones((5, 5), bool))
    with pytest.raises(ValueError, match="cache must have shape"):
        layer(x, cache=np.zeros((2, 5, 2, 4), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="cache must have shape"):
        # Length-major (batch, 2, max_length, heads, key_dim) is refused.
        layer(x, cache=np.zeros((2, 2, 6, 2, 4), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match="cache must have shape"):
        layer(x, cache=np.zeros((2, 2, 2, 6, 3), "float32"), cache_update_index=0)
    fused = MultiHeadAttention(num_heads=2, key_dim=4, fused_qkv=True)
    with pytest.raises(ValueError, match="only supports self-attention"):
        fused(x, _normal(2, 6, 8))
    with pytest.raises(TypeError, match=r"keras\.layers\.MultiHeadAttention"):
        MultiHeadAttention.from_keras(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="needs a built layer"):
        MultiHeadAttention.from_keras(keras.layers.MultiHeadAttention(2, 4))


def _glorot_limit(fan_in, fan_out):
    return np.sqrt(6.0 / (fan_in + fan_out))


def test_glorot_draws_use_the_head_split_fans():
    # 64 features, 4 heads of 16. Query/key/value kernels are drawn as
    # (64, 4, 16): fan_in 64 * 4, fan_out 64 * 16 -> limit sqrt(6 / 1280).
    # The output kernel as (4, 16, 64): fan_in 16 * 4, fan_out 64 * 4 ->
    # limit sqrt(6 / 320). A plain (64, 64) Dense would give sqrt(6 / 128).
    keras.utils.set_random_seed(3)
    layer = MultiHeadAttention(num_heads=4, key_dim=16)
    layer(_normal(1, 2, 64))
    expected = {
        "query_dense": _glorot_limit(256, 1024),
        "key_dense": _glorot_limit(256, 1024),
        "value_dense": _glorot_limit(256, 1024),
        "output_dense": _glorot_limit(64, 256),
    }
    for name, limit in expected.items():
        kernel = keras.ops.convert_to_numpy(getattr(layer, name).kernel)
        assert kernel.shape == (64, 64)
        assert np.abs(kernel).max() <= limit
        # 4,096 uniform draws: the largest is within 0.5% of the limit and
        # the standard deviation within 3% of limit / sqrt(3).
        assert np.abs(kernel).max() > 0.995 * limit, name
        np.testing.assert_allclose(kernel.std(), limit / np.sqrt(3), rtol=0.03)
        # Heads differ: the draw is not one head's block repeated.
        assert not np.allclose(kernel[:, :16], kernel[:, 16:32])


def test_fused_grouped_projection_draws_each_part_with_its_own_fans():
    keras.utils.set_random_seed(4)
    layer = MultiHeadAttention(
        num_heads=4, key_dim=16, num_key_value_heads=1, fused_qkv=True
    )
    layer(_normal(1, 2, 64))
    kernel = keras.ops.convert_to_numpy(layer.query_key_value_dense.kernel)
    assert kernel.shape == (64, 64 + 16 + 16)
    query, key_value = kernel[:, :64], kernel[:, 64:]
    np.testing.assert_allclose(
        query.std(), _glorot_limit(256, 1024) / np.sqrt(3), rtol=0.03
    )
    # One key/value head: (64, 1, 16) -> fan_in 64, fan_out 1024.
    np.testing.assert_allclose(
        key_value.std(), _glorot_limit(64, 1024) / np.sqrt(3), rtol=0.05
    )


def test_fan_free_initializers_are_drawn_unchanged():
    keras.utils.set_random_seed(5)
    layer = MultiHeadAttention(
        num_heads=4,
        key_dim=16,
        kernel_initializer=keras.initializers.RandomNormal(stddev=0.5),
    )
    layer(_normal(1, 2, 64))
    for name in ("query_dense", "output_dense"):
        kernel = keras.ops.convert_to_numpy(getattr(layer, name).kernel)
        np.testing.assert_allclose(kernel.std(), 0.5, rtol=0.04)
        np.testing.assert_allclose(kernel.mean(), 0.0, atol=0.03)


def test_projection_initializer_round_trips_through_its_config():
    layer = MultiHeadAttention(num_heads=4, key_dim=16)
    layer(_normal(1, 2, 64))
    initializer = layer.output_dense.kernel_initializer
    copy = keras.initializers.deserialize(keras.initializers.serialize(initializer))
    assert copy.get_config() == initializer.get_config()
    assert copy((64, 64)).shape == (64, 64)


# Verbatim `keras.initializers.serialize(...)` of the fused and output kernel
# initializers, produced when the class lived in multi_head_attention.py: a
# config written before the move must keep deserializing to the same draw.
OLD_PER_HEAD_CONFIGS = [
    {
        "module": "tfformer.layers.multi_head_attention",
        "class_name": "_PerHeadInitializer",
        "config": {
            "base": {
                "module": "keras.initializers",
                "class_name": "GlorotUniform",
                "config": {"seed": None, "input_axes": None, "output_axes": None},
                "registered_name": None,
            },
            "shapes": [[8, 2, 4], [8, 1, 4], [8, 1, 4]],
            "heads_first": False,
        },
        "registered_name": "tfformer>_PerHeadInitializer",
    },
    {
        "module": "tfformer.layers.multi_head_attention",
        "class_name": "_PerHeadInitializer",
        "config": {
            "base": {
                "module": "keras.initializers",
                "class_name": "GlorotUniform",
                "config": {"seed": None, "input_axes": None, "output_axes": None},
                "registered_name": None,
            },
            "shapes": [[2, 4, 8]],
            "heads_first": True,
        },
        "registered_name": "tfformer>_PerHeadInitializer",
    },
]


@pytest.mark.parametrize(
    "old, sublayer, shape",
    [
        (OLD_PER_HEAD_CONFIGS[0], "query_key_value_dense", (8, 16)),
        (OLD_PER_HEAD_CONFIGS[1], "output_dense", (8, 8)),
    ],
    ids=["fused_gqa", "output"],
)
def test_per_head_initializer_configs_saved_before_the_move_still_load(
    old, sublayer, shape
):
    layer = MultiHeadAttention(
        num_heads=2, key_dim=4, num_key_value_heads=1, fused_qkv=True
    )
    layer(_normal(1, 3, 8))
    current = getattr(layer, sublayer).kernel_initializer
    loaded = keras.initializers.deserialize(old)
    assert type(loaded) is type(current)
    assert loaded.get_config() == current.get_config()
    # Same seed, same kernel: the loaded initializer draws per head as before.
    keras.utils.set_random_seed(11)
    want = keras.ops.convert_to_numpy(current(shape))
    keras.utils.set_random_seed(11)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(shape)), want)


@pytest.mark.parametrize("fused_qkv", [False, True])
def test_qkv_bias_biases_the_projections_in_and_not_the_one_out(fused_qkv):
    """Qwen2's attention: use_bias=False with qkv_bias=True. The bias of the
    query, key and value projections shifts them: computed by hand."""
    mha = MultiHeadAttention(
        num_heads=2, key_dim=4, use_bias=False, qkv_bias=True, fused_qkv=fused_qkv
    )
    x = _normal(1, 3, 8)
    mha(x)
    inputs = (
        [mha.query_key_value_dense]
        if fused_qkv
        else [
            mha.query_dense,
            mha.key_dense,
            mha.value_dense,
        ]
    )
    assert all(dense.bias is not None for dense in inputs)
    assert mha.output_dense.bias is None
    clone = MultiHeadAttention.from_config(mha.get_config())
    assert (clone.use_bias, clone.qkv_bias) == (False, True)
    # Values biased by b with all-equal scores average to mean(v) + b.
    if not fused_qkv:
        for dense in (mha.query_dense, mha.key_dense):
            dense.kernel.assign(np.zeros(dense.kernel.shape, "float32"))
        mha.value_dense.bias.assign(np.full((8,), 0.5, "float32"))
        mha.output_dense.kernel.assign(np.eye(8, dtype="float32"))
        values = x @ mha.value_dense.kernel.numpy() + 0.5
        expected = np.broadcast_to(values.mean(1, keepdims=True), values.shape)
        np.testing.assert_allclose(mha(x), expected, atol=1e-5)
