"""The portable random stream, inverse-transform sampling and the per-row
settings of `Generator.generate`, against plain-Python references and
hand-made distributions."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decoding import Generator, filter_logits
from tfformer.decoding.sampling import (
    filter_logits_per_row,
    sample_inverse_cdf,
    uniform_stream,
)

from .test_generator import END, START, A, B, MarkovDecoder, table

MASK = 2**32 - 1


def lowbias32(x):
    """Chris Wellons' lowbias32 on Python ints."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK
    x ^= x >> 16
    return x


def reference_uniform(seed, position):
    x = lowbias32((lowbias32(seed & MASK) + position) & MASK)
    return (lowbias32(x) >> 8) / 2**24


def test_lowbias32_reference_matches_its_published_constants():
    # The reference itself, by hand: 1 -> 1 ^ 0 = 1; * 0x7feb352d; ...
    x = 1
    x = (x * 0x7FEB352D) & MASK
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK
    x ^= x >> 16
    assert lowbias32(1) == x
    assert lowbias32(0) == 0


def test_uniform_stream_equals_the_python_reference():
    seeds = np.array([0, 1, 7, 2**31 - 1, -1, -123456], "int64")
    for position in (0, 1, 5, 63, 1000):
        got = ops.convert_to_numpy(
            uniform_stream(ops.convert_to_tensor(seeds.astype("int32")), position)
        )
        expected = [reference_uniform(int(s), position) for s in seeds]
        np.testing.assert_array_equal(got, np.array(expected, "float32"))


def test_uniform_stream_is_uniform_and_uncorrelated_along_positions():
    seeds = np.arange(200, dtype="int32")
    draws = np.stack(
        [ops.convert_to_numpy(uniform_stream(seeds, p)) for p in range(100)], axis=1
    )  # (200 seeds, 100 positions)
    counts = np.histogram(draws, bins=20, range=(0, 1))[0]
    expected = draws.size / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 43.8  # 19 degrees of freedom, p = 0.001
    lag1 = np.corrcoef(draws[:, :-1].ravel(), draws[:, 1:].ravel())[0, 1]
    rows = np.corrcoef(draws[:-1].ravel(), draws[1:].ravel())[0, 1]
    assert abs(lag1) < 0.02 and abs(rows) < 0.02  # 3.5 sigma at n = 19,800


def test_inverse_cdf_picks_by_hand():
    logits = np.log(np.array([[0.5, 1e-30, 0.3, 0.2]] * 6, "float32"))
    logits[:, 1] = -1e9  # masked
    u = np.array([0.0, 0.49, 0.5, 0.79, 0.81, 0.9999999], "float32")
    got = ops.convert_to_numpy(sample_inverse_cdf(logits, u))
    assert got.tolist() == [0, 0, 2, 2, 3, 3]
    # A masked tail is never drawn, even at u just below 1.
    tail = np.log(np.array([[0.6, 0.4, 1.0, 1.0]], "float32"))
    tail[:, 2:] = -1e9
    assert ops.convert_to_numpy(
        sample_inverse_cdf(tail, np.array([1 - 2**-24], "float32"))
    ).tolist() == [1]


def test_per_row_filters_equal_the_scalar_filters_row_by_row():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 9)).astype("float32") * 3
    rows = [
        dict(temperature=1.0, top_k=None, top_p=None),
        dict(temperature=0.5, top_k=3, top_p=None),
        dict(temperature=2.0, top_k=None, top_p=0.6),
        dict(temperature=1.3, top_k=5, top_p=0.8),
    ]
    got = ops.convert_to_numpy(
        filter_logits_per_row(
            logits,
            temperature=np.array([r["temperature"] for r in rows], "float32"),
            top_k=np.array([r["top_k"] or 0 for r in rows], "int32"),
            top_p=np.array([r["top_p"] or 1.0 for r in rows], "float32"),
        )
    )
    for i, r in enumerate(rows):
        alone = ops.convert_to_numpy(filter_logits(logits[i : i + 1], **r))[0]
        np.testing.assert_array_equal(got[i], alone)
    # Row 1 by hand: the 3 largest logits survive, scaled by 1 / 0.5.
    kept = np.flatnonzero(got[1] > -1e8)
    np.testing.assert_array_equal(np.sort(kept), np.sort(np.argsort(logits[1])[-3:]))
    np.testing.assert_allclose(
        got[1, kept], (logits[1, kept] - logits[1].max()) * 2, rtol=1e-5, atol=1e-6
    )


def sorted_filter(logits, temperature, top_k, top_p):
    """The filters by their sorting definition, in NumPy, for one row."""
    logits = np.asarray(logits, np.float32)
    logits = np.maximum(
        (logits - logits.max()) / np.float32(max(temperature, 1e-6)), np.float32(-1e9)
    )
    descending = -np.sort(-logits)
    masked = np.zeros(len(logits), bool)
    if top_k > 0:
        masked |= logits < descending[min(top_k, len(logits)) - 1]
    if top_p < 1.0:
        shifted = np.exp(descending - descending[0])
        probabilities = shifted / shifted.sum(dtype=np.float32)
        before = np.cumsum(probabilities, dtype=np.float32) - probabilities
        masked |= logits < descending[before < np.float32(top_p)].min()
    return np.where(masked, np.float32(-1e9), logits)


