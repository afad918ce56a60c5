"""Greedy, beam search and sampling against references and constructed cases."""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decoding import Generator, filter_logits, gnmt_length_penalty
from tfformer.models import gpt_decoder, transformer_seq2seq

PAD, START, END, A, B = 0, 2, 3, 4, 5


class MarkovDecoder:
    """A decoder-only "model" whose next-token distribution depends only on
    the last token: a transition table, to build cases by hand."""

    is_seq2seq = False

    def __init__(self, table):
        self.table = np.log(np.maximum(np.asarray(table, "float32"), 1e-12))
        self.calls = 0
        self.widths = []

    def init_cache(self, batch_size, max_length):
        return (ops.zeros((batch_size, 1)),)

    def step(self, token_ids, cache, index, encoded=None, cross_caches=None):
        self.calls += 1
        self.widths.append(token_ids.shape[1])
        # (batch, T, vocabulary): the next-token logits after each token.
        return (
            ops.take(ops.convert_to_tensor(self.table), token_ids, axis=0),
            cache,
            None,
        )


def table(rows):
    """6 x 6 transition probabilities from {token: {next: p}}."""
    t = np.full((6, 6), 1e-9)
    for token, nexts in rows.items():
        for nxt, p in nexts.items():
            t[token, nxt] = p
    return t


def seq2seq(vocabulary=24):
    return transformer_seq2seq(
        vocabulary,
        vocabulary,
        num_encoder_layers=2,
        num_decoder_layers=2,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        max_sequence_length=16,
        num_key_value_heads=2,
    )


def gpt(vocabulary=24, context=16):
    return gpt_decoder(
        vocabulary,
        num_layers=2,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        max_sequence_length=context,
        position="rotary",
    )


def sources(batch=3, length=7, vocabulary=24, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, length), "int32")
    for row in range(batch):
        n = rng.integers(2, length + 1)
        ids[row, :n] = rng.integers(4, vocabulary, n)
    return ids


def best_but_padding(logits):
    """Greedy's choice: the most likely token that is not padding."""
    return np.where(np.arange(logits.shape[-1]) == PAD, -np.inf, logits).argmax(-1)


def recompute_greedy_seq2seq(model, source, max_length):
    """Greedy by re-running the whole model on the prefix for every token."""
    tokens = np.zeros((len(source), max_length), "int32")
    tokens[:, 0] = START
    done = np.zeros(len(source), bool)
    for i in range(1, max_length):
        logits = model.predict(
            {"encoder_token_ids": source, "decoder_token_ids": tokens[:, :i]}, verbose=0
        )
        nxt = np.where(done, PAD, best_but_padding(logits[:, i - 1]))
        tokens[:, i] = nxt
        done |= nxt == END
        if done.all():
            break
    return tokens


def recompute_greedy_gpt(model, prompts, max_length):
    lengths = (prompts != PAD).sum(1)
    tokens = np.zeros((len(prompts), max_length), "int32")
    tokens[:, : prompts.shape[1]] = prompts
    done = np.zeros(len(prompts), bool)
    for i in range(1, max_length):
        logits = model.predict({"token_ids": tokens[:, :i]}, verbose=0)
        nxt = np.where(done, PAD, best_but_padding(logits[:, i - 1]))
        nxt = np.where(i < lengths, tokens[:, i], nxt)
        tokens[:, i] = nxt
        done |= (nxt == END) & (i >= lengths)
        if done.all():
            break
    return tokens


def test_cached_greedy_equals_prefix_recompute_seq2seq():
    model = seq2seq()
    source = sources()
    out = Generator(model, max_length=10)(source)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(out["token_ids"]),
        recompute_greedy_seq2seq(model, source, 10),
    )


