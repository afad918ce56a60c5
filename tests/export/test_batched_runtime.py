"""Several conversations per model: a text generator exported with
`--decode-batch B` steps B sequences in one `decode_batch` call, each at
its own position, and `generate.py`'s `BatchedGenerator` lets sequences
join and leave between steps. Each sequence gets the tokens (and
log-probabilities) it gets alone from `LiteRTGenerator.generate`, greedy and
sampled; bad batches and ids are named."""

import numpy as np
import pytest

from tfformer.export.runtimes.generate import BatchedGenerator, LiteRTGenerator
from tfformer.export.tflite import export_tflite

BATCH = 3


@pytest.fixture(scope="module")
def model(tiny_gpt_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("batched") / "device"
    return export_tflite(
        tiny_gpt_run, str(out), decode_batch=BATCH, progress=lambda *_: None
    )


def ids(text):
    return [b + 4 for b in text.encode("utf-8")]


REQUESTS = [
    (ids("to be or"), 12, {"greedy": True}),
    (ids("the"), 20, {"top_k": 5, "seed": 3}),
    (ids("what light through yonder"), 6, {"temperature": 0.7, "seed": 11}),
    (ids("O"), 25, {"top_p": 0.9, "seed": 2}),
    (ids("and then"), 9, {"greedy": True}),
    (ids("it is the east"), 0, {"greedy": True}),
]


def test_sequences_that_join_and_leave_get_what_they_get_alone(model):
    """Six requests through three rows: three join, two more as rows free
    up, one asks for no tokens; one is left early. Each ends with the
    tokens of `generate` alone (the early one with their first ones)."""
    alone = LiteRTGenerator(model)
    batch = BatchedGenerator(model)
    waiting = list(enumerate(REQUESTS))
    joined, steps, left = {}, 0, None
    while waiting or batch.live:
        while waiting and (None in batch.rows or waiting[0][1][1] == 0):
            k, (prompt, new, settings) = waiting.pop(0)
            joined[k] = batch.join(prompt, new, **settings)
        if batch.live:
            chosen = batch.step()
            steps += 1
            assert set(chosen) <= set(joined.values())
        if steps == 4 and left is None:
            left = joined[1]
            batch.leave(left)
    # Fewer calls than one decode per token of every sequence alone.
    assert steps < sum(new for _, new, _ in REQUESTS)
    for k, (prompt, new, settings) in enumerate(REQUESTS):
        expected, expected_log_p = alone.generate(prompt, new, **settings)
        got, got_log_p = batch.tokens(joined[k])
        if joined[k] == left:
            assert 0 < len(got) < len(expected)
            expected, expected_log_p = expected[: len(got)], expected_log_p[: len(got)]
        assert got == expected, k
        np.testing.assert_allclose(got_log_p, expected_log_p, atol=1e-4)


def test_one_step_is_one_call_of_every_rows_logits(model):
    """`decode_batch` against `decode` row by row, rows at positions 5, 0
    and 17 of different caches."""
    alone = LiteRTGenerator(model)
    batch = BatchedGenerator(model)
    prompts = [ids("hello t"), ids(""), ids("a longer prompt to t")]
    caches, tokens, positions = [], [], []
    for prompt in prompts:
        cache = alone.prefill(prompt[:-1], alone.new_cache()) if prompt else None
        caches.append(cache if cache is not None else alone.new_cache())
        tokens.append(prompt[-1] if prompt else 2)
        positions.append(max(len(prompt) - 1, 0))
    stacked = {name: np.concatenate([c[name] for c in caches]) for name in caches[0]}
    logits, new_cache = batch.decode_batch(tokens, positions, stacked)
    for row in range(BATCH):
        expected, expected_cache = alone.decode(
            tokens[row], positions[row], caches[row]
        )
        np.testing.assert_allclose(logits[row], expected, atol=1e-4)
        for name in expected_cache:
            np.testing.assert_allclose(
                new_cache[name][row], expected_cache[name][0], atol=1e-5
            )


def test_bad_batches_and_sequences_are_named(model, tiny_gpt_run, tmp_path):
    batch = BatchedGenerator(model)
    cache = batch.cache
    with pytest.raises(ValueError, match=r"input_pos must lie in \[0, 32\)"):
        batch.decode_batch([5, 5, 5], [0, 32, 1], cache)
    with pytest.raises(ValueError, match="tokens and input_pos must hold 3 rows"):
        batch.decode_batch([5, 5], [0, 1], cache)
    with pytest.raises(ValueError, match="sequence 7 is not live"):
        batch.leave(7)
    with pytest.raises(ValueError, match=r"join\(\) takes .* Received: \['topk'\]"):
        batch.join(ids("a"), 3, topk=5)
    assert batch.live == []
    first = batch.join(ids("a"), 1, greedy=True)
    for _ in range(2):
        batch.join(ids("b"), 5, greedy=True)
    with pytest.raises(ValueError, match="all 3 rows are live"):
        batch.join(ids("c"), 5)
    batch.step()  # the first ends after its one token
    with pytest.raises(ValueError, match=f"sequence {first} is not live"):
        batch.leave(first)
    with pytest.raises(ValueError, match="no sequence 99"):
        batch.tokens(99)
    plain = export_tflite(tiny_gpt_run, str(tmp_path / "plain"), progress=print)
    with pytest.raises(ValueError, match="no 'decode_batch' signature"):
        BatchedGenerator(plain)
    for bad in (1, 0, 1000, "4"):
        with pytest.raises(ValueError, match="--decode-batch must be"):
            export_tflite(tiny_gpt_run, str(tmp_path / "bad"), decode_batch=bad)
    assert not (tmp_path / "bad").exists()


def test_a_bundle_refuses_the_batched_signature(tiny_gpt_run, tmp_path, capsys):
    from tfformer.export import cli

    argv = ["--checkpoint", tiny_gpt_run, "--out", str(tmp_path / "b")]
    assert cli.main([*argv, "--format", "litertlm", "--decode-batch", "4"]) == 2
    assert "--decode-batch adds a signature LiteRT-LM cannot run" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "b").exists()