def compiled_filter(compiled):
    """`filter_logits_per_row` as run eagerly, or compiled: TensorFlow sorts
    outside XLA and bisects under it (traced here with unknown batch and
    vocabulary sizes); JAX always bisects."""
    if not compiled:
        return filter_logits_per_row
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        spec = tf.TensorSpec
        function = tf.function(
            lambda logits, temperature, top_k, top_p: filter_logits_per_row(
                logits, temperature=temperature, top_k=top_k, top_p=top_p
            ),
            jit_compile=True,
            input_signature=[
                spec((None, None), tf.float32),
                spec((None,), tf.float32),
                spec((None,), tf.int32),
                spec((None,), tf.float32),
            ],
        )
        return lambda logits, **settings: function(logits, **settings)
    import jax

    return jax.jit(filter_logits_per_row)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_bisected_filters_keep_what_sorting_keeps_at_vocabulary_scale(compiled):
    """Compiled, the thresholds come from bisection over the logits' bit
    patterns, not from a sort (eagerly TensorFlow sorts): at vocabulary
    8,000, per row, the kept set equals the sorting definition's (the k-th
    largest logit; the nucleus), with ties at the threshold, logits clipped
    at -1e9 (a tiny temperature), -0.0 tied with 0.0, values spanning
    10^-30 to 10^30, k at and beyond the vocabulary."""
    rng = np.random.default_rng(7)
    vocabulary, rows = 8000, 48
    logits = (rng.normal(size=(rows, vocabulary)) * 3).astype(np.float32)
    logits[1:8] = np.round(logits[1:8])  # heavy ties everywhere
    logits[8] = np.sign(logits[8]) * 10.0 ** rng.uniform(-30, 30, vocabulary)
    logits[9] = 0.0  # one tie of the whole row, 0.0 and -0.0 alternating
    logits[9, ::2] = -0.0
    settings = [
        (
            float(rng.choice([1e-9, 0.1, 1.0, 2.5])),
            int(rng.choice([0, 1, 2, 40, 7999, 8000, 9000])),
            float(rng.choice([1.0, 0.999, 0.9, 0.3, 1e-6])),
        )
        for _ in range(rows)
    ]
    settings[0] = (1.0, 40, 0.9)
    settings[9] = (1.0, 1, 1e-6)  # -0.0 - 0.0 = -0.0: still tied with 0.0
    got = ops.convert_to_numpy(
        compiled_filter(compiled)(
            logits,
            temperature=np.array([t for t, _, _ in settings], np.float32),
            top_k=np.array([k for _, k, _ in settings], np.int32),
            top_p=np.array([p for _, _, p in settings], np.float32),
        )
    )
    kept = []
    for row, (temperature, top_k, top_p) in enumerate(settings):
        want = sorted_filter(logits[row], temperature, top_k, top_p)
        np.testing.assert_array_equal(got[row] <= -1e8, want <= -1e8, err_msg=row)
        np.testing.assert_allclose(got[row], want, rtol=1e-6, err_msg=row)
        kept.append(int((want > -1e8).sum()))
    # The rows exercise the threshold: some keep a few, some most, some all.
    assert kept[0] == 40 and min(kept) == 1 and max(kept) == vocabulary
    assert len(set(kept)) >= 10


def test_no_filter_skips_the_sort_and_changes_nothing():
    """top_k=None, top_p=None (no filter, known when the graph is built)
    scales the logits only; the result equals the sorting path's with
    top-k 0 and top-p 1 in every row, and so does what a generator without
    filters samples."""
    rng = np.random.default_rng(1)
    logits = (rng.normal(size=(6, 11)) * 4).astype("float32")
    logits[0, 3] = -3e9  # below NEG_INF: clipped either way
    temperature = np.array([1.0, 0.5, 2.0, 1e-9, 1.0, 3.0], "float32")
    unfiltered = filter_logits_per_row(
        logits, temperature=temperature, top_k=None, top_p=None
    )
    filtered_path = filter_logits_per_row(
        logits,
        temperature=temperature,
        top_k=np.zeros(6, "int32"),
        top_p=np.ones(6, "float32"),
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(unfiltered), ops.convert_to_numpy(filtered_path)
    )
    uniform = {A: 0.4, B: 0.35, END: 0.25}
    chain = MarkovDecoder(table({START: uniform, A: uniform, B: uniform}))
    prompts = np.full((64, 1), START, "int32")
    generator = Generator(chain, max_length=8, search="sample", seed=3)
    plain = generator(prompts)
    explicit = generator.generate(
        prompts, top_k=np.zeros(64, "int32"), top_p=np.ones(64, "float32")
    )
    for key in ("token_ids", "token_log_probs"):
        np.testing.assert_array_equal(
            ops.convert_to_numpy(plain[key]), ops.convert_to_numpy(explicit[key])
        )
    assert len(np.unique(ops.convert_to_numpy(plain["token_ids"])[:, 1])) == 3


