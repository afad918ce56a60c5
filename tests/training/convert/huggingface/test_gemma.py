"""`tfformer-convert` on small random Gemma decoders in the Hugging Face
layout (`GemmaForCausalLM`: Llama's tensor names, a GeGLU feed-forward
network, embeddings scaled by sqrt(width), RMSNorms multiplying by 1 + w,
heads of their own `head_dim`, the embedding as output projection), checked
against keras-hub's `GemmaBackbone` reading the same directory."""

import json

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.test_llama import (
    overlay_config,
    own_head_tensors,
    ragged_batch,
)
from tests.training.convert.huggingface.test_llama import (
    write_checkpoint as write_llama,
)
from tests.training.convert.huggingface.testing import (
    assert_predict_continues_ids,
    assert_refused,
    backbone_logits,
    quiet,
)
from tfformer.training.convert import convert

pytest.importorskip("safetensors")

# 4 heads of 6 features over a width of 16 (not 16 / 4), 2 key/value heads.
HEAD_DIM = 6
GEMMA = {
    "architectures": ["GemmaForCausalLM"],
    "model_type": "gemma",
    "head_dim": HEAD_DIM,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_theta": 10000.0,  # keras-hub's Gemma has this base fixed
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "tie_word_embeddings": True,
}


def gemma_tensors(rng):
    """Llama's tensors (tied) with projections for heads of HEAD_DIM and
    norm weights w around 0 (Gemma's scales are 1 + w)."""
    tensors = own_head_tensors(rng, HEAD_DIM)
    for name in tensors:
        if name.endswith("norm.weight"):
            tensors[name] = rng.uniform(-0.8, 1.0, size=tensors[name].shape)
    return {name: np.asarray(t, "float32") for name, t in tensors.items()}


def write_checkpoint(path, rng, *, config=None, tensors=None):
    """A GemmaForCausalLM checkpoint as `save_pretrained` writes it."""
    tensors = gemma_tensors(rng) if tensors is None else tensors
    source = write_llama(path, rng, tensors=tensors)
    return overlay_config(source, GEMMA, config, ("mlp_bias",))


def keras_hub_backbone(source):
    keras_hub = pytest.importorskip("keras_hub")
    return keras_hub.models.GemmaBackbone.from_preset(str(source))


def test_logits_equal_keras_hub_on_a_ragged_batch(tmp_path):
    rng = np.random.default_rng(0)
    tensors = gemma_tensors(rng)
    source = write_checkpoint(tmp_path / "hf", rng, tensors=tensors)
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    model = tfformer.load(run).model
    ids, mask = ragged_batch(rng)
    expected = backbone_logits(keras_hub_backbone(source), ids, mask)
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-4)
    np.testing.assert_array_equal(ours[..., 0], -1e4)  # padding
    assert model.name == "gemma"
    backbone = model.backbone
    assert type(backbone).__name__ == "GemmaBackbone"
    assert (backbone.head_dim, backbone.tie_embeddings) == (HEAD_DIM, True)
    assert backbone.token_embedding.scale_embeddings
    assert any("Gemma decoder: 2 layers" in line and "GeGLU" in line for line in said)
    # Each part matters: with norms read as w (not 1 + w), or without the
    # embedding scale, the logits are another model's.
    norms = backbone.decoder_blocks[0].self_attention_norm.gamma
    np.testing.assert_allclose(
        norms.numpy(), 1 + tensors["model.layers.0.input_layernorm.weight"]
    )
    backbone.token_embedding.scale_embeddings = False
    unscaled = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    assert np.abs(unscaled[mask][:, 1:] - expected[mask]).max() > 1e-2


def test_the_run_saves_loads_and_generates_as_keras_hub(tmp_path, capsys):
    """The saved run rebuilds a `GemmaBackbone` (scaled embeddings, GeGLU)
    and `tfformer-predict`'s KV-cached greedy decoding continues a prompt of
    ids with the tokens a full keras-hub forward pass picks one at a time."""
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert_predict_continues_ids(run, keras_hub_backbone(source), capsys)


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"hidden_activation": "gelu"},
            r"hidden_activation must be null or 'gelu_pytorch_tanh'.*Received: 'gelu'",
        ),
        ({"tie_word_embeddings": False}, r"tie_word_embeddings must be true"),
        ({"head_dim": 7}, r"head_dim must be even .*Received: 7"),
    ],
)
def test_bad_checkpoints_are_refused_naming_the_key(tmp_path, config, message):
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(3), config=config)
    assert_refused(tmp_path, source, message)


def test_gemmas_defaults_fill_what_config_json_leaves_out(tmp_path):
    """GemmaConfig's defaults, not Llama's: bos 2 and eos 1 (generation
    stops at <eos>), and hidden_act is not read (transformers 4.x's
    GemmaMLP uses GELU's tanh form when hidden_activation is null)."""
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(4),
        config={"hidden_act": "silu", "hidden_activation": None},
    )
    settings = json.loads((source / "config.json").read_text())
    for key in ("bos_token_id", "eos_token_id"):
        del settings[key]
    (source / "config.json").write_text(json.dumps(settings))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    tokenizer = tfformer.load(run).tokenizer
    assert (tokenizer.start_id, tokenizer.end_id) == (2 + 1, 1 + 1)  # model ids
    assert any("start 2, end 1" in line for line in said)
