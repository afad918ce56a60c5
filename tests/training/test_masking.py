"""BERT's masking (`training.text.masking`) against its definition: the
chosen share, the 80/10/10 split, uniform choice, whole words, and the
seeds that make it fresh per epoch and fixed in evaluation."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfformer.training import pipeline
from tfformer.training.text.masking import mask_tokens

MASK_ID, FIRST, VOCABULARY = 4, 5, 1000


# Traced once per shape and setting, as the data pipeline runs it (inside
# Dataset.map): hundreds of eager calls were most of this file's time.
graph_mask_tokens = tf.function(mask_tokens)


def masked(ids, seed, slots, **kwargs):
    out = graph_mask_tokens(
        np.asarray(ids, np.int32),
        tf.constant(seed, tf.int64),
        num_predictions=slots,
        mask_id=MASK_ID,
        first_regular_id=FIRST,
        vocabulary_size=VOCABULARY,
        **kwargs,
    )
    return [t.numpy() for t in out]


def example(rng, real, length):
    """[START] `real` regular ids [END], padded with 0 to `length`."""
    ids = np.zeros(length, np.int32)
    ids[0], ids[real + 1] = 2, 3
    ids[1 : real + 1] = rng.integers(FIRST, VOCABULARY, real)
    return ids


def test_every_draw_keeps_the_invariants():
    rng = np.random.default_rng(0)
    for trial in range(200):
        length = int(rng.choice([16, 32, 64]))
        real = int(rng.integers(0, length - 1))
        ids = example(rng, real, length)
        if trial % 5 == 0:  # unknown tokens are never chosen either
            ids[1 : real + 1][rng.random(real) < 0.2] = 1
        slots = math.ceil(0.15 * (length - 2))
        out, positions, labels = masked(ids, [trial, 7], slots)
        candidates = int((ids >= FIRST).sum())
        chosen = positions[labels != 0]
        # max(1, round(15 %)) of the candidates (none if there are none).
        expected = min(slots, max(int(np.round(0.15 * candidates)), min(candidates, 1)))
        assert len(chosen) == expected
        assert positions.shape == labels.shape == (slots,)
        assert np.all(np.diff(chosen) > 0) and np.all(positions[len(chosen) :] == 0)
        assert np.all(ids[chosen] >= FIRST)
        np.testing.assert_array_equal(labels[: len(chosen)], ids[chosen])
        untouched = np.ones(length, bool)
        untouched[chosen] = False
        np.testing.assert_array_equal(out[untouched], ids[untouched])
        assert np.all((out[chosen] == MASK_ID) | (out[chosen] >= FIRST))


def test_the_80_10_10_split_and_a_uniform_choice():
    """Over 4,000 draws of one 60-token sentence (9 chosen each): 80 % of the
    chosen tokens become [MASK], 10 % a random regular token (which equals
    the original with probability 1/995), 10 % stay; every position is
    chosen equally often (chi-square, 59 degrees of freedom)."""
    rng = np.random.default_rng(1)
    ids = example(rng, 60, 64)
    ids[1:61] = rng.permutation(np.arange(FIRST, VOCABULARY))[:60]  # distinct
    counts = {"mask": 0, "random": 0, "same": 0}
    per_position = np.zeros(64)
    draws = 4000
    run = tf.function(
        lambda seed: mask_tokens(
            ids,
            seed,
            num_predictions=9,
            mask_id=MASK_ID,
            first_regular_id=FIRST,
            vocabulary_size=VOCABULARY,
        )
    )
    for d in range(draws):
        out, positions, labels = (t.numpy() for t in run(tf.constant([d, 3], tf.int64)))
        assert np.all(labels != 0)
        per_position[positions] += 1
        replaced = out[positions]
        counts["mask"] += int((replaced == MASK_ID).sum())
        counts["same"] += int((replaced == labels).sum())
        counts["random"] += int(((replaced != MASK_ID) & (replaced != labels)).sum())
    total = sum(counts.values())
    assert total == 9 * draws
    p_same = 0.1 + 0.1 / (VOCABULARY - FIRST)
    for name, p in (("mask", 0.8), ("random", 0.1 - 0.1 / 995), ("same", p_same)):
        sigma = math.sqrt(total * p * (1 - p))
        assert abs(counts[name] - total * p) < 4 * sigma, (name, counts)
    observed = per_position[1:61]
    expected = 9 * draws / 60
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    # P(chi2 > 100 | 59 dof) is about 6e-4.
    assert chi2 < 100, chi2
    assert per_position[0] == per_position[61:].sum() == 0


def test_whole_word_masking_chooses_whole_words():
    """Words are a token and the "##" pieces after it. Every chosen piece's
    word is chosen entirely; words are taken in a random order while they
    fit the count (round(15 %) of the tokens), so no word left out would
    still fit; words of the same length are chosen equally often."""
    rng = np.random.default_rng(2)
    continues = np.zeros(VOCABULARY, bool)
    continues[500:] = True  # ids >= 500 are "##" pieces
    # 12 words: every third has 3 tokens (a start below 500, two pieces).
    words = [[int(rng.integers(FIRST, 500))] for _ in range(12)]
    for word in words[::3]:
        word += [int(x) for x in rng.integers(500, VOCABULARY, 2)]
    ids = np.zeros(32, np.int32)
    flat = [2, *[t for w in words for t in w], 3]
    ids[: len(flat)] = flat
    starts = np.cumsum([1] + [len(w) for w in words])[:-1]
    word_of = np.zeros(32, int) - 1
    for number, (start, word) in enumerate(zip(starts, words, strict=True)):
        word_of[start : start + len(word)] = number
    sizes = np.array([len(w) for w in words])
    target = round(0.15 * sizes.sum())  # 20 tokens: 3
    chosen_words = np.zeros(12)
    for d in range(600):
        _, positions, labels = masked(ids, [d, 11], 5, continues_word=continues)
        chosen = positions[labels != 0]
        taken = sorted(set(word_of[chosen]))
        for number in taken:
            assert set(np.flatnonzero(word_of == number)) <= set(chosen)
            chosen_words[number] += 1
        assert 1 <= len(chosen) <= target
        left_out = [n for n in range(12) if n not in taken]
        assert all(len(chosen) + sizes[n] > target for n in left_out)
    share = chosen_words / 600
    for size in (1, 3):
        group = share[sizes == size]
        mean = group.mean()
        sigma = math.sqrt(mean * (1 - mean) / 600)
        assert np.all(np.abs(group - mean) < 5 * sigma), (size, group)
    # A 3-token word fits only while nothing else is taken.
    assert share[sizes == 3].mean() < share[sizes == 1].mean()


def test_a_word_longer_than_the_count_is_taken_when_no_word_fits():
    continues = np.zeros(VOCABULARY, bool)
    continues[500:] = True
    ids = np.array([2, 10, 600, 601, 602, 3, 0, 0], np.int32)  # one 4-token word
    _, positions, labels = masked(ids, [0, 0], 4, continues_word=continues)
    assert positions.tolist() == [1, 2, 3, 4] and labels.tolist() == [10, 600, 601, 602]
    # ... but not when it does not fit the slots.
    _, positions, labels = masked(ids, [0, 0], 3, continues_word=continues)
    assert labels.tolist() == [0, 0, 0]


def test_the_same_seed_gives_the_same_masks():
    ids = example(np.random.default_rng(3), 40, 64)
    first = masked(ids, [5, 9], 10)
    for a, b in zip(first, masked(ids, [5, 9], 10), strict=True):
        np.testing.assert_array_equal(a, b)
    other = masked(ids, [5, 10], 10)
    assert not np.array_equal(first[1], other[1])


def _mlm_examples(rng, count):
    lengths = rng.integers(3, 30, count)
    rows = [rng.integers(FIRST, VOCABULARY, n).tolist() for n in lengths]
    examples = pipeline.classification_examples(
        tf.ragged.constant(rows, tf.int32),
        [0] * count,
        start_id=2,
        end_id=3,
        max_length=32,
    )
    examples.labels = examples.features["token_ids"]

    def transform(features, labels, seed):
        length = tf.shape(features["token_ids"])[0]
        slots = tf.cast(tf.math.ceil(0.15 * tf.cast(length - 2, tf.float32)), tf.int32)
        out, positions, targets = mask_tokens(
            features["token_ids"],
            seed,
            num_predictions=slots,
            mask_id=MASK_ID,
            first_regular_id=FIRST,
            vocabulary_size=VOCABULARY,
        )
        return {**features, "token_ids": out, "mask_positions": positions}, targets

    examples.transform = transform
    return examples


def _by_example(batches):
    """{original row (as a tuple of unmasked ids): mask positions} of batches."""
    seen = {}
    for features, labels in batches:
        for row, positions, targets in zip(
            features["token_ids"].numpy(),
            features["mask_positions"].numpy(),
            labels.numpy(),
            strict=True,
        ):
            if not row.any():
                continue  # a padding row of a last evaluation batch
            original = row.copy()
            real = targets != 0
            original[positions[real]] = targets[real]
            seen[tuple(original)] = tuple(positions[real])
    return seen


def test_the_pipeline_draws_new_masks_each_epoch_and_fixed_ones_in_evaluation():
    examples = _mlm_examples(np.random.default_rng(4), 64)
    stream = pipeline.training_stream(
        examples, batch_size=8, bucket_lengths=(16, 32), steps_per_epoch=6, seed=1
    )
    batches = list(stream.take(12))
    for features, labels in batches:
        length = features["token_ids"].shape[1]
        slots = math.ceil(0.15 * (length - 2))
        assert features["mask_positions"].shape == (8, slots) == labels.shape
    first, second = _by_example(batches[:6]), _by_example(batches[6:])
    shared = set(first) & set(second)
    assert len(shared) >= 10
    differ = sum(first[row] != second[row] for row in shared)
    assert differ >= 0.7 * len(shared)
    # A resumed stream draws the masks the uninterrupted one drew.
    resumed = pipeline.training_stream(
        examples,
        batch_size=8,
        bucket_lengths=(16, 32),
        steps_per_epoch=6,
        seed=1,
        first_epoch=1,
    )
    assert _by_example(resumed.take(6)) == second

    def evaluation():
        return _by_example(
            pipeline.evaluation_dataset(examples, batch_size=8, bucket_lengths=(16, 32))
        )

    once = evaluation()
    assert len(once) == 64 and evaluation() == once


@pytest.mark.parametrize("rate", [0.15, 0.4])
def test_the_chosen_count_follows_the_rate(rate):
    ids = example(np.random.default_rng(5), 50, 64)
    slots = math.ceil(rate * 62)
    _, _, labels = masked(ids, [1, 1], slots, rate=rate)
    assert (labels != 0).sum() == round(rate * 50)
