"""`tfformer.models.lora`: which weights train after `enable_lora`, that an
adapted model starts as it was and computes W + (alpha / rank) A B after,
and the adapters alone round-trip into another adapted copy."""

import numpy as np
import pytest
from keras import ops

from tfformer.models import bert_classifier, bert_encoder
from tfformer.models.lora import adapter_weights, enable_lora, load_adapter_weights


def classifier():
    encoder = bert_encoder(
        50,
        num_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_sequence_length=8,
        dropout=0.0,
    )
    model = bert_classifier(encoder, 3, dropout=0.0)
    ids = np.array([[2, 5, 7, 3, 0, 0]], "int32")
    inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
    model(inputs)
    return model, inputs


def test_only_the_adapters_and_the_head_train():
    model, inputs = classifier()
    before = ops.convert_to_numpy(model(inputs))
    dense = model.backbone.encoder_blocks[0].self_attention.query_dense
    base = ops.convert_to_numpy(dense.kernel)  # W, frozen from here on
    paths = enable_lora(model, 4, targets=("query", "value", "ffn"), alpha=8)
    # Two blocks: query, value and the FFN's two dense layers each.
    assert len(paths) == 8
    trainable = sorted(v.path for v in model.trainable_weights)
    adapters = [p for p in trainable if "lora_kernel" in p]
    assert len(adapters) == 16
    # Besides them, the new head alone (the pooler is the backbone's).
    assert set(trainable) - set(adapters) == {v.path for v in model.head.weights}
    # B starts at zero: the model computes what it did.
    np.testing.assert_allclose(ops.convert_to_numpy(model(inputs)), before, atol=1e-6)
    a = np.random.default_rng(0).normal(size=dense.lora_kernel_a.shape)
    b = np.random.default_rng(1).normal(size=dense.lora_kernel_b.shape)
    dense.lora_kernel_a.assign(a)
    dense.lora_kernel_b.assign(b)
    np.testing.assert_allclose(
        ops.convert_to_numpy(dense.kernel), base + 2.0 * a @ b, atol=1e-5
    )


def test_the_adapters_alone_round_trip():
    model, inputs = classifier()
    copy, _ = classifier()
    copy.set_weights(model.get_weights())
    for m in (model, copy):
        enable_lora(m, 2)
    rng = np.random.default_rng(3)
    for v in model.weights:
        if "lora_kernel" in v.path:
            v.assign(rng.normal(size=v.shape) * 0.1)
    saved = adapter_weights(model)
    assert len(saved) == 8 and all("lora_kernel" in k for k in saved)
    load_adapter_weights(copy, saved)
    np.testing.assert_allclose(
        ops.convert_to_numpy(copy(inputs)),
        ops.convert_to_numpy(model(inputs)),
        atol=1e-6,
    )
    wrong = {k: v[:1] for k, v in saved.items()}
    with pytest.raises(ValueError, match="must be"):
        load_adapter_weights(copy, wrong)
    with pytest.raises(ValueError, match="do not match"):
        load_adapter_weights(copy, dict(list(saved.items())[:2]))


@pytest.mark.parametrize(
    "rank, targets, message",
    [
        (0, ("query",), "model.lora_rank must be an int >= 1"),
        (True, ("query",), "model.lora_rank must be an int >= 1"),
        (17, ("query",), r"at most 16 \(the narrowest"),
        (2, ("queries",), "model.lora_targets must be one or more of"),
        (2, (), "model.lora_targets must be one or more of"),
    ],
)
def test_bad_ranks_and_targets_are_named(rank, targets, message):
    model, _ = classifier()
    with pytest.raises(ValueError, match=message):
        enable_lora(model, rank, targets)


def test_a_resumed_model_gets_fresh_adapters_on_its_merged_weights(tmp_path):
    """Keras saves LoRA layers merged and loads them with A = B = 0 (no
    gradient moves them): `redraw_adapters` draws A again, and the model
    still computes what the saved one did."""
    from tfformer.models.lora import redraw_adapters

    model, inputs = classifier()
    enable_lora(model, 2)
    rng = np.random.default_rng(4)
    for v in model.weights:
        if "lora_kernel" in v.path:
            v.assign(rng.normal(size=v.shape) * 0.1)
    expected = ops.convert_to_numpy(model(inputs))
    path = str(tmp_path / "backup.weights.h5")
    model.save_weights(path)
    resumed, _ = classifier()
    enable_lora(resumed, 2)
    resumed.load_weights(path)
    adapters = [v for v in resumed.weights if "lora_kernel" in v.path]
    assert not any(np.any(ops.convert_to_numpy(v)) for v in adapters)
    assert redraw_adapters(resumed) == 4  # query and value of two blocks
    assert all(
        np.any(ops.convert_to_numpy(v)) for v in adapters if "lora_kernel_a" in v.path
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(resumed(inputs)), expected, atol=1e-5
    )
    assert redraw_adapters(resumed) == 0  # drawn ones are left alone


def test_a_fused_projection_is_adapted_whole():
    """A seq2seq model with `fused_qkv=True` has one query-key-value matrix
    in each self-attention: "query" adapts all of it there, and the
    cross-attention's own query projection."""
    from tfformer.models import transformer_seq2seq

    model = transformer_seq2seq(
        30,
        30,
        num_encoder_layers=1,
        num_decoder_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_sequence_length=8,
        fused_qkv=True,
    )
    ids = np.array([[2, 5, 3, 0]], "int32")
    model({"encoder_token_ids": ids, "decoder_token_ids": ids})
    paths = enable_lora(model, 2, targets=("query",))
    fused = [p for p in paths if p.endswith("/query_key_value")]
    assert len(fused) == 3  # every self-attention: 1 encoder, 2 decoder blocks
    assert len([p for p in paths if p.endswith("/query")]) == 2  # cross-attention
    assert len(paths) == 5


def test_saved_adapters_take_a_saved_model_back_to_its_weights(tmp_path):
    """`save_adapters` then `read_adapters` on the `.keras` file the adapted
    model saves (merged): inside `unmerged` each adapted kernel is W again
    (to float rounding), afterwards exactly what was loaded; `merged_into`
    tells the file from one whose kernels moved. A seed draws A the same
    way twice."""
    import keras

    from tfformer.models.lora import merged_into, read_adapters, save_adapters, unmerged

    model, _ = classifier()
    dense = model.backbone.encoder_blocks[1].self_attention.value_dense
    base = ops.convert_to_numpy(dense.kernel)
    twin, _ = classifier()
    enable_lora(model, 2, seed=7)
    enable_lora(twin, 2, seed=7)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(dense.lora_kernel_a),
        ops.convert_to_numpy(
            twin.backbone.encoder_blocks[1].self_attention.value_dense.lora_kernel_a
        ),
    )
    dense.lora_kernel_b.assign(
        np.random.default_rng(0).normal(size=dense.lora_kernel_b.shape)
    )
    save_adapters(model, tmp_path / "adapters.npz")
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    adapters = read_adapters(tmp_path / "adapters.npz", loaded)
    assert len(adapters) == 4  # query and value of two blocks
    assert merged_into(loaded, adapters)
    kernel = loaded.backbone.encoder_blocks[1].self_attention.value_dense.kernel
    merged = ops.convert_to_numpy(kernel)
    assert np.abs(merged - base).max() > 1e-2  # the adapters moved it
    with unmerged(loaded, adapters):
        np.testing.assert_allclose(ops.convert_to_numpy(kernel), base, atol=1e-5)
    np.testing.assert_array_equal(ops.convert_to_numpy(kernel), merged)
    kernel.assign(merged + 1e-3)
    assert not merged_into(loaded, adapters)