def test_sampled_frequencies_follow_the_model():
    chain = MarkovDecoder(table({START: {A: 0.7, B: 0.3}, A: {END: 1}, B: {END: 1}}))
    n = 4000
    out = Generator(chain, max_length=3, search="sample", seed=11)(
        np.full((n, 1), START, "int32")
    )
    first = ops.convert_to_numpy(out["token_ids"])[:, 1]
    share = float(np.mean(first == A))
    sigma = math.sqrt(0.7 * 0.3 / n)
    assert abs(share - 0.7) < 4 * sigma
    assert set(first.tolist()) == {A, B}
    # Each row's log-probability is the table's.
    logp = ops.convert_to_numpy(out["token_log_probs"])[:, 1]
    np.testing.assert_allclose(
        logp, np.where(first == A, np.log(0.7), np.log(0.3)), rtol=1e-5
    )


def test_generate_takes_settings_per_row():
    chain = MarkovDecoder(
        table({START: {A: 0.6, B: 0.4}, A: {A: 0.6, B: 0.4}, B: {A: 0.6, B: 0.4}})
    )
    prompts = np.full((4, 1), START, "int32")
    generator = Generator(chain, max_length=8, search="sample", seed=0)
    out = generator.generate(
        prompts,
        max_new_tokens=np.array([0, 1, 3, 7], "int32"),
        top_k=np.array([0, 1, 1, 0], "int32"),
        seeds=np.array([5, 5, 5, 9], "int32"),
    )
    tokens = ops.convert_to_numpy(out["token_ids"])
    generated = (tokens[:, 1:] != 0).sum(axis=1)
    assert generated.tolist() == [0, 1, 3, 7]
    # top_k 1: always the likelier token.
    assert tokens[1, 1] == A and tokens[2, 1:4].tolist() == [A, A, A]
    # Row 3 with seed 9 equals the generator's own row 0 when its seed is 9.
    alone = Generator(chain, max_length=8, search="sample", seed=9)(prompts[:1])
    np.testing.assert_array_equal(
        tokens[3], ops.convert_to_numpy(alone["token_ids"])[0]
    )
    logp = ops.convert_to_numpy(out["token_log_probs"])
    np.testing.assert_allclose(
        logp[3, 1:], np.where(tokens[3, 1:] == A, np.log(0.6), np.log(0.4)), rtol=1e-5
    )
    assert np.all(logp[0] == 0) and np.all(logp[:, 0] == 0)


def test_a_scalar_seed_gives_row_r_the_seed_plus_r():
    chain = MarkovDecoder(
        table({START: {A: 0.5, B: 0.5}, A: {A: 0.5, B: 0.5}, B: {A: 0.5, B: 0.5}})
    )
    batch = Generator(chain, max_length=10, search="sample", seed=40)(
        np.full((3, 1), START, "int32")
    )
    for row in range(3):
        alone = Generator(chain, max_length=10, search="sample", seed=40 + row)(
            np.full((1, 1), START, "int32")
        )
        np.testing.assert_array_equal(
            ops.convert_to_numpy(batch["token_ids"])[row],
            ops.convert_to_numpy(alone["token_ids"])[0],
        )


@pytest.mark.parametrize("seed", [1.5, True, "3"])
def test_a_seed_that_is_not_an_int_is_refused(seed):
    with pytest.raises(TypeError, match="seed must be an int"):
        Generator(MarkovDecoder(table({})), max_length=4, search="sample", seed=seed)


def test_a_tiny_temperature_picks_the_largest_without_nan():
    logits = np.array([[0.5, 2.0, -1.0, 1.9]], "float32")
    filtered = ops.convert_to_numpy(filter_logits(logits, temperature=1e-38))
    assert np.all(np.isfinite(filtered)) and filtered[0, 1] == 0
    u = np.array([0.999], "float32")
    assert ops.convert_to_numpy(sample_inverse_cdf(filtered, u)).tolist() == [1]


@pytest.mark.parametrize(
    "setting, message",
    [
        (dict(max_new_tokens=[2, -1]), r"max_new_tokens must be in \[0, 7\]"),
        (dict(max_new_tokens=[8, 1]), r"max_new_tokens must be in \[0, 7\]"),
        (dict(temperature=[1.0, 0.0]), "temperature must be positive and finite"),
        (dict(temperature=[np.inf, 1.0]), "temperature must be positive and finite"),
        (dict(top_k=[-1, 0]), r"top_k must be >= 0"),
        (dict(top_p=[0.0, 1.0]), r"top_p must be in \(0, 1\]"),
    ],
)
def test_generate_refuses_concrete_settings_out_of_range(setting, message):
    chain = MarkovDecoder(table({START: {A: 1.0}}))
    generator = Generator(chain, max_length=8, search="sample", seed=0)
    with pytest.raises(ValueError, match=message):
        generator.generate(
            np.full((2, 1), START, "int32"),
            **{k: np.array(v) for k, v in setting.items()},
        )
