"""Beam search (cached, batched) against beam search by prefix recompute.

The reference (`beam_reference.py`) takes one example at a time and re-runs
the model's full forward pass on every hypothesis prefix, so the key/value
cache, its reordering by beam parent, the tiling of encoder outputs, ragged
prompts inside one batch and the length penalty are all checked against
something that has none of them. Models are small and random (untied output
projections, so the next token is not simply the last one again), with seeds
chosen so that the searches finish at different lengths, some never finish,
the wider beams find other hypotheses than the narrow ones, and the unmasked
best token is sometimes padding, which must never be generated.

Readings of the documented semantics (the `Generator` docstrings), which the
reference follows:
- the length in the GNMT penalty counts generated tokens, the end token
  included, not the start token or the prompt;
- the hypothesis returned is the best *finished* one; a hypothesis that
  reaches max_length without the end token is returned only when none
  finished, and is then normalized by its max_length - prompt_length tokens;
- early stopping must never change the result (the reference never stops);
- each GPT row generates after its own prompt, whatever the other rows' prompt
  lengths, so a row can generate max_length - its prompt length tokens.
"""

import keras
import numpy as np
import pytest
from keras import ops

from tfformer.decoding import Generator
from tfformer.models import gpt_decoder, transformer_seq2seq

from . import beam_reference
from .test_generator import MarkovDecoder

# A one-token prefix gives Keras's attention a softmax over one key.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis")

VOCABULARY = 16
MAX_LENGTH = 10
START, END, PAD = 2, 3, 0
# A cached and an uncached forward pass differ by ~1e-6 in float32 log P: a
# decision closer than this could go either way, and is not a disagreement.
TIE_MARGIN = 1e-5
# Seeds of the two models (and their inputs), picked for what the searches
# exercise; `test_the_cases_exercise_the_search` checks it.
SEEDS = {"seq2seq": 3, "gpt": 7}
# Padded sources (lengths 6, 3, 4) and ragged right-padded prompts (4, 1, 2).
SOURCE_LENGTHS = (6, 3, 4)
PROMPT_LENGTHS = (4, 1, 2)


def _ids(lengths, columns, seed):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), columns), "int32")
    for row, n in enumerate(lengths):
        # Ids 4.. only: no padding, start or end inside a source or prompt.
        ids[row, :n] = rng.integers(4, VOCABULARY, n)
    return ids


class Case:
    """A model, its padded batch, and per example the unpadded prefix the
    search starts from and a `PrefixScorer` (shared by every width)."""

    def __init__(self, model, inputs, seq2seq):
        self.model = model
        self.inputs = inputs
        self.prefixes, self.scorers = [], []
        for row in inputs:
            unpadded = row[row != PAD]
            if seq2seq:
                self.prefixes.append([START])
                self.scorers.append(beam_reference.PrefixScorer(model, unpadded))
            else:
                self.prefixes.append(list(unpadded))
                self.scorers.append(beam_reference.PrefixScorer(model))


@pytest.fixture(scope="module")
def seq2seq():
    keras.utils.set_random_seed(SEEDS["seq2seq"])
    model = transformer_seq2seq(
        VOCABULARY,
        VOCABULARY,
        num_encoder_layers=1,
        num_decoder_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_sequence_length=MAX_LENGTH,
        num_key_value_heads=1,
        tie_embeddings="none",
    )
    return Case(model, _ids(SOURCE_LENGTHS, 6, SEEDS["seq2seq"]), seq2seq=True)


@pytest.fixture(scope="module")
def gpt():
    keras.utils.set_random_seed(SEEDS["gpt"])
    model = gpt_decoder(
        VOCABULARY,
        num_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_sequence_length=MAX_LENGTH,
        tie_embeddings=False,
    )
    return Case(model, _ids(PROMPT_LENGTHS, 4, SEEDS["gpt"]), seq2seq=False)


# Every width and both penalties for both models. The default run keeps
# the cases where the penalty changes the choice (seq2seq w4, gpt w5) and
# where nothing finishes (w2); the integration tier, the other widths at
# one penalty each; the slow run, the rest.
DEFAULT = {
    ("seq2seq", 2, 0.6),
    ("seq2seq", 4, 0.6),
    ("gpt", 2, 0.0),
    ("gpt", 5, 0.6),
}
INTEGRATION = {
    ("seq2seq", 3, 0.0),
    ("seq2seq", 5, 0.0),
    ("gpt", 3, 0.6),
    ("gpt", 4, 0.0),
}
SWEEP = [
    pytest.param(
        kind,
        width,
        alpha,
        marks=()
        if (kind, width, alpha) in DEFAULT
        else pytest.mark.integration
        if (kind, width, alpha) in INTEGRATION
        else pytest.mark.slow,
        id=f"{kind}-w{width}-a{alpha}",
    )
    for kind in ("seq2seq", "gpt")
    for width in (2, 3, 4, 5)
    for alpha in (0.0, 0.6)
]


def _generated_length(row, prompt_length):
    """Generated tokens in a returned row: through the first end token after
    the prompt, else to max_length; checks that only padding follows."""
    ends = np.flatnonzero(row[prompt_length:] == END)
    if len(ends) == 0:
        return len(row) - prompt_length
    n = ends[0] + 1
    np.testing.assert_array_equal(row[prompt_length + n :], PAD)
    return n


