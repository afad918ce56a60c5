"""The decoder-only language model: contract, causality, cached decoding."""

import numpy as np
import pytest

from tests.testing import FIT_STEP, run_model_test
from tfformer.models import CachedDecoder, gpt_decoder

SMALL = dict(
    num_layers=2,
    hidden_dim=16,
    num_heads=4,
    intermediate_dim=32,
    dropout=0.1,
    max_sequence_length=16,
)
TOKENS = np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]], "int32")
# The contracts' model: one layer, since a second adds nothing they check
# and doubles the XLA compile of their fit step.
ONE_LAYER = {**SMALL, "num_layers": 1}


@pytest.mark.parametrize(
    "position, jit_compile",
    [
        # The default tier's one XLA-compiled fit step (see `FIT_STEP`).
        ("rotary", True),
        *(
            pytest.param(position, True, marks=pytest.mark.integration)
            for position in ("learned", "sinusoidal")
        ),
    ],
    ids=["rotary-xla", "learned-xla", "sinusoidal-xla"],
)
def test_model_contract(position, jit_compile, tmp_path):
    """Every position embedding, each with an XLA-compiled fit step."""
    run_model_test(
        lambda: gpt_decoder(30, **ONE_LAYER, position=position, num_key_value_heads=2),
        {"token_ids": TOKENS},
        np.roll(TOKENS, -1, axis=1),
        tmp_path,
        jit_compile=jit_compile,
    )


LLAMA = dict(
    position="rotary",
    normalization="rms",
    gated_ffn=True,
    activation="silu",
    use_bias=False,
    tie_embeddings=False,
    num_key_value_heads=2,
)


@FIT_STEP
def test_llama_style_model_contract(tmp_path, jit_compile):
    model = run_model_test(
        lambda: gpt_decoder(30, **ONE_LAYER, **LLAMA),
        {"token_ids": TOKENS},
        np.roll(TOKENS, -1, axis=1),
        tmp_path,
        jit_compile=jit_compile,
    )
    assert not [w for w in model.weights if w.name in ("bias", "beta")]
    assert type(model.backbone.final_norm).__name__ == "RMSNormalization"


def test_llama_style_cached_decoding_equals_the_full_pass():
    model = gpt_decoder(30, **{**SMALL, "dropout": 0.0}, **LLAMA)
    full = np.asarray(model({"token_ids": TOKENS[:1]}))
    decoder = CachedDecoder(model)
    cache = decoder.init_cache(1, 6)
    steps = []
    for i in range(6):
        logits, cache, _ = decoder.step(TOKENS[:1, i : i + 1], cache, i)
        steps.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


@pytest.mark.parametrize("position", ["learned", "rotary"])
def test_no_causal_leakage(position):
    model = gpt_decoder(30, **SMALL, position=position)
    base = np.asarray(model({"token_ids": TOKENS}))
    for t in range(1, 6):
        changed = TOKENS.copy()
        changed[0, t] = 29
        out = np.asarray(model({"token_ids": changed}))
        np.testing.assert_allclose(out[0, :t], base[0, :t], atol=1e-5)
        assert not np.allclose(out[0, t], base[0, t])


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rotary"])
def test_cached_decoding_equals_full_pass(position):
    model = gpt_decoder(30, **SMALL, position=position, num_key_value_heads=1)
    full = np.asarray(model({"token_ids": TOKENS[:1]}))
    decoder = CachedDecoder(model)
    cache = decoder.init_cache(1, 10)
    # A 2-token prompt at once, then one token per step.
    logits, cache, _ = decoder.step(TOKENS[:1, :2], cache, 0)
    steps = [np.asarray(logits)]
    for i in range(2, 6):
        logits, cache, _ = decoder.step(TOKENS[:1, i : i + 1], cache, i)
        steps.append(np.asarray(logits))
    steps = np.concatenate(steps, 1)
    np.testing.assert_allclose(steps, full, atol=1e-4)
    np.testing.assert_array_equal(steps.argmax(-1), full.argmax(-1))


def test_bad_arguments():
    with pytest.raises(ValueError, match="position must be one of"):
        gpt_decoder(10, position="alibi")
    from tfformer.models import LlamaBackbone

    sizes = dict(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8)
    with pytest.raises(ValueError, match="rope_scaling of rope_type llama3 takes"):
        LlamaBackbone(10, rope_scaling={"rope_type": "llama3"}, **sizes)
    with pytest.raises(ValueError, match="head_dim must be a positive int"):
        LlamaBackbone(10, head_dim=0, **sizes)
    with pytest.raises(ValueError, match='rotary_scaling needs position="rotary"'):
        gpt_decoder(10, position="learned", rotary_scaling={"rope_type": "llama3"})
    with pytest.raises(ValueError, match="vocabulary_size must be a positive int"):
        gpt_decoder(-1)
    with pytest.raises(ValueError, match="must be a Seq2SeqLM or CausalLM"):
        from tfformer.models import vit

        CachedDecoder(
            vit(
                8,
                2,
                patch_size=4,
                num_layers=1,
                hidden_dim=8,
                num_heads=2,
                intermediate_dim=8,
            )
        )
