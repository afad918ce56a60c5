"""Llama-style decoders (`model_type` "llama", `LlamaForCausalLM`:
RMSNorm, SwiGLU, rotary positions with Llama 3.1's frequency scaling or
none, grouped-query attention) into a `causal_lm` run on a
`LlamaBackbone`: text in and out when the directory's `tokenizer.json` is
a byte-level BPE tfformer reproduces (Llama 3's) or its `tokenizer.model` a
SentencePiece BPE model it reproduces (Llama 2's), token ids otherwise (the
reason said); a causal_lm config's `model.init_from` fine-tunes it."""

import os

from tfformer.errors import InputError
from tfformer.layers.rotary_embedding import check_frequency_scaling
from tfformer.models import GemmaBackbone, LlamaBackbone
from tfformer.training.convert.huggingface import decoders
from tfformer.training.convert.huggingface.chat import chat_template
from tfformer.training.convert.huggingface.checkpoint import (
    Weights,
    assign,
    attention_sizes,
    check_multiple,
    config_flag,
    config_value,
    finite_number,
    refuse_unused,
)
from tfformer.training.convert.huggingface.tokenizers import (
    UnsupportedTokenizer,
    byte_level_bpe_tokenizer,
    sentencepiece_tokenizer,
)

MODEL_TYPES = ("llama",)


def llama_sizes(config, *, own_head_dim=False, activations=("silu",)):
    """`LlamaBackbone` keyword arguments from a Llama config.json (plus
    `vocabulary_size`, in the model's ids: one more than the checkpoint's).
    With `own_head_dim` (Qwen3, Gemma), config.json's `head_dim` may differ
    from `hidden_size / num_attention_heads`; `hidden_act` must be one of
    `activations` (the backbone fixes the function; None: not read)."""
    head_dim = config.get("head_dim")
    if own_head_dim and head_dim is not None:
        heads = config_value(config, "num_attention_heads", int)
        hidden = config_value(config, "hidden_size", int)
        head_dim = config_value(config, "head_dim", int)
        if head_dim % 2:
            raise InputError(
                f"config.json: head_dim must be even (rotary positions). "
                f"Received: {head_dim!r}"
            )
    else:
        hidden, heads = attention_sizes(config)
        if head_dim is not None and head_dim != hidden // heads:
            raise InputError(
                "config.json: head_dim must be hidden_size / num_attention_heads "
                f"({hidden // heads}). Received: {head_dim!r}"
            )
        head_dim = None
    kv_heads = config_value(config, "num_key_value_heads", int, default=heads)
    check_multiple("num_attention_heads", heads, "num_key_value_heads", kv_heads)
    act = config.get("hidden_act", activations[0] if activations else None)
    if activations is not None and act not in activations:
        raise InputError(
            f"config.json: hidden_act must be one of {list(activations)}. "
            f"Received: {act!r}"
        )
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key, False):
            raise InputError(
                f"config.json: {key} must be false (tfformer's Llama has no "
                f"biases). Received: {config[key]!r}"
            )
    rope = config.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise InputError(
            f"config.json: rope_parameters must be an object. Received: {rope!r}"
        )
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    # NaN (which Python's json reads) and integers past float's range fail.
    if (
        isinstance(theta, bool)
        or not isinstance(theta, int | float)
        or not finite_number(theta)
        or theta <= 0
    ):
        raise InputError(
            f"config.json: rope_theta must be positive and finite. Received: {theta!r}"
        )
    return {
        "vocabulary_size": config_value(config, "vocab_size", int) + decoders.ID_OFFSET,
        "num_layers": config_value(config, "num_hidden_layers", int),
        "hidden_dim": hidden,
        "num_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_dim": config_value(config, "intermediate_size", int),
        "max_sequence_length": config_value(config, "max_position_embeddings", int),
        "layer_norm_epsilon": float(
            config_value(config, "rms_norm_eps", (int, float), default=1e-6)
        ),
        "rope_max_wavelength": float(theta),
        "rope_scaling": rope_scaling(config),
        "head_dim": head_dim,
        "tie_embeddings": config_flag(config, "tie_word_embeddings", False),
    }


