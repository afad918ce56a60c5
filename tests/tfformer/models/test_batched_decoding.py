"""Batched decoding with one position per row (`CachedDecoder.step` with a
`(batch,)` index): sequences of different lengths, prefilled alone and
stacked into one cache, step together and each gets the logits the whole
model computes on its own sequence; a row's step writes only its own slot."""

import numpy as np
import pytest
from keras import ops

from tfformer.models import gpt_decoder
from tfformer.models.cached_decoder import CachedDecoder

VOCABULARY, CONTEXT = 24, 16


def model(position):
    extra = {}
    if position == "rotary":  # Llama's shape: grouped-query attention
        extra = {"num_key_value_heads": 2, "normalization": "rms", "gated_ffn": True}
    return gpt_decoder(
        VOCABULARY,
        num_layers=2,
        hidden_dim=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        max_sequence_length=CONTEXT,
        position=position,
        **extra,
    )


@pytest.mark.parametrize("position", ["learned", "rotary"])
def test_rows_at_different_positions_step_as_each_would_alone(position):
    lm = model(position)
    decoder = CachedDecoder(lm)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(4, VOCABULARY, n).tolist() for n in (5, 2, 9)]
    # Each prompt prefilled alone (batch 1, scalar index), then the caches
    # stacked into one batch of 3.
    rows = []
    for prompt in prompts:
        cache = decoder.init_cache(1, CONTEXT)
        _, cache, _ = decoder.step(ops.convert_to_tensor([prompt]), cache, 0)
        rows.append(cache)
    # The slots past each prompt hold a former sequence's keys and values
    # (noise here): nothing may read them.
    cache = []
    for layer in range(len(rows[0])):
        stacked = np.concatenate([ops.convert_to_numpy(r[layer]) for r in rows])
        for row, prompt in enumerate(prompts):
            stacked[row, :, :, len(prompt) :] = rng.normal(size=(1,))
        cache.append(ops.convert_to_tensor(stacked))
    cache = tuple(cache)
    sequences = [list(p) for p in prompts]
    for _ in range(4):
        tokens = [int(rng.integers(4, VOCABULARY)) for _ in prompts]
        positions = [len(s) for s in sequences]
        logits, cache, _ = decoder.step(
            ops.convert_to_tensor([[t] for t in tokens]),
            cache,
            ops.convert_to_tensor(positions, "int32"),
        )
        for row, token in enumerate(tokens):
            sequences[row].append(token)
            whole = lm({"token_ids": np.array([sequences[row]])})
            np.testing.assert_allclose(
                ops.convert_to_numpy(logits)[row, 0],
                ops.convert_to_numpy(whole)[0, -1],
                atol=2e-5,
            )
    # Each row wrote its own slots only: row 1 (2 + 4 tokens) kept its noise
    # from slot 6 on.
    before = ops.convert_to_numpy(rows[1][0])[0, :, :, :6]
    first = ops.convert_to_numpy(cache[0])
    assert np.all(first[1, :, :, 6:] == first[1, 0, 0, 6, 0])
    np.testing.assert_array_equal(first[1, :, :, :2], before[:, :, :2])


def test_the_attention_layer_hides_each_rows_later_slots_without_a_causal_mask():
    """One position per row against the scalar position, row by row, with
    noise in every slot: each row reads the slots up to its own position."""
    from tfformer.layers import MultiHeadAttention

    rng = np.random.default_rng(1)
    layer = MultiHeadAttention(num_heads=2, key_dim=8, num_key_value_heads=1)
    x = rng.normal(size=(3, 1, 16)).astype("float32")
    cache = rng.normal(size=(3, 2, 1, CONTEXT, 8)).astype("float32")
    positions = [4, 0, 11]
    out, new = layer(x, cache=cache, cache_update_index=np.array(positions, "int32"))
    for row, position in enumerate(positions):
        alone, alone_cache = layer(
            x[row : row + 1], cache=cache[row : row + 1], cache_update_index=position
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(out)[row], ops.convert_to_numpy(alone)[0], atol=1e-5
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(new)[row],
            ops.convert_to_numpy(alone_cache)[0],
            atol=1e-6,
        )


def test_one_position_per_row_takes_one_token_per_row():
    decoder = CachedDecoder(model("learned"))
    cache = decoder.init_cache(2, CONTEXT)
    with pytest.raises(ValueError, match=r"one token per row \(T = 1\)"):
        decoder.step(
            ops.convert_to_tensor([[4, 5], [6, 7]]),
            cache,
            ops.convert_to_tensor([0, 3], "int32"),
        )


def test_a_causal_mask_with_one_start_per_row():
    from tfformer.layers import causal_mask

    mask = ops.convert_to_numpy(causal_mask(2, 5, ops.convert_to_tensor([0, 3])))
    np.testing.assert_array_equal(
        mask.astype(int),
        [
            [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]],
            [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]],
        ],
    )
    assert ops.convert_to_numpy(causal_mask(2, 3, 1)).shape == (1, 2, 3)