def test_cached_greedy_equals_prefix_recompute_gpt_with_ragged_prompts():
    model = gpt()
    prompts = np.array([[5, 6, 7, 8], [9, 0, 0, 0], [10, 11, 0, 0]], "int32")
    out = Generator(model, max_length=12)(prompts)
    tokens = ops.convert_to_numpy(out["token_ids"])
    np.testing.assert_array_equal(tokens, recompute_greedy_gpt(model, prompts, 12))
    # Each row continues after its own prompt.
    np.testing.assert_array_equal(tokens[0, :4], prompts[0])
    np.testing.assert_array_equal(tokens[1, :1], prompts[1, :1])


@pytest.mark.parametrize("build", [seq2seq, gpt], ids=["seq2seq", "gpt"])
def test_beam_width_one_equals_greedy(build):
    model = build()
    inputs = (
        sources() if build is seq2seq else np.array([[5, 6, 0], [7, 0, 0]], "int32")
    )
    greedy = Generator(model, max_length=10)(inputs)
    beam = Generator(
        model, max_length=10, search="beam", beam_width=1, length_penalty=0.0
    )(inputs)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(beam["token_ids"]),
        ops.convert_to_numpy(greedy["token_ids"]),
    )


def test_beam_search_beats_myopic_greedy():
    # START -> A (0.6) or B (0.4); A -> A (0.5), END (0.4), B (0.1); B -> END (1).
    # Greedy takes A, then A again and again. The best sequence is START B END
    # (log 0.4 = -0.92) against START A END (log 0.24 = -1.43).
    chain = MarkovDecoder(
        table({START: {A: 0.6, B: 0.4}, A: {A: 0.5, END: 0.4, B: 0.1}, B: {END: 1.0}})
    )
    prompt = np.array([[START]], "int32")
    greedy = Generator(chain, max_length=8)(prompt)
    assert ops.convert_to_numpy(greedy["token_ids"]).tolist() == [[START] + [A] * 7]
    beam = Generator(
        chain, max_length=8, search="beam", beam_width=2, length_penalty=0.0
    )(prompt)
    assert ops.convert_to_numpy(beam["token_ids"]).tolist() == [
        [START, B, END, 0, 0, 0, 0, 0]
    ]
    np.testing.assert_allclose(
        ops.convert_to_numpy(beam["scores"]), [np.log(0.4)], rtol=1e-4
    )
    assert float(ops.convert_to_numpy(greedy["scores"])[0]) < np.log(0.4)


def test_length_penalty_moves_the_choice_toward_longer_outputs():
    # START -> END (0.5) or A (0.5); A -> END (0.9).
    # log P: short -0.69 (1 token), long -0.80 (2 tokens). alpha 0 picks short;
    # alpha 2 divides by ((5+1)/6)^2 = 1 and ((5+2)/6)^2 = 1.36: long wins.
    chain = MarkovDecoder(table({START: {END: 0.5, A: 0.5}, A: {END: 0.9, B: 0.1}}))
    prompt = np.array([[START]], "int32")

    def best(alpha):
        out = Generator(
            chain, max_length=6, search="beam", beam_width=2, length_penalty=alpha
        )(prompt)
        return ops.convert_to_numpy(out["token_ids"])[0].tolist()

    assert best(0.0)[:3] == [START, END, 0]
    assert best(2.0)[:3] == [START, A, END]
    np.testing.assert_allclose(
        ops.convert_to_numpy(gnmt_length_penalty(2, 2.0)), (7 / 6) ** 2, rtol=1e-6
    )


def test_beam_search_stops_early_once_no_beam_can_improve():
    chain = MarkovDecoder(table({START: {END: 0.9, A: 0.1}, A: {END: 1.0}}))
    Generator(chain, max_length=64, search="beam", beam_width=2)(np.array([[START]]))
    # 1 step before the loop + 2 steps until both finished slots are filled.
    assert chain.calls <= 4


def test_greedy_stops_early_when_every_row_ended():
    chain = MarkovDecoder(table({START: {END: 1.0}}))
    Generator(chain, max_length=64)(np.array([[START], [START]]))
    assert chain.calls == 2