def rope_scaling(config):
    """config.json's scaling of the rotary frequencies: None (plain rotary
    positions) or Llama 3.1's, as `LlamaBackbone(rope_scaling=...)` takes it.
    Read from `rope_scaling` (transformers 4) or `rope_parameters`
    (transformers 5, which also holds `rope_theta`); any other kind of
    scaling (linear, dynamic, yarn, ...) is refused, naming it."""
    key, scaling = "rope_scaling", config.get("rope_scaling")
    parameters = config.get("rope_parameters")
    if scaling is None and isinstance(parameters, dict):
        key, scaling = "rope_parameters", parameters
    if isinstance(scaling, dict):
        # transformers writes rope_theta beside the scaling in either dict.
        scaling = {k: v for k, v in scaling.items() if k != "rope_theta"}
    if not scaling:
        return None
    kind = None
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default" and set(scaling) <= {"rope_type", "type"}:
        return None
    if kind != "llama3":
        raise InputError(
            f"config.json: {key} must be null, default or of rope_type "
            f"'llama3' (Llama 3.1's; linear, dynamic, yarn and longrope "
            f"scaling are not supported). Received: {scaling!r}"
        )
    scaling = {k: v for k, v in scaling.items() if k != "type"}
    return check_frequency_scaling(
        {**scaling, "rope_type": "llama3"}, f"config.json: {key}"
    )


def load_llama(model, weights, sizes, norm_offset=0.0):
    """Copies a Hugging Face Llama's tensors (and, with `qkv_bias`, Qwen2's
    query, key and value biases) into a `CausalLM` on a `LlamaBackbone`;
    each norm's scale plus `norm_offset` (Gemma's 1 + w)."""
    d, inner = sizes["hidden_dim"], sizes["intermediate_dim"]
    head_dim = sizes.get("head_dim") or d // sizes["num_heads"]
    q, kv = sizes["num_heads"] * head_dim, sizes["num_key_value_heads"] * head_dim
    decoders.load_token_embeddings(model, weights, "embed_tokens.weight", sizes)
    for i, block in enumerate(model.backbone.decoder_blocks):
        attention = block.self_attention
        layer = f"layers.{i}"
        for part, dense, units in (
            ("q", attention.query_dense, q),
            ("k", attention.key_dense, kv),
            ("v", attention.value_dense, kv),
        ):
            name = f"{layer}.self_attn.{part}_proj.weight"
            assign(dense.kernel, weights(name, (units, d)).T, name)
            if sizes.get("qkv_bias"):
                name = f"{layer}.self_attn.{part}_proj.bias"
                assign(dense.bias, weights(name, (units,)), name)
        name = f"{layer}.self_attn.o_proj.weight"
        assign(attention.output_dense.kernel, weights(name, (d, q)).T, name)
        if sizes.get("qk_norm"):
            for part, norm in (("q", attention.query_norm), ("k", attention.key_norm)):
                name = f"{layer}.self_attn.{part}_norm.weight"
                assign(norm.gamma, weights(name, (head_dim,)), name)
        ffn = block.ffn
        for part, dense, shape in (
            ("gate", ffn.gate_dense, (inner, d)),
            ("up", ffn.intermediate_dense, (inner, d)),
            ("down", ffn.output_dense, (d, inner)),
        ):
            name = f"{layer}.mlp.{part}_proj.weight"
            assign(dense.kernel, weights(name, shape).T, name)
        for norm, target in (
            ("input_layernorm", block.self_attention_norm),
            ("post_attention_layernorm", block.ffn_norm),
        ):
            name = f"{layer}.{norm}.weight"
            gamma = weights(name, (d,)).astype("float32") + norm_offset
            assign(target.gamma, gamma, name)
    # (1 + w in float32, as Hugging Face computes it, for float16 weights too.)
    final = weights("norm.weight", (d,)).astype("float32") + norm_offset
    assign(model.backbone.final_norm.gamma, final, "norm.weight")


