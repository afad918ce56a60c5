"""`tfformer-convert` on small random Mistral decoders in the Hugging Face
layout (`MistralForCausalLM`: Llama's tensor names and shapes), checked
against keras-hub's `MistralBackbone` reading the same directory: the run is
a `LlamaBackbone` with Mistral's defaults, and a sliding window shorter than
the context, which tfformer's attention does not have, is refused."""

import json

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.test_llama import (
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
    quiet,
)
from tfformer.training.convert import convert

pytest.importorskip("safetensors")

# What Mistral's config.json says that Llama's does not (the context is 32).
MISTRAL = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "sliding_window": None,
    "head_dim": 4,
    "rope_theta": 1e6,
    "rms_norm_eps": 1e-5,
}


def write_checkpoint(path, rng, *, config=None, absent=()):
    """A MistralForCausalLM checkpoint as `save_pretrained` writes it, less
    the config.json keys `absent`. keras-hub's converter casts every tensor
    to float16: the tensors are float16 values, which it keeps exactly."""
    tensors = {
        name: value.astype(np.float16).astype(np.float32)
        for name, value in llama_tensors(rng).items()
    }
    source = write_llama(path, rng, tensors=tensors)
    return overlay_config(source, MISTRAL, config, absent)


def rewrite_config(source, **settings):
    """config.json of `source` with `settings` changed (the tensors kept)."""
    path = source / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))


def keras_hub_backbone(source):
    keras_hub = pytest.importorskip("keras_hub")
    return keras_hub.models.MistralBackbone.from_preset(str(source))


def keras_hub_logits(source, ids, mask):
    return backbone_logits(keras_hub_backbone(source), ids, mask)


@pytest.mark.parametrize(
    "config, absent, for_keras_hub",
    [
        ({}, (), {}),
        ({"sliding_window": 32}, (), {}),  # as long as the context: no window
        # transformers 5 writes rope_theta inside rope_parameters.
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}},
            ("rope_theta",),
            {},
        ),
        # transformers' MistralConfig default, 1e4, given to keras-hub (which
        # needs the key).
        ({}, ("rope_theta",), {"rope_theta": 1e4}),
    ],
    ids=["no_window", "window_of_the_context", "rope_parameters", "default_theta"],
)
def test_logits_equal_keras_hub_on_a_ragged_batch(
    tmp_path, config, absent, for_keras_hub
):
    rng = np.random.default_rng(0)
    source = write_checkpoint(tmp_path / "hf", rng, config=config, absent=absent)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run).model
    rewrite_config(source, **for_keras_hub)
    ids, mask = ragged_batch(rng)
    expected = keras_hub_logits(source, ids, mask)
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-5)
    np.testing.assert_array_equal(ours[..., 0], -1e4)  # padding
    assert type(model.backbone).__name__ == "LlamaBackbone"
    assert model.name == "mistral"


def test_the_default_theta_is_transformers(tmp_path):
    """Without rope_theta the logits are those of transformers' default
    theta 1e4, not of Mistral's releases' 1e6 (a check that the comparison
    above can fail)."""
    rng = np.random.default_rng(0)
    source = write_checkpoint(tmp_path / "hf", rng, absent=("rope_theta",))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run).model
    rewrite_config(source, rope_theta=1e6)
    ids, mask = ragged_batch(rng)
    releases = keras_hub_logits(source, ids, mask)
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    assert np.abs(ours[mask][:, 1:] - releases[mask]).max() > 1e-3


def test_the_run_keeps_the_checkpoints_settings(tmp_path):
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(1),
        config={"eos_token_id": [2, 7]},
        absent=("rope_theta", "sliding_window"),  # 4096: longer than 32
    )
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    loaded = tfformer.load(run)
    backbone = loaded.model.backbone
    assert backbone.rope_max_wavelength == 1e4
    assert backbone.final_norm.epsilon == 1e-5
    block = backbone.decoder_blocks[1]
    assert block.rotary_max_wavelength == 1e4 and block.normalization == "rms"
    assert block.activation_dropout == 0.0
    assert tuple(block.self_attention.key_dense.kernel.shape) == (16, 8)  # 2 of 4
    assert loaded.config.model.activation_dropout == 0.0
    tokenizer = loaded.tokenizers["text"]
    assert (tokenizer.start_id, tokenizer.end_id, tokenizer.pad_id) == (2, 3, 0)
    assert loaded.directory.manifest.max_length == 32
    assert any(line.startswith("Mistral decoder: 2 layers") for line in said)
    assert any("eos_token_id lists [2, 7]" in line for line in said)


def test_greedy_generation_equals_keras_hubs_argmax(tmp_path, capsys):
    """`tfformer-predict` (KV-cached greedy decoding) continues a prompt of
    ids with the tokens a full keras-hub forward pass picks one at a time."""
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert_predict_continues_ids(run, keras_hub_backbone(source), capsys)


@pytest.mark.parametrize(
    "config, absent, message",
    [
        (
            {"sliding_window": 16},
            (),
            r"sliding_window must be null or at least max_position_embeddings "
            r"\(32\): tfformer's attention has no sliding window\. Received: "
            r"sliding_window=16$",
        ),
        (
            {"max_position_embeddings": 8192},
            ("sliding_window",),
            r"max_position_embeddings \(8192\).*Received: sliding_window=4096 "
            r"\(absent: Mistral's default\)",
        ),
        (
            {"sliding_window": "4096"},
            (),
            "sliding_window must be null or .*Received: sliding_window='4096'",
        ),
        ({"head_dim": 8}, (), r"head_dim must be hidden_size / num_attention"),
        ({}, ("num_key_value_heads",), r"multiple of num_key_value_heads \(8\)"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            (),
            "rope_scaling must be null.*yarn",
        ),
        ({"hidden_act": "gelu"}, (), r"hidden_act must be one of \['silu'\]"),
    ],
    ids=[
        "short_window",
        "default_window",
        "window_not_an_int",
        "head_dim",
        "default_key_value_heads",
        "rope_scaling",
        "hidden_act",
    ],
)
def test_what_tfformer_does_not_reproduce_is_refused(tmp_path, config, absent, message):
    source = write_checkpoint(
        tmp_path / "hf", np.random.default_rng(4), config=config, absent=absent
    )
    assert_refused(tmp_path, source, message)
