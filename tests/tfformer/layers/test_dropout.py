"""tfformer's Dropout: keras.layers.Dropout's law (keep with probability
1 - rate, scale by 1 / (1 - rate)) and config, with its own generator."""

import keras
import numpy as np
import pytest

from tfformer.decoding import filter_logits
from tfformer.layers.dropout import Dropout


def xla(layer):
    """The layer's training call compiled with XLA (on TensorFlow; other
    backends run it as it is)."""
    if keras.backend.backend() != "tensorflow":
        return lambda x: layer(x, training=True)
    import tensorflow as tf

    return tf.function(lambda x: layer(x, training=True), jit_compile=True)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
def test_masks_follow_the_dropout_law(compiled):
    x = np.ones((1000, 1000), "float32")
    layer = Dropout(0.1, seed=3)
    call = xla(layer) if compiled else (lambda x: layer(x, training=True))
    y = np.asarray(call(x))
    kept = y != 0
    # 10^6 Bernoulli(0.9) draws: the kept share is 0.9 +- 0.0003 (1 sd).
    assert abs(kept.mean() - 0.9) < 0.0015
    np.testing.assert_allclose(y[kept], 1 / 0.9, rtol=1e-6)
    # Rows are not all alike (a mask per element, not per row or column).
    assert kept.mean(axis=1).std() > 0.005 and kept.mean(axis=0).std() > 0.005


def test_inference_and_rate_zero_pass_inputs_through():
    x = np.random.default_rng(0).normal(size=(4, 5)).astype("float32")
    np.testing.assert_array_equal(np.asarray(Dropout(0.5)(x, training=False)), x)
    np.testing.assert_array_equal(np.asarray(Dropout(0.0)(x, training=True)), x)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
def test_same_seed_same_masks_and_each_call_a_new_one(compiled):
    x = np.ones((64, 64), "float32")
    a, b = Dropout(0.3, seed=7), Dropout(0.3, seed=7)
    call_a, call_b = (xla(a), xla(b)) if compiled else (a, b)
    if not compiled:
        call_a = lambda x: a(x, training=True)  # noqa: E731
        call_b = lambda x: b(x, training=True)  # noqa: E731
    first = np.asarray(call_a(x))
    np.testing.assert_array_equal(first, np.asarray(call_b(x)))
    assert not np.array_equal(first, np.asarray(call_a(x)))


def test_config_round_trip_and_a_keras_dropout_subclass():
    layer = Dropout(0.25, seed=1, name="drop")
    again = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(layer)
    )
    assert type(again) is Dropout and isinstance(again, keras.layers.Dropout)
    assert again.get_config() == layer.get_config()


def _dropout_model(seed):
    inputs = keras.Input((16,))
    return keras.Model(inputs, keras.layers.Dense(4)(Dropout(0.5, seed=seed)(inputs)))


def test_saved_weights_keep_the_generator_so_a_restored_model_draws_on(tmp_path):
    """A model restored from `save_weights` (a run's backup) or a `.keras`
    file draws the masks the saved one would have drawn next, not its first
    masks again (which is what keras.layers.Dropout's weights give)."""
    x = np.ones((8, 16), "float32")
    model = _dropout_model(seed=5)
    layer = model.layers[1]
    first = [np.asarray(layer(x, training=True)) for _ in range(3)]
    model.save_weights(tmp_path / "backup.weights.h5")
    model.save(tmp_path / "model.keras")
    expected = np.asarray(layer(x, training=True))  # the fourth draw

    restored = _dropout_model(seed=5)
    restored.load_weights(tmp_path / "backup.weights.h5")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    for again in (restored.layers[1], loaded.layers[1]):
        draw = np.asarray(again(x, training=True))
        np.testing.assert_array_equal(draw, expected)
        assert not any(np.array_equal(draw, f) for f in first)


def test_weights_saved_without_the_generator_state_still_load(tmp_path):
    # keras.layers.Dropout stores nothing for the layer: its weights load
    # into tfformer's Dropout, whose generator keeps its own state.
    inputs = keras.Input((16,))
    dense = keras.layers.Dense(4)
    keras_model = keras.Model(inputs, dense(keras.layers.Dropout(0.5)(inputs)))
    keras_model.save_weights(tmp_path / "keras.weights.h5")
    model = _dropout_model(seed=5)
    model.load_weights(tmp_path / "keras.weights.h5")
    np.testing.assert_array_equal(
        np.asarray(model.layers[2].kernel), np.asarray(dense.kernel)
    )
    assert np.asarray(model.layers[1].seed_generator.state)[1] == 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dtype_is_kept(dtype):
    x = keras.ops.ones((8, 8), dtype=dtype)
    y = Dropout(0.5, seed=2, dtype=dtype)(x, training=True)
    assert keras.backend.standardize_dtype(y.dtype) == dtype
    values = set(np.asarray(keras.ops.cast(y, "float32")).ravel().tolist())
    assert values <= {0.0, 2.0} and values == {0.0, 2.0}


def test_xla_steps_draw_with_threefry():
    """Under XLA the masks come from Threefry: TensorFlow's own
    stateless_uniform with that algorithm and the layer's first seed gives
    them; outside XLA, Philox does."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the TensorFlow backend's generator choice")
    import tensorflow as tf

    x = np.ones((32, 48), "float32")
    seed = tf.constant([11, 0], tf.int32)  # SeedGenerator(11)'s first state

    def expected(algorithm):
        uniform = tf.function(
            lambda: tf.random.stateless_uniform(x.shape, seed=seed, alg=algorithm),
            jit_compile=algorithm == "threefry",
        )()
        return np.where(np.asarray(uniform) >= 0.25, 1 / 0.75, 0.0)

    np.testing.assert_allclose(
        np.asarray(xla(Dropout(0.25, seed=11))(x)), expected("threefry"), rtol=1e-6
    )
    eager = np.asarray(Dropout(0.25, seed=11)(x, training=True))
    np.testing.assert_allclose(eager, expected("philox"), rtol=1e-6)


def test_a_tensorflow_without_the_xla_context_check_fails_naming_its_version(
    monkeypatch,
):
    """The private API behind the generator choice and the sampling
    filters' algorithm is checked: when TensorFlow drops it, both fail
    loudly with the version instead of silently changing algorithm."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("a TensorFlow internal")
    import tensorflow as tf

    from tfformer.layers.dropout import in_xla_compilation

    assert in_xla_compilation() is False
    monkeypatch.delattr(tf.__internal__, "get_enclosing_xla_context")
    message = f"TensorFlow {tf.__version__} does not"
    with pytest.raises(RuntimeError, match=message):
        Dropout(0.5)(np.ones((2, 3), "float32"), training=True)
    with pytest.raises(RuntimeError, match=message):
        filter_logits(np.zeros((2, 5), "float32"), top_k=2)
