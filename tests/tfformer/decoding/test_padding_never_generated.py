"""Padding is never generated, even where the model ranks it first.

The models mask id 0 wherever they read it, and `Generator` writes `pad_id`
after the end token: a generated pad would be attended to by the cached steps
but not by the model's own forward pass (so the score would not be the
model's log P of the output), and would read back as the end of the output.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decoding import Generator
from tfformer.decoding.sampling import greedy_choice

from .test_generator import END, PAD, START, A, B, MarkovDecoder, table

# After START, padding is the most likely token (0.5), then A (0.3), then END
# (0.2); after A, padding (0.6), then END (0.4); after padding, END. Allowed
# padding, greedy would return START PAD PAD ..., and beam search START PAD
# END (log P -0.69, the most likely sequence).
CHAIN = {START: {PAD: 0.5, A: 0.3, END: 0.2}, A: {PAD: 0.6, END: 0.4}, PAD: {END: 1.0}}


def generate(**kwargs):
    out = Generator(MarkovDecoder(table(CHAIN)), max_length=6, **kwargs)(
        np.full((8, 1), START, "int32")
    )
    return ops.convert_to_numpy(out["token_ids"]), ops.convert_to_numpy(out["scores"])


def test_greedy_takes_the_best_token_that_is_not_padding():
    tokens, scores = generate()
    np.testing.assert_array_equal(tokens, [[START, A, END, PAD, PAD, PAD]] * 8)
    # The model's log-probabilities, not renormalized without padding.
    np.testing.assert_allclose(scores, np.log(0.3 * 0.4), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_beam_search_never_extends_with_padding(alpha):
    # log P: START END -1.61 (1 token), START A END -2.12 (2 tokens); alpha 2
    # divides by 1 and (7/6)^2 = 1.36: -1.61 against -1.56, the long one wins.
    tokens, scores = generate(search="beam", beam_width=3, length_penalty=alpha)
    if alpha == 0.0:
        expected, score = [START, END], np.log(0.2)
    else:
        expected, score = [START, A, END], np.log(0.3 * 0.4) / (7 / 6) ** 2
    np.testing.assert_array_equal(tokens, [expected + [PAD] * (6 - len(expected))] * 8)
    np.testing.assert_allclose(scores, score, rtol=1e-5)


def test_sampling_never_draws_padding():
    tokens, scores = generate(search="sample", seed=0)
    # Without the rule, half the first draws would be padding.
    for row, score in zip(tokens, scores, strict=True):
        assert row[1] in (A, END), row
        if row[1] == END:
            np.testing.assert_array_equal(row, [START, END, PAD, PAD, PAD, PAD])
            np.testing.assert_allclose(score, np.log(0.2), rtol=1e-5)
        else:
            np.testing.assert_array_equal(row, [START, A, END, PAD, PAD, PAD])
            np.testing.assert_allclose(score, np.log(0.3 * 0.4), rtol=1e-5)


@pytest.mark.parametrize("search", ["greedy", "sample"])
def test_a_row_of_nan_gives_the_lowest_id_that_is_not_padding(search):
    """A model whose output after START is NaN (overflowed weights, say):
    the sampler's draw finds no positive probability and would return id 0,
    the padding; both searches give id 1 instead."""
    transitions = table(CHAIN)
    transitions[START] = np.nan
    out = Generator(MarkovDecoder(transitions), max_length=3, search=search, seed=7)(
        np.full((8, 1), START, "int32")
    )
    tokens = ops.convert_to_numpy(out["token_ids"])
    np.testing.assert_array_equal(tokens[:, 1], [1] * 8)
    assert np.all(np.isnan(ops.convert_to_numpy(out["scores"])))


def numpy_greedy(log_probs, pad_id):
    """Each row's first largest entry, padding left out."""
    allowed = np.where(np.arange(log_probs.shape[-1]) == pad_id, -np.inf, log_probs)
    return allowed.argmax(-1)