@pytest.mark.parametrize("search", ["greedy", "sample"])
def test_a_prompt_is_read_in_one_step(search):
    """Greedy and sampled generation read a prompt's columns in one decoder
    step, then one step per new token (not one per prompt token); a ragged
    batch's loop starts after its shortest prompt. (That the tokens are a
    token-by-token reading's: the prefix-recompute test above.)"""
    chain = MarkovDecoder(table({START: {A: 1.0}, A: {B: 1.0}, B: {A: 1.0}}))
    settings = {"search": search, "seed": 0, "top_k": 1} if search == "sample" else {}
    out = Generator(chain, max_length=8, **settings)(np.array([[START, A, B, A, B]]))
    tokens = ops.convert_to_numpy(out["token_ids"])[0].tolist()
    assert tokens == [START, A, B, A, B, A, B, A]
    # (JAX traces the loop's body once; TensorFlow runs it eagerly.)
    eager_loop = keras.backend.backend() == "tensorflow"
    assert chain.widths == ([5, 1, 1, 1] if eager_loop else [5, 1])
    chain = MarkovDecoder(table({START: {A: 1.0}, A: {B: 1.0}, B: {A: 1.0}}))
    Generator(chain, max_length=8, **settings)(
        np.array([[START, A, B, A, B], [START, A, PAD, PAD, PAD]])
    )
    assert chain.widths == ([5, 1, 1, 1, 1, 1, 1] if eager_loop else [5, 1])


@pytest.mark.parametrize("search", ["greedy", "sample", "beam"])
def test_a_sequence_ends_at_any_of_several_end_ids(search):
    # START -> A (0.9); A -> B (0.9); B -> END (0.9). With end ids [END, B]
    # every search ends at B, one token earlier than at END alone, and pads
    # after it; B as a prompt token does not end the row.
    chain = MarkovDecoder(
        table({START: {A: 0.9, END: 0.1}, A: {B: 0.9, END: 0.1}, B: {END: 1.0}})
    )
    settings = {"search": search, "seed": 0, "top_k": 1} if search == "sample" else {}
    if search == "beam":
        settings = {"search": "beam", "beam_width": 1}

    def run(end_id, prompt=(START,)):
        out = Generator(chain, max_length=6, end_id=end_id, **settings)(
            np.array([prompt], "int32")
        )
        return ops.convert_to_numpy(out["token_ids"])[0].tolist()

    assert run(END) == [START, A, B, END, PAD, PAD]
    assert run([END, B]) == [START, A, B, PAD, PAD, PAD]
    assert run((B, END)) == [START, A, B, PAD, PAD, PAD]
    assert run(np.array([END, B])) == [START, A, B, PAD, PAD, PAD]
    assert run(np.int64(END)) == [START, A, B, END, PAD, PAD]
    if search != "beam":  # beam takes one prompt length per batch; same here
        assert run([END, B], prompt=(START, B)) == [START, B, END, PAD, PAD, PAD]
    generator = Generator(chain, max_length=6, end_id=[B, END, B])
    assert (generator.end_id, generator.end_ids) == (B, (B, END))
    ids = [np.int64(B), np.int32(END)]
    generator = Generator(chain, max_length=6, end_id=ids, pad_id=np.int64(PAD))
    assert generator.end_ids == (B, END) and type(generator.end_ids[0]) is int
    assert type(generator.pad_id) is int


def test_top_k_one_is_greedy_and_a_seed_reproduces_samples():
    model = seq2seq()
    source = sources()
    greedy = ops.convert_to_numpy(Generator(model, max_length=10)(source)["token_ids"])
    top1 = Generator(model, max_length=10, search="sample", top_k=1, seed=3)(source)
    np.testing.assert_array_equal(ops.convert_to_numpy(top1["token_ids"]), greedy)
    sampler = Generator(model, max_length=10, search="sample", temperature=2.0, seed=7)
    first = ops.convert_to_numpy(sampler(source)["token_ids"])
    np.testing.assert_array_equal(
        ops.convert_to_numpy(sampler(source)["token_ids"]), first
    )
    again = Generator(model, max_length=10, search="sample", temperature=2.0, seed=7)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again(source)["token_ids"]), first
    )
    other = Generator(model, max_length=10, search="sample", temperature=2.0, seed=8)
    assert not np.array_equal(ops.convert_to_numpy(other(source)["token_ids"]), first)


