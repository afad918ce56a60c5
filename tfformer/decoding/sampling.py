"""Logit filters for sampling: temperature, top-k and top-p (nucleus)."""

from keras import ops

# Large but finite: -inf would turn 0 * -inf and -inf - -inf into NaN.
NEG_INF = -1e9


def check_sampling_arguments(temperature, top_k, top_p):
    """Raises ValueError naming a bad temperature, top_k or top_p."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise TypeError(f"temperature must be a number. Received: {temperature!r}")
    if not temperature > 0:
        raise ValueError(
            f"temperature must be positive. Received: temperature={temperature}"
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
    ):
        raise ValueError(f"top_k must be a positive int or None. Received: {top_k!r}")
    if top_p is not None and not (
        isinstance(top_p, int | float)
        and not isinstance(top_p, bool)
        and 0 < top_p <= 1
    ):
        raise ValueError(f"top_p must be in (0, 1] or None. Received: top_p={top_p!r}")


def filter_logits(logits, *, temperature=1.0, top_k=None, top_p=None):
    """Scaled logits `(batch, vocab)` with everything outside top-k/top-p masked.

    top-k keeps the k largest logits. top-p keeps the smallest set of tokens,
    in order of probability, whose total probability reaches p (the most
    likely token is always kept). Masked logits become a large negative number.
    """
    logits = ops.cast(logits, "float32") / temperature
    vocabulary = ops.shape(logits)[-1]
    if top_k is not None and top_k < vocabulary:
        # (batch, 1): the k-th largest logit of each row.
        kth = ops.min(ops.top_k(logits, top_k, sorted=True)[0], axis=-1, keepdims=True)
        logits = ops.where(logits < kth, NEG_INF, logits)
    if top_p is not None and top_p < 1.0:
        sorted_logits = ops.flip(ops.sort(logits, axis=-1), axis=-1)
        probabilities = ops.softmax(sorted_logits, axis=-1)
        # Probability mass strictly before each sorted position.
        before = ops.cumsum(probabilities, axis=-1) - probabilities
        keep = before < top_p
        # The smallest kept logit is the threshold.
        threshold = ops.min(
            ops.where(keep, sorted_logits, -NEG_INF), axis=-1, keepdims=True
        )
        logits = ops.where(logits < threshold, NEG_INF, logits)
    return logits
