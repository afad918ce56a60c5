"""GPT-2 (`model_type` "gpt2", `GPT2LMHeadModel` or `GPT2Model`) into a
`causal_lm` run on a `GPTBackbone`: text in and out with its byte-level BPE
tokenizer (`tfformer.preprocessing.bpe_tokenizer`), or the checkpoint's
token ids when the directory has no tokenizer files; a causal_lm config's
`model.init_from` fine-tunes it."""

import re

from tfformer.errors import InputError
from tfformer.models import GPTBackbone
from tfformer.training.convert.huggingface import decoders
from tfformer.training.convert.huggingface.chat import chat_template
from tfformer.training.convert.huggingface.checkpoint import (
    Weights,
    assign,
    attention_sizes,
    config_choice,
    config_flag,
    config_value,
    refuse_unused,
)
from tfformer.training.convert.huggingface.tokenizers import (
    byte_level_bpe_tokenizer,
)

MODEL_TYPES = ("gpt2",)

# GPT-2's <|endoftext|>: its bos and eos when config.json names none.
END_OF_TEXT_ID = 50256

# config.json's activation_function: the tanh form ("gelu_new", GPT-2's) or
# the exact one.
GPT2_ACTIVATIONS = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "gelu": "gelu",
    "relu": "relu",
}


def gpt2_sizes(config):
    """`gpt_decoder` keyword arguments from a GPT-2 config.json (in the
    model's ids: one more token than the checkpoint's)."""
    hidden, heads = attention_sizes(config, "n_embd", "n_head")
    act = config_choice(config, "activation_function", GPT2_ACTIVATIONS, "gelu_new")
    for key, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if config.get(key, supported) is not supported:
            raise InputError(
                f"config.json: {key} must be {str(supported).lower()} (tfformer's "
                f"GPT-2 attention). Received: {config[key]!r}"
            )
    inner = config.get("n_inner")
    if inner is None:
        inner = 4 * hidden
    return {
        "vocabulary_size": config_value(config, "vocab_size", int) + decoders.ID_OFFSET,
        "num_layers": config_value(config, "n_layer", int),
        "hidden_dim": hidden,
        "num_heads": heads,
        "intermediate_dim": config_value({"n_inner": inner}, "n_inner", int),
        "max_sequence_length": config_value(config, "n_positions", int),
        "activation": GPT2_ACTIVATIONS[act],
        "layer_norm_epsilon": float(
            config_value(config, "layer_norm_epsilon", (int, float), default=1e-5)
        ),
        "tie_embeddings": config_flag(config, "tie_word_embeddings", True),
    }


def load_gpt2(model, weights, sizes):
    """Copies a Hugging Face GPT-2's tensors into a `gpt_decoder` whose ids
    are the checkpoint's plus one. Conv1D weights are (in, out) already."""
    d, inner = sizes["hidden_dim"], sizes["intermediate_dim"]
    decoders.load_token_embeddings(model, weights, "wte.weight", sizes)
    name = "wpe.weight"
    assign(
        model.backbone.token_embedding.position_embedding.position_embeddings,
        weights(name, (sizes["max_sequence_length"], d)),
        name,
    )

    def norm(target, name):
        assign(target.gamma, weights(f"{name}.weight", (d,)), f"{name}.weight")
        assign(target.beta, weights(f"{name}.bias", (d,)), f"{name}.bias")

    def conv1d(dense, name, shape):
        assign(dense.kernel, weights(f"{name}.weight", shape), f"{name}.weight")
        assign(dense.bias, weights(f"{name}.bias", shape[1:]), f"{name}.bias")

    for i, block in enumerate(model.backbone.decoder_blocks):
        attention = block.self_attention
        layer = f"h.{i}"
        norm(block.self_attention_norm, f"{layer}.ln_1")
        name = f"{layer}.attn.c_attn"
        kernel = weights(f"{name}.weight", (d, 3 * d))
        bias = weights(f"{name}.bias", (3 * d,))
        for k, dense in enumerate(
            (attention.query_dense, attention.key_dense, attention.value_dense)
        ):
            part = slice(k * d, (k + 1) * d)
            assign(dense.kernel, kernel[:, part], f"{name}.weight")
            assign(dense.bias, bias[part], f"{name}.bias")
        conv1d(attention.output_dense, f"{layer}.attn.c_proj", (d, d))
        norm(block.ffn_norm, f"{layer}.ln_2")
        conv1d(block.ffn.intermediate_dense, f"{layer}.mlp.c_fc", (d, inner))
        conv1d(block.ffn.output_dense, f"{layer}.mlp.c_proj", (inner, d))
    norm(model.backbone.final_norm, "ln_f")


def convert(source, config, staging, progress):
    """A GPT-2 (`GPT2LMHeadModel` or `GPT2Model`) into a `causal_lm` run:
    text in and out with its byte-level BPE tokenizer, or the checkpoint's
    token ids when the directory has no tokenizer files."""
    sizes = gpt2_sizes(config)
    vocab = sizes["vocabulary_size"] - decoders.ID_OFFSET
    start = decoders.special_id(config, "bos_token_id", END_OF_TEXT_ID, vocab, progress)
    end = decoders.special_id(config, "eos_token_id", END_OF_TEXT_ID, vocab, progress)
    tokenizer = byte_level_bpe_tokenizer(
        source, config, vocab, progress, END_OF_TEXT_ID
    )
    kind = "bpe"
    if tokenizer is None:
        progress("No tokenizer.json or vocab.json: the run reads and writes token ids.")
        tokenizer = decoders.token_id_tokenizer(sizes, start, end)
        kind = "ids"
    weights = Weights.open(source, "wte.weight", ("transformer.", ""))
    model = decoders.causal_lm(
        GPTBackbone, sizes, "gpt2", position="learned", normalize_first=True
    )
    load_gpt2(model, weights, sizes)
    progress(
        f"GPT-2 decoder: {sizes['num_layers']} layers, width {sizes['hidden_dim']}, "
        f"{sizes['num_heads']} heads, {vocab} tokens, context "
        f"{sizes['max_sequence_length']} (the model's ids are the checkpoint's plus "
        f"one, id 0 padding), end {end - decoders.ID_OFFSET}"
    )
    # Older checkpoints keep each layer's causal-mask buffers.
    buffer = re.compile(r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias")
    unused = [n for n in weights.checkpoint.unused() if not buffer.fullmatch(n)]
    refuse_unused(source, unused)
    chat = chat_template(source, config, tokenizer, progress) if kind == "bpe" else None
    ends = decoders.end_ids(source, config, END_OF_TEXT_ID, vocab)
    return decoders.write_decoder_run(
        staging, model, tokenizer, kind, sizes, chat, ends
    )
