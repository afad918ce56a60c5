"""A key/value cache kept between generations: each turn of a growing
conversation reads only its new ids, and generates what a fresh
generation (or re-running the whole model on every prefix) does."""

import numpy as np
import pytest
from keras import ops

from tests.tfformer.decoding.test_generator import (
    END,
    PAD,
    START,
    A,
    B,
    MarkovDecoder,
    gpt,
    recompute_greedy_gpt,
    seq2seq,
    table,
)
from tfformer.decoding import DecodingSession, Generator


def tokens_of(session, ids, new, compile_step=True):
    """The ids a session generates after `ids` (at most `new`)."""
    out = []
    steps = session.stream(ids, max_new_tokens=new, compile_step=compile_step)
    for _, token, generated in steps:
        if generated[0]:
            out.append(int(token[0]))
    return out


def test_each_turn_reads_only_the_ids_after_the_shared_prefix():
    """On a hand-made chain the decoder's step widths show what is read: the
    first prompt whole, a continuation only its new ids, a prompt that
    departs early everything after the shared prefix, the same prompt again
    its last id (the next token's logits need one column). (Eager steps:
    a graph calls the chain once, when it is traced.)"""
    chain = MarkovDecoder(table({START: {A: 1.0}, A: {B: 1.0}, B: {A: 1.0}}))
    session = DecodingSession(Generator(chain, max_length=16))
    assert tokens_of(session, [START, A], 2, False) == [B, A]
    # Two new tokens, then the row ends (a step writes padding, not kept).
    assert chain.widths == [2, 1, 1, 1] and session.ids == [START, A, B, A]
    chain.widths.clear()
    assert tokens_of(session, [START, A, B, A, B, B], 1, False) == [A]
    assert chain.widths[0] == 2 and session.reused == 4
    assert session.ids == [START, A, B, A, B, B, A]
    chain.widths.clear()
    assert tokens_of(session, [START, B, B], 1, False) == [A]
    assert chain.widths[0] == 2 and session.reused == 1
    chain.widths.clear()
    assert tokens_of(session, [START, B, B], 1, False) == [A]
    assert chain.widths[0] == 1 and session.reused == 2


def test_a_conversation_generates_what_recomputing_every_prefix_does():
    """A random GPT, three turns of a growing conversation (each prompt the
    last prompt, its reply and new ids; the last one cut at its start):
    greedy replies equal a whole-model pass over every prefix, and sampled
    ones a fresh generator's with the same seed."""
    model = gpt(32, context=48)
    rng = np.random.default_rng(3)
    greedy = DecodingSession(Generator(model, max_length=48, end_id=END))
    sample_settings = dict(search="sample", temperature=1.3, seed=7, end_id=END)
    sample = DecodingSession(Generator(model, max_length=48, **sample_settings))
    fresh = Generator(model, max_length=48, **sample_settings)
    prompt = [START, *rng.integers(4, 32, 6).tolist()]
    held = []  # the ids the session's cache holds
    for turn in range(3):
        reply = tokens_of(greedy, prompt, 6)
        whole = recompute_greedy_gpt(model, np.array([prompt]), len(prompt) + 6)[0]
        assert reply == [int(t) for t in whole[len(prompt) :] if t != PAD]
        assert greedy.reused == [0, len(held), 1][turn]
        drawn = tokens_of(sample, prompt, 6)
        out = fresh.generate(np.array([prompt]), max_new_tokens=np.array([6]))
        drawn_fresh = ops.convert_to_numpy(out["token_ids"])[0, len(prompt) :]
        assert drawn == [int(t) for t in drawn_fresh if t != PAD]
        held = prompt + reply
        new = rng.integers(4, 32, 5).tolist()
        if turn == 0:
            prompt = held + new
        else:  # the oldest ids cut out after the start token
            prompt = [START, 4 if held[1] != 4 else 5, *held[6:], *new]


@pytest.mark.parametrize(
    "make, ids, new, message",
    [
        (lambda: Generator(seq2seq(), max_length=8), None, 0, "decoder-only"),
        (
            lambda: Generator(MarkovDecoder(table({})), max_length=8, search="beam"),
            None,
            0,
            "search='beam'",
        ),
        (
            lambda: Generator(MarkovDecoder(table({})), max_length=8),
            [START, PAD, A],
            1,
            r"without the pad id \(0\). Received: 3 ids \[2, 0, 4\]",
        ),
        (
            lambda: Generator(MarkovDecoder(table({})), max_length=8),
            [],
            1,
            "prompt_ids must be 1 to 7 ids",
        ),
        (
            lambda: Generator(MarkovDecoder(table({})), max_length=8),
            [START, A, B],
            6,
            r"max_new_tokens must be in \[0, 5\] .*Received: 6",
        ),
        (
            lambda: Generator(MarkovDecoder(table({})), max_length=8),
            [START] * 8,
            0,
            r"prompt_ids must be 1 to 7 ids .*Received: 8 ids",
        ),
        (
            lambda: Generator(MarkovDecoder(table({})), max_length=8),
            [START, 1.5],
            1,
            "prompt_ids must be a list of ints",
        ),
    ],
)
def test_bad_sessions_and_prompts_are_named(make, ids, new, message):
    with pytest.raises(ValueError, match=message):
        session = DecodingSession(make())
        list(session.stream(ids, max_new_tokens=new))


def test_numpy_ids_are_ids():
    chain = MarkovDecoder(table({START: {A: 1.0}, A: {B: 1.0}, B: {A: 1.0}}))
    session = DecodingSession(Generator(chain, max_length=8))
    assert tokens_of(session, np.array([START, A], "int32"), np.int64(1)) == [B]


def test_the_cache_grows_with_the_conversation():
    """The cache has a power of two of slots from 64 (the generator's
    max_length at most), one more than the prompt and its new tokens; growing,
    it keeps what it holds: greedy replies equal re-running the model on
    every prefix, the earlier turns' ids still reused."""
    model = gpt(32, context=160)
    rng = np.random.default_rng(5)
    session = DecodingSession(Generator(model, max_length=160, end_id=END))
    prompt, capacities, held = [START, *rng.integers(4, 32, 50).tolist()], [], 0
    # Turn 2: 58 ids and 6 new ones are 64, and the step after them writes
    # a 65th slot. Turn 3 reuses all 64.
    for more in (1, 20, 60):
        reply = tokens_of(session, prompt, 6)
        whole = recompute_greedy_gpt(model, np.array([prompt]), len(prompt) + 6)[0]
        assert reply == [int(t) for t in whole[len(prompt) :] if t != PAD]
        capacities.append(session.capacity)
        assert session.reused == held  # (0 at first)
        held = len(prompt) + len(reply)
        prompt = prompt + reply + rng.integers(4, 32, more).tolist()
    assert capacities == [64, 128, 128]
    tokens_of(session, prompt[:150], 9)  # 150 + 9 + 1 slots: the context
    assert session.capacity == 160
