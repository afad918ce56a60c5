"""Qwen3 decoders (`model_type` "qwen3", `Qwen3ForCausalLM`) into a
`causal_lm` run on a `LlamaBackbone(qk_norm=True, head_dim=...)`: Llama's
architecture and tensor names, with each query and key head RMS-normalized
before the rotation (`q_norm`, `k_norm`) and heads of config.json's own
`head_dim` (128 in Qwen3-0.6B, whose width is 1024 over 16 heads).
Sliding-window attention is refused when it is on, as for Qwen2."""

from tfformer.training.convert.huggingface import llama, qwen2

MODEL_TYPES = ("qwen3",)

# transformers' Qwen3Config defaults for keys config.json may leave out.
DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "head_dim": 128,
    "attention_bias": False,
}


def convert(source, config, staging, progress):
    """A Qwen3 decoder into a `causal_lm` run (text in and out with Qwen's
    tokenizer.json, token ids otherwise): Llama's conversion with normalized
    query and key heads."""
    qwen2.refuse_sliding_windows(config)
    config = {**DEFAULTS, **config}
    return llama.convert(
        source, config, staging, progress, family="Qwen3", qk_norm=True
    )
