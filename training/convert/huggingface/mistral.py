"""Mistral decoders (`model_type` "mistral", `MistralForCausalLM`) into a
`causal_lm` run on a `LlamaBackbone`: Llama's architecture and tensor
names, with Mistral's defaults for what config.json leaves out, and a
sliding attention window, which tfformer's attention does not have: a
window shorter than the context is refused (null, or one at least as long
as the context, attends as full attention does)."""

from tfformer.errors import InputError
from tfformer.training.convert.huggingface import llama
from tfformer.training.convert.huggingface.checkpoint import config_value

MODEL_TYPES = ("mistral",)

# transformers' MistralConfig defaults for keys config.json may leave out
# (rope_theta=10000.0 in its 4.x signature), so a converted run computes what
# Hugging Face computes from the same directory. Mistral's releases write
# rope_theta (1e6 since v0.2); only a hand-written config lacks it.
DEFAULTS = {"num_key_value_heads": 8, "rope_theta": 10000.0, "sliding_window": 4096}


def convert(source, config, staging, progress):
    """A Mistral decoder into a `causal_lm` run (text in and out with a
    tokenizer tfformer reproduces, token ids otherwise): Llama's conversion
    of config.json with Mistral's defaults."""
    window = config.get("sliding_window", DEFAULTS["sliding_window"])
    context = config_value(config, "max_position_embeddings", int)
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < context
    ):
        raise InputError(
            "config.json: sliding_window must be null or at least "
            f"max_position_embeddings ({context}): tfformer's attention has no "
            f"sliding window. Received: sliding_window={window!r}"
            + ("" if "sliding_window" in config else " (absent: Mistral's default)")
        )
    config = {**DEFAULTS, **config}
    return llama.convert(source, config, staging, progress, family="Mistral")