def streamed(generator, inputs, **kwargs):
    """The stream's tokens written into the prompt (padding after the end),
    and the generated flags, as `(batch, max_length)` arrays."""
    tokens = np.zeros((len(inputs), generator.max_length), "int32")
    tokens[:, : inputs.shape[1]] = inputs
    if generator.decoder.is_seq2seq:
        tokens[:, 0], tokens[:, 1:] = generator.start_id, 0
    flags = np.zeros_like(tokens, bool)
    for position, ids, generated in generator.stream(inputs, **kwargs):
        tokens[:, position], flags[:, position] = ids, generated
    return tokens, flags


GREEDY = dict(search="greedy")
SAMPLE = dict(search="sample", temperature=1.5, top_p=0.9, seed=5)


# Each search and each model type is in the default run once; the other
# two pairings run with -m slow.
@pytest.mark.parametrize(
    "build, settings",
    [
        pytest.param(seq2seq, GREEDY, id="greedy-seq2seq"),
        pytest.param(gpt, SAMPLE, id="sample-gpt"),
        pytest.param(gpt, GREEDY, id="greedy-gpt", marks=pytest.mark.slow),
        pytest.param(seq2seq, SAMPLE, id="sample-seq2seq", marks=pytest.mark.slow),
    ],
)
def test_stream_yields_the_tokens_and_draws_of_the_whole_search(build, settings):
    model = build()
    inputs = sources(batch=3, length=6, seed=2)
    generator = Generator(model, max_length=14, **settings)
    whole = ops.convert_to_numpy(generator(inputs)["token_ids"])
    for compile_step in (True, False):
        tokens, flags = streamed(generator, inputs, compile_step=compile_step)
        np.testing.assert_array_equal(tokens, whole)
    # Generated: after each row's prompt (or start token), up to its end.
    prompt_lengths = (
        np.ones(3, int) if build is seq2seq else np.sum(inputs != 0, axis=1)
    )
    for row in range(3):
        ended = np.flatnonzero(whole[row] == END)
        last = ended[ended >= prompt_lengths[row]]
        stop = last[0] + 1 if len(last) else generator.max_length
        expected = np.zeros(generator.max_length, bool)
        expected[prompt_lengths[row] : stop] = True
        np.testing.assert_array_equal(flags[row], expected)


def test_stream_stops_once_every_row_ended_and_refuses_beam():
    chain = MarkovDecoder(table({START: {END: 1.0}}))
    steps = list(Generator(chain, max_length=64).stream(np.array([[START]])))
    assert [position for position, _, _ in steps] == [1]
    assert steps[0][1].tolist() == [END] and steps[0][2].tolist() == [True]
    with pytest.raises(ValueError, match="search='beam'"):
        next(Generator(gpt(), max_length=8, search="beam").stream(sources()))


