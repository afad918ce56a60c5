"""Writes a tiny Llama 3-style chat checkpoint in Hugging Face's layout,
with random weights, for docs/llm_on_device.md: `config.json`,
`model.safetensors`, Llama 3's kind of `tokenizer.json` (a byte-level BPE
trained here on a few sentences, cut with Llama 3's pattern, with its
special tokens) and a `tokenizer_config.json` holding Meta's Llama 3
Instruct chat template. Its replies are noise: it exists to walk the path
from a checkpoint to a chat on a device without downloading one.

    python3 docs/examples/tiny_llama3_chat.py checkpoints/tiny-llama3

Needs numpy, safetensors and tokenizers (the test extras install them).
"""

import json
import os
import sys

import numpy as np

# Llama 3's pre-tokenizer pattern (its tokenizer.json's Split).
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
# Meta-Llama-3-8B-Instruct's chat template.
TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
SENTENCES = [
    "The cat sat on the mat.",
    "Be brief, and answer in one line.",
    "What is a transformer? It is a neural network built on attention.",
    "Phones run small models: 2024, 2025 and 2026.",
]


def tokenizer():
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    hf = Tokenizer(models.BPE(ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(SENTENCES * 20, trainer)
    begin = hf.token_to_id(SPECIAL[0])
    hf.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL[0]} $A", special_tokens=[(SPECIAL[0], begin)]
    )
    return hf


def main(out):
    from safetensors.numpy import save_file

    os.makedirs(out, exist_ok=False)
    hf = tokenizer()
    vocab, d, inner, layers, heads, kv = hf.get_vocab_size(), 32, 64, 2, 4, 2
    rng = np.random.default_rng(0)

    def normal(*shape):
        return (0.3 * rng.normal(size=shape)).astype("float32")

    tensors = {"model.embed_tokens.weight": normal(vocab, d)}
    tensors["model.norm.weight"] = np.ones(d, "float32")
    for i in range(layers):
        layer = f"model.layers.{i}"
        for name, shape in {
            "self_attn.q_proj": (d, d),
            "self_attn.k_proj": (kv * d // heads, d),
            "self_attn.v_proj": (kv * d // heads, d),
            "self_attn.o_proj": (d, d),
            "mlp.gate_proj": (inner, d),
            "mlp.up_proj": (inner, d),
            "mlp.down_proj": (d, inner),
        }.items():
            tensors[f"{layer}.{name}.weight"] = normal(*shape)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"{layer}.{norm}.weight"] = np.ones(d, "float32")
    tensors["lm_head.weight"] = normal(vocab, d)
    save_file(tensors, os.path.join(out, "model.safetensors"), {"format": "pt"})
    ids = {token: hf.token_to_id(token) for token in SPECIAL}
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": d,
        "intermediate_size": inner,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "hidden_act": "silu",
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "bos_token_id": ids["<|begin_of_text|>"],
        "eos_token_id": [ids["<|end_of_text|>"], ids["<|eot_id|>"]],
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    hf.save(os.path.join(out, "tokenizer.json"))
    settings = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "chat_template": TEMPLATE,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(settings, f, indent=1)
    print(f"Wrote {out}: a random Llama 3-style chat checkpoint, {vocab} tokens.")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_llama3_chat.py OUT_DIRECTORY")
    main(sys.argv[1])
