"""`tfformer-convert` on small random Qwen3 decoders in the Hugging Face
layout (`Qwen3ForCausalLM`: Llama's tensor names plus `q_norm` and `k_norm`
per layer, and heads of their own `head_dim`), checked against keras-hub's
`Qwen3Backbone` reading the same directory."""

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.test_llama import (
    SIZES,
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
    changed,
    quiet,
)
from tfformer.training.convert import convert

pytest.importorskip("safetensors")

# 4 heads of 6 features over a width of 16 (not 16 / 4), 2 key/value heads.
HEAD_DIM = 6
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "head_dim": HEAD_DIM,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 2,
    "rope_theta": 1e6,
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "tie_word_embeddings": True,
}


def qwen3_tensors(rng, sizes=SIZES):
    """Llama's tensors (tied) with projections for heads of HEAD_DIM, and
    per-layer query and key norm scales far from 1."""
    tensors = own_head_tensors(rng, HEAD_DIM, sizes)
    for i in range(SIZES["layers"]):
        layer = f"model.layers.{i}.self_attn"
        for part in ("q", "k"):
            scale = rng.uniform(0.2, 3.0, size=(HEAD_DIM,))
            tensors[f"{layer}.{part}_norm.weight"] = scale
    return {name: np.asarray(t, "float32") for name, t in tensors.items()}


def write_checkpoint(path, rng, *, config=None, tensors=None):
    """A Qwen3ForCausalLM checkpoint as `save_pretrained` writes it."""
    tensors = qwen3_tensors(rng) if tensors is None else tensors
    source = write_llama(path, rng, tensors=tensors)
    return overlay_config(source, QWEN3, config, ("mlp_bias",))


def keras_hub_backbone(source):
    keras_hub = pytest.importorskip("keras_hub")
    return keras_hub.models.Qwen3Backbone.from_preset(str(source))


def keras_hub_logits(source, ids, mask):
    return backbone_logits(keras_hub_backbone(source), ids, mask)


def test_logits_equal_keras_hub_on_a_ragged_batch(tmp_path):
    rng = np.random.default_rng(0)
    tensors = qwen3_tensors(rng)
    source = write_checkpoint(tmp_path / "hf", rng, tensors=tensors)
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    model = tfformer.load(run).model
    ids, mask = ragged_batch(rng)
    expected = keras_hub_logits(source, ids, mask)
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    # Within the 1e-4: float32 rounding, amplified by norm scales up
    # to 3, differs by up to 4e-5 between the two implementations.
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-4)
    np.testing.assert_array_equal(ours[..., 0], -1e4)  # padding
    assert model.name == "qwen3"
    backbone = model.backbone
    assert (backbone.head_dim, backbone.qk_norm) == (HEAD_DIM, True)
    attention = backbone.decoder_blocks[0].self_attention
    assert tuple(attention.key_dense.kernel.shape) == (16, 2 * HEAD_DIM)
    assert attention.query_norm.epsilon == 1e-6
    assert any(
        "Qwen3 decoder: 2 layers" in line and "normalized query/key" in line
        for line in said
    )
    # The norms matter: with unit scales the logits are another model's.
    for name in tensors:
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            tensors[name] = np.ones_like(tensors[name])
    unit = write_checkpoint(tmp_path / "unit", rng, tensors=tensors)
    other = tfformer.load(convert(str(unit), str(tmp_path / "u"), progress=quiet))
    plain = np.asarray(other.model({"token_ids": np.where(mask, ids + 1, 0)}))
    assert np.abs(plain[mask][:, 1:] - expected[mask]).max() > 1e-2


def test_greedy_generation_equals_keras_hubs_argmax(tmp_path, capsys):
    """`tfformer-predict` (KV-cached greedy decoding: the cache holds the
    normalized, rotated keys) continues a prompt of ids with the tokens a
    full keras-hub forward pass picks one at a time."""
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert_predict_continues_ids(run, keras_hub_backbone(source), capsys)


@pytest.mark.parametrize(
    "config, change, message",
    [
        (
            {"use_sliding_window": True},
            {},
            r"use_sliding_window must be false.*Received: use_sliding_window=True",
        ),
        ({"head_dim": 7}, {}, r"head_dim must be even .*Received: 7"),
        (
            {"head_dim": 8},
            {},
            r"'model.layers.0.self_attn.q_proj.weight' has shape \[24, 16\]; "
            r"the config implies \[32, 16\]",
        ),
        (
            {},
            {"drop": "model.layers.1.self_attn.k_norm.weight"},
            "no tensor 'model.layers.1.self_attn.k_norm.weight'",
        ),
        ({"attention_bias": True}, {}, "attention_bias must be false"),
    ],
    ids=["sliding_window", "odd_head_dim", "head_dim", "missing_norm", "bias"],
)
def test_what_tfformer_does_not_reproduce_is_refused(tmp_path, config, change, message):
    rng = np.random.default_rng(4)
    tensors = changed(qwen3_tensors(rng), change, np.ones((4,), "float32"))
    source = write_checkpoint(tmp_path / "hf", rng, config=config, tensors=tensors)
    assert_refused(tmp_path, source, message)


def test_qwen3_with_qwens_tokenizer_takes_text_as_keras_hub_continues_it(
    tmp_path, capsys
):
    """Qwen3 ships Qwen2's tokenizer.json: the run takes and gives text, a
    prompt continued with keras-hub's `Qwen3Backbone` greedy tokens."""
    import json

    from tests.testing import END_OF_TEXT
    from tests.tfformer.preprocessing.test_bpe_tokenizer import qwen2_style_hf
    from tests.training.convert.huggingface.testing import reference_greedy
    from tfformer.training.commands import predict as predict_cli

    hf = qwen2_style_hf()
    rng = np.random.default_rng(7)
    sizes = {**SIZES, "vocab": hf.get_vocab_size()}
    source = write_llama(
        tmp_path / "hf", rng, tensors=qwen3_tensors(rng, sizes), sizes=sizes
    )
    end = hf.token_to_id(END_OF_TEXT)
    overlay_config(
        source,
        QWEN3,
        {"vocab_size": sizes["vocab"], "bos_token_id": end, "eos_token_id": end},
        ("mlp_bias",),
    )
    hf.save(str(source / "tokenizer.json"))
    (source / "tokenizer_config.json").write_text(json.dumps({"bos_token": None}))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("qwen2 pieces, NFC first" in line for line in said)
    prompt = "naïve cafe\u0301 2024"
    greedy = reference_greedy(keras_hub_backbone(source), hf.encode(prompt).ids, 6, end)
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt]) == 0
    assert capsys.readouterr().out == hf.decode(greedy) + "\n"