def test_filter_logits_top_k_and_top_p():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32"))
    kept = lambda x: (ops.convert_to_numpy(x) > -1e8).tolist()[0]  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False]
    # 0.5 < 0.7, 0.5 + 0.3 >= 0.7: the nucleus is the first two tokens.
    assert kept(filter_logits(logits, top_p=0.7)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.5)) == [True, False, False, False]
    assert kept(filter_logits(logits, top_p=1.0)) == [True] * 4
    # Shifted so the largest is 0, then scaled (the softmax is the same).
    np.testing.assert_allclose(
        ops.convert_to_numpy(filter_logits(logits, temperature=2.0)),
        (logits - logits.max()) / 2,
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(search="beam", beam_width=0), "beam_width must be an int >= 1"),
        (dict(search="sample", top_p=0.0), r"top_p must be in \(0, 1\]"),
        (dict(search="sample", top_p=1.5), r"top_p must be in \(0, 1\]"),
        (dict(search="sample", top_k=0), "top_k must be a positive int"),
        (dict(search="sample", temperature=0.0), "temperature must be positive"),
        (dict(search="nucleus"), "search must be one of"),
        (dict(max_length=1), "max_length must be an int >= 2"),
        (dict(max_length=40), "at most the model's max_sequence_length"),
        (dict(length_penalty=-1.0), "length_penalty must be >= 0"),
        (dict(end_id=[]), "end_id must be an id or a non-empty list"),
        (dict(end_id=[3, -1]), r"end_id must be an int >= 0. Received: end_id=-1"),
        (dict(end_id=[3, "4"]), "end_id must be an int >= 0"),
        (dict(end_id=np.array([], "int32")), "end_id must be an id or a non-empty"),
        (
            dict(end_id=np.array([[3]])),
            r"end_id must be an int >= 0. Received: end_id=array",
        ),
        (
            dict(end_id=np.array([3.0])),
            r"end_id must be an int >= 0. Received: end_id=3.0",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Generator(gpt(), **{"max_length": 8, **kwargs})


def test_max_length_below_the_prompt_is_refused():
    with pytest.raises(
        ValueError, match=r"max_length \(4\) must exceed the prompt length"
    ):
        Generator(gpt(), max_length=4)(np.ones((1, 5), "int32"))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function")
def test_a_graph_reads_prompts_up_to_the_longest_as_eagerly():
    """In a graph without XLA (the SavedModel's `generate`), the prompt step
    spans the longest prompt, not the input's padded width (the TFLite loop
    model's input is context-wide): the same tokens as eagerly, with the
    shapes a while loop needs, for one row and a ragged batch."""
    import tensorflow as tf

    model = gpt()
    generator = Generator(model, max_length=12, search="greedy")
    graph = tf.function(generator.generate, autograph=False)
    for prompts in ([[5, 6, 7, 0, 0, 0, 0]], [[5, 6, 7, 8, 0, 0], [9, 0, 0, 0, 0, 0]]):
        prompts = np.array(prompts, "int32")
        new_tokens = np.full(len(prompts), 4, "int32")
        eager = generator.generate(prompts, max_new_tokens=new_tokens)
        got = graph(tf.constant(prompts), max_new_tokens=tf.constant(new_tokens))
        np.testing.assert_array_equal(
            got["token_ids"].numpy(), ops.convert_to_numpy(eager["token_ids"])
        )


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function")
# Beam search holds greedy's steps (it scores, reorders caches and ends
# hypotheses) and sampling its seeded draw; greedy compiles in the slow run.
@pytest.mark.parametrize(
    "search",
    [
        pytest.param("greedy", marks=pytest.mark.slow),
        pytest.param("beam", marks=pytest.mark.integration),
        "sample",
    ],
)
@pytest.mark.parametrize("build", [seq2seq, gpt], ids=["seq2seq", "gpt"])
def test_the_whole_search_compiles_with_xla(search, build):
    """Under XLA the same tokens as eagerly; a GPT's ragged prompts are read
    in one step of their static width there, up to the longest prompt
    eagerly."""
    model = build()
    if build is seq2seq:
        source = sources()
    else:
        source = np.array([[5, 6, 7, 8, 0], [9, 0, 0, 0, 0], [10, 11, 12, 0, 0]])
    generator = Generator(model, max_length=10, search=search, beam_width=3, seed=1)
    eager = generator(source)
    compiled = generator.compiled(jit_compile=True)(source)
    # Sampling too: the random stream is a hash of (seed, position), not
    # the backend's generator.
    np.testing.assert_array_equal(
        ops.convert_to_numpy(compiled["token_ids"]),
        ops.convert_to_numpy(eager["token_ids"]),
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(compiled["scores"]),
        ops.convert_to_numpy(eager["scores"]),
        rtol=1e-4,
        atol=1e-4,
    )
