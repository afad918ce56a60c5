"""The quality gate of a text generator (`tfformer.export.quality`): nats
per token of the quantized and float32 models, teacher-forced through the
reference runtime's `decode` signature on held-out text, and the share of
positions where their most likely next token agrees.

The text: the run's held-out tail (the last `data.holdout_fraction` of
`data.text_path`, as training cuts it), or a text file the user passes (a
converted checkpoint has none).
"""

import os

import numpy as np

from tfformer.errors import InputError
from tfformer.export.quality import read_bytes

# Held-out tokens scored per model: windows of at most 64 tokens.
QUALITY_TOKENS = 512


def heldout_text(run, path=None):
    """(text, where it comes from): the file `path`, or the run's held-out
    tail; (None, why not) when there is neither."""
    if path is None:
        data = run.read_config().get("data", {})
        source, fraction = data.get("text_path"), data.get("holdout_fraction", 0.1)
        if not source or not os.path.isfile(source):
            return None, (
                "the run has no held-out text (data.text_path "
                f"{source!r}); pass --quality-data FILE"
            )
        text = read_bytes(source, "data.text_path").decode("utf-8", "replace")
        return text[int(len(text) * (1 - fraction)) :], f"the held-out tail of {source}"
    return read_bytes(path).decode("utf-8", "replace"), str(path)


def heldout_ids(task_run, text, where):
    """The causal-LM run's token ids of `text` (its first 50,000
    characters: more than QUALITY_TOKENS of any tokenizer's), or ValueError
    naming `where` when there are fewer than 2."""
    from tfformer.export.tasks.causal_lm.run import core_tokenizer

    ids = core_tokenizer(task_run).tokenize([text[:50_000]])[0].numpy().tolist()
    if len(ids) < 2:
        raise InputError(f"{where} holds fewer than 2 tokens to measure on.")
    return ids


def score(model_path, ids, window):
    """(nats per token, each position's most likely next token) of the
    TFLite generator `model_path` on `ids`, cut into windows of `window`
    tokens, each read from an empty cache one `decode` at a time (a model
    exported with `--lora file` with the adapters beside it)."""
    from tfformer.export.runtimes.generate import LiteRTGenerator
    from tfformer.export.tasks.causal_lm.lora import LORA_FILE

    lora = os.path.join(os.path.dirname(os.path.abspath(model_path)), LORA_FILE)
    generator = LiteRTGenerator(model_path, lora=lora if os.path.isfile(lora) else None)
    nll, count, top = 0.0, 0, []
    for start in range(0, len(ids) - 1, window):
        piece = ids[start : start + window + 1]
        cache = generator.new_cache()
        for i in range(len(piece) - 1):
            logits, cache = generator.decode(piece[i], i, cache)
            logits = np.asarray(logits, np.float64).reshape(-1)
            shifted = logits - logits.max()
            log_probs = shifted - np.log(np.exp(shifted).sum())
            nll -= log_probs[piece[i + 1]]
            count += 1
            top.append(int(np.argmax(logits)))
    return nll / max(count, 1), top


def measure(float_path, quantized_path, ids, context):
    """The gate's figures for `quantized_path` against `float_path` on
    `ids` (at most QUALITY_TOKENS of them, windows of at most 64 tokens
    inside `context`)."""
    ids = list(ids[: QUALITY_TOKENS + 1])
    window = max(1, min(64, context - 1))
    base, base_top = score(float_path, ids, window)
    nats, top = score(quantized_path, ids, window)
    agreement = float(np.mean([a == b for a, b in zip(top, base_top, strict=True)]))
    return {
        "examples": len(top),
        "float32": round(float(base), 4),
        "quantized": round(float(nats), 4),
        "agreement": round(agreement, 4),
    }
