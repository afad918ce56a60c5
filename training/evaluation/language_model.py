"""A causal language model's score on a text, in its users' units: nats per
token and bits per byte, the text cut into the windows training uses."""

import math

import numpy as np
from keras import ops

from tfformer.training import pipeline


def score_text(model, tokenizer, text, window, *, limit=None, progress=print):
    """Nats per token and bits per byte of `text`, cut into non-overlapping
    `window`-token pieces as in training (each predicts its tokens after the
    first from the ones before, within the window)."""
    ids = tokenizer.tokenize([text]).flat_values.numpy()
    examples = pipeline.language_model_examples(ids, sequence_length=window)
    inputs = examples.features["token_ids"].to_tensor().numpy()
    labels = examples.labels.to_tensor().numpy()
    if limit:
        inputs, labels = inputs[:limit], labels[:limit]
    nats = 0.0
    for start in range(0, len(inputs), 32):
        logits = model({"token_ids": inputs[start : start + 32]}, training=False)
        log_p = ops.convert_to_numpy(ops.log_softmax(logits, axis=-1))
        picked = np.take_along_axis(log_p, labels[start : start + 32, :, None], axis=-1)
        nats -= float(picked.sum())
        progress(f"scored {min(start + 32, len(inputs))}/{len(inputs)} windows")
    tokens = labels.size
    # The bytes the scored tokens stand for (their detokenized text).
    covered = tokenizer.detokenize(labels.reshape(1, -1)).numpy()[0]
    return {
        "tokens": int(tokens),
        "bytes": len(covered),
        "nats_per_token": round(nats / tokens, 4),
        "bits_per_byte": round(nats / math.log(2) / max(len(covered), 1), 4),
    }