@pytest.mark.parametrize("kind, width, alpha", SWEEP)
def test_beam_search_equals_prefix_recompute(kind, width, alpha, request):
    case = request.getfixturevalue(kind)
    out = Generator(
        case.model,
        max_length=MAX_LENGTH,
        search="beam",
        beam_width=width,
        length_penalty=alpha,
        start_id=START,
        end_id=END,
        pad_id=PAD,
    )(case.inputs)
    tokens = ops.convert_to_numpy(out["token_ids"])
    scores = ops.convert_to_numpy(out["scores"])
    for row, (prefix, scorer) in enumerate(
        zip(case.prefixes, case.scorers, strict=True)
    ):
        expected = beam_reference.beam_search(
            scorer,
            prefix,
            max_length=MAX_LENGTH,
            width=width,
            alpha=alpha,
            end_id=END,
            pad_id=PAD,
        )
        assert expected.margin > TIE_MARGIN, (
            f"row {row}: a near-tie ({expected.margin:.1e}) makes this case "
            "ambiguous; choose another seed"
        )
        padded = expected.tokens + [PAD] * (MAX_LENGTH - len(expected.tokens))
        np.testing.assert_array_equal(tokens[row], padded, err_msg=f"row {row}")
        np.testing.assert_allclose(
            scores[row], expected.score, rtol=0, atol=1e-4, err_msg=f"row {row}"
        )
        # Independently of any search: the score is the model's teacher-forced
        # log P of the returned sequence over the penalty of its length.
        n = _generated_length(tokens[row], len(prefix))
        sequence = tokens[row, : len(prefix) + n]
        log_p = scorer.sequence(sequence, len(prefix))
        np.testing.assert_allclose(
            scores[row],
            log_p / beam_reference.gnmt_penalty(n, alpha),
            rtol=0,
            atol=1e-4,
            err_msg=f"row {row}",
        )


def _reference(case, row, width, alpha, pad_id=PAD):
    return beam_reference.beam_search(
        case.scorers[row],
        case.prefixes[row],
        max_length=MAX_LENGTH,
        width=width,
        alpha=alpha,
        end_id=END,
        pad_id=pad_id,
    )


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the seeds were chosen for the TensorFlow backend's weight draws; "
    "other backends draw other random models (the equality tests still run)",
)
def test_the_cases_exercise_the_search(seq2seq, gpt):
    """The seeds give searches where every part of beam search matters, so a
    Generator that got one part wrong cannot agree with the reference."""
    for case, width in ((seq2seq, 4), (gpt, 5)):
        # The length penalty changes which finished hypothesis wins.
        plain, penalized = (_reference(case, 1, width, a) for a in (0.0, 0.6))
        assert plain.finished and penalized.finished
        assert len(plain.tokens) != len(penalized.tokens)
        # Nothing finishes with two beams: the best alive one is returned.
        assert not _reference(case, 1, 2, 0.0).finished
        # Results end at several lengths.
        lengths = {
            len(_reference(case, r, w, 0.0).tokens) for r in range(3) for w in (3, 5)
        }
        assert len(lengths) >= 3, lengths
        # Without ruling padding out, the search would generate it.
        assert (
            _reference(case, 1, 2, 0.0, pad_id=None).tokens
            != _reference(case, 1, 2, 0.0).tokens
        )
    # A wider beam finds another hypothesis.
    assert (
        _reference(seq2seq, 0, 2, 0.0).tokens != _reference(seq2seq, 0, 5, 0.0).tokens
    )


class ChainScorer:
    """`PrefixScorer`'s interface over a transition table: the next token's
    log P given the last token."""

    def __init__(self, probabilities):
        self.log_table = np.log(np.maximum(probabilities, 1e-12))

    def next_token(self, prefixes):
        return np.stack([self.log_table[prefix[-1]] for prefix in prefixes])


def test_stopping_early_would_miss_a_longer_hypothesis():
    # START -> END (0.37), A (0.35), B (0.28); A -> END; B -> 6 -> 7 -> 8 -> END.
    # With alpha 0.6 and two beams, two hypotheses finish by step 2:
    # START A END (-1.05 / 1.094 = -0.960) and START END (-0.994 / 1 = -0.994).
    # The alive START B 6 (log P -1.273) is below both, but can still win
    # once its length is counted: START B 6 7 8 END scores -1.273 / 1.359 =
    # -0.937. Stopping needs the bound log P / lp(longest possible length).
    probabilities = np.full((10, 10), 1e-9)
    for token, nxt, p in [
        (START, END, 0.37),
        (START, 4, 0.35),
        (START, 5, 0.28),
        (4, END, 1.0),
        (5, 6, 1.0),
        (6, 7, 1.0),
        (7, 8, 1.0),
        (8, END, 1.0),
    ]:
        probabilities[token, nxt] = p
    out = Generator(
        MarkovDecoder(probabilities),
        max_length=8,
        search="beam",
        beam_width=2,
        length_penalty=0.6,
    )(np.array([[START]], "int32"))
    expected = beam_reference.beam_search(
        ChainScorer(probabilities),
        [START],
        max_length=8,
        width=2,
        alpha=0.6,
        end_id=END,
        pad_id=PAD,
    )
    assert expected.tokens == [START, 5, 6, 7, 8, END]
    np.testing.assert_allclose(
        expected.score, np.log(0.28) / (10 / 6) ** 0.6, rtol=1e-6
    )
    np.testing.assert_array_equal(
        ops.convert_to_numpy(out["token_ids"])[0], [START, 5, 6, 7, 8, END, PAD, PAD]
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(out["scores"])[0], expected.score, rtol=0, atol=1e-5
    )