@pytest.mark.parametrize("pad_id", [0, 5])
def test_greedy_choice_is_argmax_without_padding_ties_to_the_lowest_id(pad_id):
    rng = np.random.default_rng(0)
    # Few distinct values, so many rows have ties (some with padding).
    log_probs = rng.integers(-4, 1, (400, 9)).astype("float32")
    log_probs[:50, pad_id] = 1.0  # padding alone at the top
    log_probs[50:60] = -2.0  # every entry tied
    log_probs[60:70, :] = -0.0  # negative zeros everywhere
    log_probs[60:70, 7] = 0.0
    chosen = ops.convert_to_numpy(greedy_choice(log_probs, pad_id))
    np.testing.assert_array_equal(chosen, numpy_greedy(log_probs, pad_id))
    assert chosen.dtype == np.int32
    assert not np.any(chosen == pad_id)


@pytest.mark.parametrize("pad_id", [0, 8])
def test_greedy_choice_never_pads_where_the_floor_rounds_or_a_nan_appears(pad_id):
    rows = np.zeros((4, 9), "float32")
    rows[0] = -np.inf  # the floor is the minimum itself
    rows[1] = -3e8  # |min| >= 2**24: min - 1 == min
    rows[2] = np.linspace(-5, 0, 9)
    rows[2, 4] = np.nan
    rows[3] = np.nan
    chosen = ops.convert_to_numpy(greedy_choice(rows, pad_id))
    first_not_pad = 1 if pad_id == 0 else 0
    # Rows 0-1 are ties everywhere: the lowest id that is not padding.
    np.testing.assert_array_equal(chosen[:2], [first_not_pad] * 2)
    assert np.all(chosen != pad_id) and np.all((chosen >= 0) & (chosen < 9))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf graphs")
def test_no_search_sorts_under_xla_and_the_filters_sort_in_graphs():
    """XLA on CPU turns TopKV2 (which tf.sort also uses) into a sort of the
    whole vocabulary at every step: 45 of a 50 ms greedy step at batch 32
    (`bench/decoding_speed/decode_search.py`). Under XLA no search traces one: greedy,
    sampling, and the top-k and top-p filters (which bisect over the
    logits' bit patterns; their Bitcast shows that the check sees inside
    the loop). As a plain graph the filters sort, with TensorFlow's kernel."""
    import tensorflow as tf

    def op_types(jit_compile=True, **settings):
        generator = Generator(MarkovDecoder(table(CHAIN)), max_length=6, **settings)
        spec = tf.TensorSpec((None, 1), tf.int32)
        function = generator.compiled(jit_compile=jit_compile)
        graph = function.get_concrete_function(spec).graph.as_graph_def()
        types = {node.op for node in graph.node}
        for function in graph.library.function:
            types |= {node.op for node in function.node_def}
        return types

    assert "While" in op_types() or "StatelessWhile" in op_types()
    assert "TopKV2" not in op_types()
    assert "TopKV2" not in op_types(search="sample")
    for filtered in (dict(top_k=2), dict(top_p=0.5), dict(top_k=2, top_p=0.5)):
        types = op_types(search="sample", **filtered)
        assert "TopKV2" not in types and "Bitcast" in types
        types = op_types(jit_compile=False, search="sample", **filtered)
        assert "TopKV2" in types and "Bitcast" not in types


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_a_pad_id_other_than_0_fills_every_position_after_the_end(search):
    """With pad_id=5 (B here), id 0 is an ordinary token: the positions after
    the end token hold 5, never 0, whichever search stopped early."""
    chain = {START: {A: 0.9, END: 0.1}, A: {END: 1.0}}
    out = Generator(
        MarkovDecoder(table(chain)), max_length=6, search=search, pad_id=B, seed=0
    )(np.full((4, 1), START, "int32"))
    tokens = ops.convert_to_numpy(out["token_ids"])
    for row in tokens:
        end = list(row).index(END)
        assert row[1] in (A, END), row
        np.testing.assert_array_equal(row[end + 1 :], [B] * (5 - end))
