"""Sampling: temperature, top-k and top-p (nucleus) filters, and a portable
random stream.

Sampled tokens are drawn by inverse transform: the first token whose
cumulative probability exceeds `u * total`, with `u` from `uniform_stream`,
a counter-based hash of (seed, position). The same few integer and float
operations run in `keras.ops` (the Keras generator and the SavedModel) and in
NumPy (`export/runtimes/generate.py`, the reference runtime an app
ports), so one seed gives the same tokens in every form of the model; a
backend's own random generator could not be reproduced on a device.
"""

import keras
import numpy as np
from keras import ops

from tfformer.errors import InputError, InputTypeError
from tfformer.layers.dropout import in_xla_compilation

# Large but finite: -inf would turn 0 * -inf and -inf - -inf into NaN.
NEG_INF = -1e9
# Smaller positive temperatures act as this one (greedy but for near-ties).
MIN_TEMPERATURE = 1e-6
# lowbias32 (Chris Wellons' hash-prospector), a 32-bit integer mixer:
# x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16.
HASH_MULTIPLIERS = (0x7FEB352D, 0x846CA68B)
HASH_SHIFTS = (16, 15, 16)
# Bisection steps of the top-k/top-p thresholds (`_thresholds`).
HALVINGS = 31


def check_sampling_arguments(temperature, top_k, top_p):
    """Raises ValueError naming a bad temperature, top_k or top_p."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise InputTypeError(f"temperature must be a number. Received: {temperature!r}")
    if not temperature > 0:
        raise InputError(
            f"temperature must be positive. Received: temperature={temperature}"
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
    ):
        raise InputError(f"top_k must be a positive int or None. Received: {top_k!r}")
    if top_p is not None and not (
        isinstance(top_p, int | float)
        and not isinstance(top_p, bool)
        and 0 < top_p <= 1
    ):
        raise InputError(f"top_p must be in (0, 1] or None. Received: top_p={top_p!r}")


def filter_logits(logits, *, temperature=1.0, top_k=None, top_p=None):
    """Scaled logits `(batch, vocab)` with everything outside top-k/top-p masked.

    top-k keeps the k largest logits (ties with the k-th are kept). top-p
    keeps the smallest set of tokens, in order of probability, whose total
    probability reaches p (the most likely token is always kept). Masked
    logits become a large negative number; the others are shifted so that
    the largest is 0 (softmax is unchanged). Python numbers, the same for
    every row; `filter_logits_per_row` takes a setting per row.
    """
    batch = ops.shape(logits)[0]
    return filter_logits_per_row(
        logits,
        temperature=ops.full((batch,), float(temperature), "float32"),
        top_k=None if top_k is None else ops.full((batch,), int(top_k), "int32"),
        top_p=None if top_p is None else ops.full((batch,), float(top_p), "float32"),
    )


def filter_logits_per_row(logits, *, temperature, top_k, top_p):
    """`filter_logits` with tensors of one setting per row: `temperature`
    `(batch,)` > 0 (below `MIN_TEMPERATURE` taken as it), `top_k`
    `(batch,)` (0: no top-k filter), `top_p` `(batch,)` in (0, 1] (1: no
    top-p filter). Nothing here checks them; the callers do
    (`check_sampling_arguments`, the SavedModel's assertions).

    Compiled (TensorFlow under XLA, or JAX) nothing is sorted: each filter
    keeps the logits at or above a threshold found by bisection over the
    logits' order keys (`_order_keys`, 31 halvings): top-k's is the lowest
    logit with fewer than k logits above it (the k-th largest), top-p's the
    lowest with less than p of the probability above it (the last of the
    nucleus). So the kept sets are the sorting definition's, ties included,
    up to float32 rounding: the probability above a top-p candidate is a
    sum in another order than the sort's cumulative sum, so a row whose
    nucleus mass lies within rounding of p can keep one tie group more or
    less. (XLA on CPU sorts the whole row for a sort or `top_k`: at batch
    32 and vocabulary 8,000 the sort took 38 of a 45 ms sampling step,
    `bench/decoding_speed/decode_search.py`.) Elsewhere (TensorFlow outside XLA: a plain
    graph, such as the SavedModel's default `generate`, or eager; other
    eager backends) each row is sorted once: the sort kernel is cheap
    there, and each step of a 31-step loop pays the executor's cost.
    `top_k=None` and `top_p=None` together (known when the graph is built)
    leave the filters out of the graph; one of them None leaves its search
    out of the bisection, while the sort serves both filters at once.
    """
    logits = ops.cast(logits, "float32")
    # Shifted so that the largest is 0 before scaling: a tiny temperature
    # then sends the others to -inf (clipped to NEG_INF), never to NaN.
    logits = logits - ops.max(logits, axis=-1, keepdims=True)
    # Below MIN_TEMPERATURE (subnormal ones flush to 0 on some CPUs: 0 / 0).
    temperature = ops.maximum(ops.cast(temperature, "float32"), MIN_TEMPERATURE)
    logits = logits / temperature[:, None]
    logits = ops.maximum(logits, NEG_INF)
    if top_k is None and top_p is None:
        return logits
    if not runs_compiled():
        return _filter_by_sorting(logits, top_k, top_p)
    keys = _order_keys(logits)
    searches = []
    if top_k is not None:
        top_k = ops.cast(top_k, "int32")
        # 0 (no filter) and k >= vocabulary keep every logit.
        vocabulary = ops.shape(logits)[-1]
        budget = ops.where(top_k > 0, top_k, vocabulary)
        searches.append((ops.ones_like(keys), budget))
    if top_p is not None:
        top_p = ops.cast(top_p, "float32")
        # 1 keeps every logit: the probabilities may sum to just under 1.
        budget = ops.where(top_p < 1.0, top_p, 2.0)
        searches.append((ops.softmax(logits, axis=-1), budget))
    threshold = ops.max(ops.stack(_thresholds(keys, searches), axis=0), axis=0)
    return ops.where(keys < threshold[:, None], NEG_INF, logits)


def runs_compiled():
    """Whether the filters run compiled: under XLA on TensorFlow (checked
    with a TensorFlow internal that fails loudly, naming the version, if it
    goes), always on JAX."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return in_xla_compilation()
    return backend == "jax"


def _filter_by_sorting(logits, top_k, top_p):
    """The filters by their definition, on one descending sort per row."""
    batch = ops.shape(logits)[0]
    if top_k is None:
        top_k = ops.zeros((batch,), "int32")
    if top_p is None:
        top_p = ops.ones((batch,), "float32")
    vocabulary = ops.shape(logits)[-1]
    sorted_logits = ops.flip(ops.sort(logits, axis=-1), axis=-1)
    top_k = ops.cast(top_k, "int32")
    kth_index = ops.clip(top_k - 1, 0, vocabulary - 1)
    kth = ops.take_along_axis(sorted_logits, kth_index[:, None], axis=-1)
    by_k = ops.logical_and(top_k[:, None] > 0, logits < kth)
    probabilities = ops.softmax(sorted_logits, axis=-1)
    # Probability mass strictly before each sorted position.
    before = ops.cumsum(probabilities, axis=-1) - probabilities
    top_p = ops.cast(top_p, "float32")[:, None]
    keep = ops.logical_or(before < top_p, top_p >= 1.0)
    # The smallest kept logit is the threshold.
    threshold = ops.min(
        ops.where(keep, sorted_logits, -NEG_INF), axis=-1, keepdims=True
    )
    return ops.where(ops.logical_or(by_k, logits < threshold), NEG_INF, logits)


def _order_keys(x):
    """int32 keys in the order of the float32 values `x` (no NaN): the bits
    of a non-negative float, and for a negative one its bits with all but
    the sign flipped. -0.0 gets the key of 0.0."""
    # Viewed as one column: Keras's TensorFlow `view` needs a static last
    # dimension, and a vocabulary can be unknown when the graph is traced.
    bits = ops.reshape(ops.view(ops.reshape(x, (-1, 1)), "int32"), ops.shape(x))
    keys = ops.where(
        bits < 0, ops.bitwise_xor(bits, ops.cast(0x7FFFFFFF, "int32")), bits
    )
    return ops.where(x == 0, ops.zeros_like(keys), keys)


def _thresholds(keys, searches):
    """For each `(weights, budget)` of `searches`, per row the smallest key
    t with `sum(weights[keys > t]) < budget`: every key at or above t is
    kept. The sum does not grow as t grows, so bisection finds t among the
    row's keys; one loop runs every search, so each halving reads the keys
    once."""
    # Bounds that hold throughout: `high` passes (nothing lies above the
    # largest key), `low` fails (one below the smallest: it counts every
    # key; if it passes, every key is kept, as the sorting definition does
    # when the whole row's probability rounds below top_p). Logits in
    # [NEG_INF, 0] have keys in [-1315859241, 0], so 31 halvings close the
    # gap to 1. At gap 1 the middle is `low`, which fails: nothing moves.
    high = ops.max(keys, axis=-1)
    low = ops.min(keys, axis=-1) - 1
    state = tuple((low, high) for _ in searches)

    def halve(_, state):
        out = []
        for (low, high), (weights, budget) in zip(state, searches, strict=True):
            middle = low + ops.right_shift(high - low, ops.cast(1, "int32"))
            above = ops.where(keys > middle[:, None], weights, ops.zeros_like(weights))
            passes = ops.sum(above, axis=-1) < budget
            out.append(
                (ops.where(passes, low, middle), ops.where(passes, middle, high))
            )
        return tuple(out)

    state = ops.fori_loop(0, HALVINGS, halve, state)
    return [high for _, high in state]


def _mix(x):
    """lowbias32 of a uint32 tensor (wrapping arithmetic)."""

    def shift_xor(x, bits):
        return ops.bitwise_xor(
            x, ops.right_shift(x, ops.convert_to_tensor(bits, "uint32"))
        )

    for multiplier, bits in zip(HASH_MULTIPLIERS, HASH_SHIFTS[:2], strict=True):
        x = ops.multiply(
            shift_xor(x, bits), ops.convert_to_tensor(multiplier, "uint32")
        )
    return shift_xor(x, HASH_SHIFTS[-1])


def uniform_stream(seeds, position):
    """`(batch,)` float32 uniforms in [0, 1), one per row, for the token at
    `position`: mix(mix(mix(seed) + position)) >> 8, times 2**-24.

    Args:
        seeds: `(batch,)` uint32 seeds, or int32 ones (cast with wrapping: -1
            is 2**32 - 1).
        position: int or scalar tensor, the column being written.
    """
    seeds = ops.cast(seeds, "uint32")
    position = ops.cast(position, "uint32")
    x = _mix(ops.add(_mix(seeds), position))
    x = ops.right_shift(_mix(x), ops.convert_to_tensor(8, "uint32"))
    return ops.cast(x, "float32") * (2.0**-24)


def sample_inverse_cdf(logits, uniforms):
    """One token per row of `logits` `(batch, vocab)` (masked with NEG_INF):
    the first whose cumulative probability exceeds `uniforms * total`, never
    a token of probability 0. A row with no positive probability (a NaN in
    it) gives id 0."""
    probabilities = ops.softmax(ops.cast(logits, "float32"), axis=-1)
    cumulative = ops.cumsum(probabilities, axis=-1)
    threshold = uniforms[:, None] * cumulative[:, -1:]
    index = ops.sum(ops.cast(cumulative <= threshold, "int32"), axis=-1)
    vocabulary = ops.shape(logits)[-1]
    ids = ops.arange(vocabulary, dtype="int32")[None, :]
    last = ops.max(ops.where(probabilities > 0, ids, 0), axis=-1)
    return ops.minimum(index, last)


def _concrete(value):
    """`value` as a NumPy array, or None when it is symbolic."""
    if value is None:
        return None
    try:
        return np.asarray(ops.convert_to_numpy(value))
    except Exception:  # a symbolic tensor (tf.function, jax.jit)
        return None


def check_row_settings(max_length, **settings):
    """ValueError naming a per-row setting that is out of range."""
    rules = {
        "max_new_tokens": (
            lambda v: (v >= 0) & (v < max_length),
            f"in [0, {max_length - 1}]",
        ),
        "temperature": (lambda v: (v > 0) & np.isfinite(v), "positive and finite"),
        "top_k": (lambda v: v >= 0, ">= 0 (0: none)"),
        "top_p": (lambda v: (v > 0) & (v <= 1), "in (0, 1] (1: none)"),
    }
    for name, value in settings.items():
        value = _concrete(value)
        if value is None:
            continue
        ok, wanted = rules[name]
        if not np.all(ok(value)):
            raise InputError(
                f"{name} must be {wanted} in every row. "
                f"Received: {name}={value.tolist()}"
            )


def lowest_id_not(pad_id):
    """The lowest token id that is not `pad_id`: what a row with no usable
    score (a NaN) gets instead of padding."""
    return 1 if pad_id == 0 else 0


def greedy_choice(log_probs, pad_id):
    """The id of each row's largest log-probability other than `pad_id`
    `(batch,)` int32; ties go to the lowest id.

    Two reductions rather than `ops.argmax` or `ops.top_k`: Keras's TF
    argmax adds a bitwise op (for -0.0) that TFLite has no builtin for, and
    XLA on CPU made `top_k(log_probs, 2)` cost 45 of a 50 ms step at batch
    32 and vocabulary 8,000 (a sort of the row;
    `bench/decoding_speed/decode_search.py`).
    Padding is set 1 below the row's minimum rather than to NEG_INF, so the
    tensor keeps a data-sized range that a full-int8 export calibrates; and
    it is left out of the index step, so it is not chosen either where that
    floor rounds to the minimum itself (-inf, |min| >= 2**24). A row with
    a NaN matches nowhere and gets the lowest id that is not padding.
    """
    vocabulary = ops.shape(log_probs)[-1]
    ids = ops.arange(vocabulary, dtype="int32")[None, :]
    not_pad = ids != pad_id
    floor = ops.min(log_probs, axis=-1, keepdims=True) - 1.0
    allowed = ops.where(not_pad, log_probs, floor)
    best = ops.max(allowed, axis=-1, keepdims=True)
    first = ops.min(
        ops.where(ops.logical_and(allowed == best, not_pad), ids, vocabulary),
        axis=-1,
    )
    return ops.where(first < vocabulary, first, lowest_id_not(pad_id))