def convert(
    source,
    config,
    staging,
    progress,
    *,
    family="Llama",
    qkv_bias=False,
    qk_norm=False,
    gemma=False,
):
    """A Llama-style decoder (`LlamaForCausalLM`, or another `family` of the
    same architecture: with biases on the query, key and value projections
    when `qkv_bias` (Qwen2), with normalized query and key heads of their
    own `head_dim` when `qk_norm` (Qwen3), or Gemma's GeGLU, scaled
    embeddings, (1 + w) norms and own `head_dim` when `gemma`) into a
    `causal_lm` run: text in and out with a Llama 3-style tokenizer, token
    ids otherwise."""
    sizes = {
        **llama_sizes(
            config,
            own_head_dim=qk_norm or gemma,
            activations=None if gemma else ("silu",),
        ),
        "qkv_bias": qkv_bias,
        "qk_norm": qk_norm,
    }
    vocab = sizes["vocabulary_size"] - decoders.ID_OFFSET
    start = decoders.special_id(config, "bos_token_id", 1, vocab, progress)
    end = decoders.special_id(config, "eos_token_id", 2, vocab, progress)
    tokenizer, kind = text_tokenizer(source, config, vocab, progress)
    if tokenizer is None:
        tokenizer, kind = decoders.token_id_tokenizer(sizes, start, end), "ids"
    weights = Weights.open(source, "embed_tokens.weight", ("model.", ""))
    backbone = GemmaBackbone if gemma else LlamaBackbone
    model = decoders.causal_lm(backbone, sizes, family.lower())
    load_llama(model, weights, sizes, norm_offset=1.0 if gemma else 0.0)
    offset = decoders.ID_OFFSET
    progress(
        f"{family} decoder: {sizes['num_layers']} layers, width "
        f"{sizes['hidden_dim']}, {sizes['num_heads']} heads "
        f"({sizes['num_key_value_heads']} key/value"
        + (", biased query/key/value" if qkv_bias else "")
        + (", normalized query/key" if qk_norm else "")
        + (", GeGLU, embeddings scaled by sqrt(width), tied" if gemma else "")
        + (f", heads of {sizes['head_dim']}" if sizes["head_dim"] else "")
        + f"), {vocab} tokens, context "
        f"{sizes['max_sequence_length']}"
        + (
            f", Llama 3.1 rotary scaling (factor {sizes['rope_scaling']['factor']:g})"
            if sizes["rope_scaling"]
            else ""
        )
        + (
            "; text in and out (the model's ids are the checkpoint's plus one, "
            "id 0 padding)"
            if kind != "ids"
            else "; token ids in and out (the checkpoint's; the model's are one "
            "higher, id 0 padding)"
        )
        + f", start {start - offset}, end {end - offset}"
    )
    unused = [n for n in weights.checkpoint.unused() if "rotary_emb" not in n]
    refuse_unused(source, unused)
    chat = None
    if kind in ("bpe", "sentencepiece"):
        chat = chat_template(source, config, tokenizer, progress)
    ends = decoders.end_ids(source, config, 2, vocab)
    return decoders.write_decoder_run(
        staging, model, tokenizer, kind, sizes, chat, ends
    )


def text_tokenizer(source, config, vocab, progress):
    """(tokenizer, kind) of the checkpoint's text: its byte-level BPE (Llama
    3's, Qwen2's, "bpe") or its SentencePiece BPE (`tokenizer.model`: Llama 2's,
    Gemma's, "sentencepiece"), or (None, None) when the directory has none
    that tfformer reproduces (another normalizer or pattern, ...): the run then
    reads and writes token ids, and `progress` says why."""
    try:
        tokenizer = byte_level_bpe_tokenizer(
            source, config, vocab, progress, (1, 2), gpt2_files=False
        )
        if tokenizer is not None:
            return tokenizer, "bpe"
    except UnsupportedTokenizer as e:
        if not os.path.isfile(os.path.join(source, "tokenizer.model")):
            progress(f"{e}\nThe tokenizer is not converted.")
            return None, None
        progress(f"{e}\nReading tokenizer.model instead.")
    try:
        tokenizer = sentencepiece_tokenizer(source, config, vocab, progress, (1, 2))
    except UnsupportedTokenizer as e:
        progress(f"{e}\nThe tokenizer is not converted.")
        return None, None
    return (tokenizer, "sentencepiece") if tokenizer is not None else (None, None)
