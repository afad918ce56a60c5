"""The encoder-decoder model: contract, causality, padding, cached decoding."""

import numpy as np
import pytest

from tests.testing import ON_TENSORFLOW, run_model_test
from tfformer.models import CachedDecoder, transformer_seq2seq

SMALL = dict(
    num_encoder_layers=2,
    num_decoder_layers=2,
    hidden_dim=16,
    num_heads=2,
    intermediate_dim=32,
    dropout=0.1,
    max_sequence_length=16,
)
SOURCE = np.array([[5, 6, 7, 8, 0, 0], [3, 4, 5, 6, 7, 9]], "int32")
TARGET = np.array([[1, 10, 11, 12, 13], [1, 14, 15, 0, 0]], "int32")


def _inputs(source=SOURCE, target=TARGET):
    return {"encoder_token_ids": source, "decoder_token_ids": target}


@pytest.mark.parametrize(
    "options, jit_compile",
    [
        pytest.param(dict(), False, marks=ON_TENSORFLOW),
        pytest.param(dict(), True, marks=pytest.mark.integration),
        # In the slow run only: "paper" keeps the contract in the other tiers.
        pytest.param(
            dict(tie_embeddings="all", normalize_first=True, position="learned"),
            True,
            marks=pytest.mark.slow,
        ),
        pytest.param(
            dict(tie_embeddings="none", num_key_value_heads=1),
            True,
            marks=pytest.mark.slow,
        ),
    ],
    ids=["paper-graph", "paper-xla", "prenorm_shared_learned", "untied_mqa"],
)
def test_model_contract(options, jit_compile, tmp_path):
    """The contract, with the fit step of `FIT_STEP`'s tiers."""
    # One layer each side: a second adds nothing the contract checks, and
    # doubles the XLA compile of its fit step.
    one_layer = {**SMALL, "num_encoder_layers": 1, "num_decoder_layers": 1}
    run_model_test(
        lambda: transformer_seq2seq(20, 20, **one_layer, **options),
        _inputs(),
        np.roll(TARGET, -1, axis=1),
        tmp_path,
        jit_compile=jit_compile,
    )


def test_no_causal_leakage_in_the_decoder():
    model = transformer_seq2seq(20, 20, **SMALL)
    base = np.asarray(model(_inputs()))
    for t in range(1, 5):
        changed = TARGET.copy()
        changed[:, t] = 19
        out = np.asarray(model(_inputs(target=changed)))
        np.testing.assert_allclose(out[:, :t], base[:, :t], atol=1e-5)


def test_source_padding_changes_nothing():
    model = transformer_seq2seq(20, 20, **SMALL)
    base = np.asarray(model(_inputs()))
    padded = np.pad(SOURCE, ((0, 0), (0, 3)))
    np.testing.assert_allclose(model(_inputs(source=padded)), base, atol=1e-5)


def test_target_padding_changes_nothing_at_real_positions():
    model = transformer_seq2seq(20, 20, **SMALL)
    base = np.asarray(model(_inputs()))
    padded = np.asarray(model(_inputs(target=np.pad(TARGET, ((0, 0), (0, 2))))))
    real = TARGET != 0
    np.testing.assert_allclose(padded[:, :5][real], base[real], atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_cached_decoding_equals_full_pass(normalize_first):
    model = transformer_seq2seq(
        20, 24, **SMALL, normalize_first=normalize_first, num_key_value_heads=1
    )
    full = np.asarray(model(_inputs()))
    decoder = CachedDecoder(model)
    encoded = decoder.encode(SOURCE)
    cache, cross, steps = decoder.init_cache(2, 8), None, []
    for i in range(TARGET.shape[1]):
        logits, cache, cross = decoder.step(
            TARGET[:, i : i + 1], cache, i, encoded, cross
        )
        steps.append(np.asarray(logits))
    steps = np.concatenate(steps, 1)
    real = TARGET != 0
    np.testing.assert_allclose(steps[real], full[real], atol=1e-4)
    np.testing.assert_array_equal(steps.argmax(-1)[real], full.argmax(-1)[real])


def test_tied_embeddings_share_one_matrix():
    def count(tie):
        return transformer_seq2seq(30, 30, **SMALL, tie_embeddings=tie).count_params()

    # "decoder" saves the output projection (30 x 16); "all" also the source table.
    assert count("none") - count("decoder") == 30 * 16
    assert count("decoder") - count("all") == 30 * 16


def test_bad_arguments():
    with pytest.raises(ValueError, match="tie_embeddings must be one of"):
        transformer_seq2seq(10, 10, tie_embeddings="both")
    with pytest.raises(ValueError, match="one shared vocabulary"):
        transformer_seq2seq(10, 12, tie_embeddings="all")
    with pytest.raises(ValueError, match="num_encoder_layers must be a positive int"):
        transformer_seq2seq(10, 10, num_encoder_layers=0)
    with pytest.raises(ValueError, match="hidden_dim must be divisible by num_heads"):
        transformer_seq2seq(10, 10, hidden_dim=10, num_heads=3)
    model = transformer_seq2seq(
        10, 10, **{**SMALL, "max_sequence_length": 4}, position="learned"
    )
    with pytest.raises(ValueError, match="longer than the position table"):
        model(_inputs(source=np.ones((1, 6), "int32"), target=np.ones((1, 3), "int32")))
