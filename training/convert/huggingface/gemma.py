"""Gemma decoders (`model_type` "gemma", `GemmaForCausalLM`: Gemma 1 and
CodeGemma) into a `causal_lm` run on a `GemmaBackbone`: Llama's tensor
names, with a GeGLU feed-forward network (GELU's tanh form, which
transformers 4.x's GemmaMLP uses when `hidden_activation` is null, whatever
`hidden_act` says; `hidden_act` is not read), token embeddings scaled by
sqrt(hidden_size), RMSNorms that multiply by 1 + w (the converted gammas
are 1 + w), heads of config.json's `head_dim` and the token embedding as
the output projection. Gemma 2 and 3 (soft-capping, sliding windows, more
norms) have other model types and are not converted. Gemma's tokenizer is
SentencePiece (`tokenizer.model`): read as Llama 2's is, text in and out
when tfformer reproduces the model, token ids otherwise (a prompt starts
with Gemma's `<bos>`, id 2, as its tokenizer puts it; `GemmaConfig`'s bos 2
and eos 1 when config.json leaves them out)."""

from tfformer.errors import InputError
from tfformer.training.convert.huggingface import llama

MODEL_TYPES = ("gemma",)

# transformers' GemmaConfig defaults for keys config.json may leave out.
DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "head_dim": 256,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "bos_token_id": 2,
    "eos_token_id": 1,
}


def convert(source, config, staging, progress):
    """A Gemma decoder into a `causal_lm` run that reads and writes token
    ids: Llama's conversion with Gemma's feed-forward, embedding scale and
    norms."""
    config = {**DEFAULTS, **config}
    # transformers' Gemma uses hidden_activation, or GELU's tanh form when it
    # is null (whatever hidden_act says, with a warning).
    activation = config.get("hidden_activation")
    if activation not in (None, "gelu_pytorch_tanh"):
        raise InputError(
            "config.json: hidden_activation must be null or 'gelu_pytorch_tanh' "
            f"(Gemma's GeGLU). Received: {activation!r}"
        )
    if config["tie_word_embeddings"] is not True:
        raise InputError(
            "config.json: tie_word_embeddings must be true (Gemma's output "
            "projection is its token embedding). Received: "
            f"{config['tie_word_embeddings']!r}"
        )
    return llama.convert(source, config, staging, progress, family="Gemma", gemma=True)
