"""Qwen2 and Qwen2.5 decoders (`model_type` "qwen2", `Qwen2ForCausalLM`)
into a `causal_lm` run on a `LlamaBackbone(qkv_bias=True)`: Llama's
architecture and tensor names plus biases on the query, key and value
projections (not on the output projection or the MLP). Qwen2's optional
sliding-window attention, which tfformer's attention does not have, is
refused when it is on."""

from tfformer.errors import InputError
from tfformer.training.convert.huggingface import llama

MODEL_TYPES = ("qwen2",)

# transformers' Qwen2Config defaults for keys config.json may leave out, so
# a converted run computes what Hugging Face computes from the directory.
DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False}


def refuse_sliding_windows(config):
    """ValueError naming `use_sliding_window` or `layer_types` when either
    turns on sliding-window attention, which tfformer's attention has not."""
    if config.get("use_sliding_window", False) is not False:
        raise InputError(
            "config.json: use_sliding_window must be false: tfformer's attention "
            "has no sliding window. Received: use_sliding_window="
            f"{config['use_sliding_window']!r}"
        )
    layer_types = config.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list)
        or any(t != "full_attention" for t in layer_types)
    ):
        raise InputError(
            "config.json: layer_types must all be 'full_attention' (tfformer's "
            f"attention has no sliding window). Received: {layer_types!r}"
        )


def convert(source, config, staging, progress):
    """A Qwen2 decoder into a `causal_lm` run (text in and out with Qwen's
    tokenizer.json, token ids otherwise): Llama's conversion with biased
    query/key/value projections."""
    refuse_sliding_windows(config)
    config = {**DEFAULTS, **config}
    return llama.convert(
        source, config, staging, progress, family="Qwen2", qkv_bias=True
    )
