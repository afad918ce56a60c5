"""`tfformer-convert` on small random Qwen2 decoders in the Hugging Face
layout (`Qwen2ForCausalLM`: Llama's tensor names and shapes plus biases on
the query, key and value projections), checked against keras-hub's
`QwenBackbone` reading the same directory."""

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.test_llama import (
    SIZES,
    llama_tensors,
    overlay_config,
    ragged_batch,
)
from tests.training.convert.huggingface.test_llama import (
    write_checkpoint as write_llama,
)
from tests.training.convert.huggingface.testing import (
    assert_predict_continues_ids,
    assert_refused,
    backbone_logits,
    changed,
    quiet,
)
from tfformer.training.convert import convert

pytest.importorskip("safetensors")

# What a Qwen2.5 config.json says that Llama's does not (the context is 32).
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "use_sliding_window": False,
    "sliding_window": 32,
    "max_window_layers": 2,
    "rope_theta": 1e6,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}


def qwen2_tensors(rng):
    """Llama's tensors (tied embeddings) and a bias for every q, k and v
    projection, large enough to move the logits."""
    tensors = llama_tensors(rng, tie=True)
    d = SIZES["hidden"]
    kv = SIZES["kv"] * d // SIZES["heads"]
    for i in range(SIZES["layers"]):
        for part, units in (("q", d), ("k", kv), ("v", kv)):
            name = f"model.layers.{i}.self_attn.{part}_proj.bias"
            tensors[name] = rng.normal(size=(units,)).astype("float32")
    return tensors


def write_checkpoint(path, rng, *, config=None, tensors=None, absent=()):
    """A Qwen2ForCausalLM checkpoint as `save_pretrained` writes it, less
    the config.json keys `absent`."""
    tensors = qwen2_tensors(rng) if tensors is None else tensors
    source = write_llama(path, rng, tensors=tensors)
    return overlay_config(
        source, QWEN2, config, ("attention_bias", "mlp_bias", *absent)
    )


def keras_hub_backbone(source):
    keras_hub = pytest.importorskip("keras_hub")
    return keras_hub.models.QwenBackbone.from_preset(str(source))


def keras_hub_logits(source, ids, mask):
    return backbone_logits(keras_hub_backbone(source), ids, mask)


def test_logits_equal_keras_hub_on_a_ragged_batch(tmp_path):
    rng = np.random.default_rng(0)
    tensors = qwen2_tensors(rng)
    source = write_checkpoint(tmp_path / "hf", rng, tensors=tensors)
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    model = tfformer.load(run).model
    ids, mask = ragged_batch(rng)
    expected = keras_hub_logits(source, ids, mask)
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-5)
    np.testing.assert_array_equal(ours[..., 0], -1e4)  # padding
    assert type(model.backbone).__name__ == "LlamaBackbone"
    assert model.name == "qwen2"
    assert model.backbone.qkv_bias is True
    attention = model.backbone.decoder_blocks[0].self_attention
    assert attention.output_dense.bias is None  # o_proj has none
    assert any("Qwen2 decoder: 2 layers" in line for line in said)
    assert any("biased query/key/value" in line for line in said)
    # The biases matter: without them the logits are another model's.
    for i in range(SIZES["layers"]):
        for part in "qkv":
            tensors[f"model.layers.{i}.self_attn.{part}_proj.bias"] *= 0
    unbiased = write_checkpoint(tmp_path / "zero", rng, tensors=tensors)
    other = tfformer.load(convert(str(unbiased), str(tmp_path / "z"), progress=quiet))
    zero = np.asarray(other.model({"token_ids": np.where(mask, ids + 1, 0)}))
    assert np.abs(zero[mask][:, 1:] - expected[mask]).max() > 1e-2


def test_greedy_generation_equals_keras_hubs_argmax(tmp_path, capsys):
    """`tfformer-predict` (KV-cached greedy decoding) continues a prompt of
    ids with the tokens a full keras-hub forward pass picks one at a time."""
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert_predict_continues_ids(run, keras_hub_backbone(source), capsys)


@pytest.mark.parametrize(
    "config, change, message",
    [
        (
            {"use_sliding_window": True},
            {},
            r"use_sliding_window must be false: tfformer's attention has no "
            r"sliding window\. Received: use_sliding_window=True",
        ),
        (
            {"layer_types": ["full_attention", "sliding_attention"]},
            {},
            r"layer_types must all be 'full_attention'.*sliding_attention",
        ),
        (
            {},
            {"drop": "model.layers.1.self_attn.k_proj.bias"},
            "no tensor 'model.layers.1.self_attn.k_proj.bias'",
        ),
        (
            {},
            {"extra": "model.layers.0.self_attn.o_proj.bias"},
            "does not use .*o_proj.bias",
        ),
    ],
    ids=["sliding_window", "layer_types", "missing_bias", "output_bias"],
)
def test_what_tfformer_does_not_reproduce_is_refused(tmp_path, config, change, message):
    rng = np.random.default_rng(4)
    tensors = changed(qwen2_tensors(rng), change, np.ones((16,), "float32"))
    source = write_checkpoint(tmp_path / "hf", rng, config=config, tensors=tensors)
    assert_refused(tmp_path, source, message)
