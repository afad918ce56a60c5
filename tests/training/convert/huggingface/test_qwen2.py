"""`tfformer-convert` on small random Qwen2 decoders in the Hugging Face
layout (`Qwen2ForCausalLM`: Llama's tensor names and shapes plus biases on
the query, key and value projections), checked against keras-hub's
`QwenBackbone` reading the same directory."""

import json

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


def qwen2_tensors(rng, sizes=SIZES):
    """Llama's tensors (tied embeddings) and a bias for every q, k and v
    projection, large enough to move the logits."""
    tensors = llama_tensors(rng, tie=True, sizes=sizes)
    d = sizes["hidden"]
    kv = sizes["kv"] * d // sizes["heads"]
    for i in range(sizes["layers"]):
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


# -- Qwen2's tokenizer and chat template ------------------------------------------

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
# Qwen2.5-Instruct's template without its tools and default system prompt.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def qwen2_text_checkpoint(path, rng):
    """A Qwen2 checkpoint with a Qwen2-style tokenizer.json (NFC, one digit
    a piece), ChatML's turn tokens and template: (directory, tokenizer)."""
    from tests.testing import END_OF_TEXT
    from tests.tfformer.preprocessing.test_bpe_tokenizer import qwen2_style_hf

    hf = qwen2_style_hf()
    hf.add_special_tokens([IM_START, IM_END])
    sizes = {**SIZES, "vocab": hf.get_vocab_size()}
    source = write_llama(path, rng, tensors=qwen2_tensors(rng, sizes), sizes=sizes)
    end = hf.token_to_id(END_OF_TEXT)
    overlay_config(
        source,
        QWEN2,
        {
            "vocab_size": sizes["vocab"],
            "bos_token_id": end,
            "eos_token_id": end,
            "max_position_embeddings": 96,  # room for a conversation
        },
        ("attention_bias", "mlp_bias"),
    )
    hf.save(str(source / "tokenizer.json"))
    settings = {"bos_token": None, "eos_token": IM_END, "chat_template": CHATML}
    (source / "tokenizer_config.json").write_text(json.dumps(settings))
    return source, hf


def test_qwen2_text_and_chat_equal_keras_hub_and_the_tokenizer(tmp_path, capsys):
    """With Qwen2's tokenizer.json the run takes and gives text: its ids are
    Hugging Face's (NFC first, one digit a piece, no start token), a prompt
    is continued with keras-hub's `QwenBackbone` greedy tokens, and a
    ChatML conversation is answered as keras-hub continues its rendered
    text, up to <|im_end|>."""
    from tests.training.convert.huggingface.testing import reference_greedy
    from tfformer.training.commands import predict as predict_cli

    source, hf = qwen2_text_checkpoint(tmp_path / "hf", np.random.default_rng(6))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("qwen2 pieces, NFC first" in line for line in said)
    assert any("text in and out" in line for line in said)
    loaded = tfformer.load(run)
    texts = ["the cat 2024", "cafe\u0301 <\u0338 A\u030a\u0323", "日本\n\n x"]
    ids = loaded.tokenizers["text"].tokenize(texts).to_list()
    assert [[i - 1 for i in row] for row in ids] == [hf.encode(t).ids for t in texts]
    reference = keras_hub_backbone(source)
    end = hf.token_to_id("<|endoftext|>")
    prompt = "naïve cafe\u0301 2024"
    greedy = reference_greedy(reference, hf.encode(prompt).ids, 6, end=end)
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt]) == 0
    assert capsys.readouterr().out == hf.decode(greedy) + "\n"
    messages = [{"role": "user", "content": "the cat sat"}]
    rendered = f"{IM_START}user\nthe cat sat{IM_END}\n{IM_START}assistant\n"
    assert loaded.chat_template.render(messages) == rendered
    chat_prompt = hf.encode(rendered).ids
    reply = reference_greedy(
        reference, chat_prompt, 6, end=[end, hf.token_to_id(IM_END)]
    )
    assert loaded.chat(messages, max_new_tokens=6) == hf.decode(
        reply[len(chat_prompt) :]
    )
