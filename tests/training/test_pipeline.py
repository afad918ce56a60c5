import numpy as np
import pytest
import tensorflow as tf

from tfformer.training import pipeline


def ragged(rows):
    return tf.ragged.constant(rows, dtype=tf.int32)


def random_examples(n=120, seed=0, max_len=15):
    rng = np.random.default_rng(seed)
    src = [list(rng.integers(4, 50, rng.integers(1, max_len))) for _ in range(n)]
    tgt = [list(rng.integers(4, 50, rng.integers(1, max_len))) for _ in range(n)]
    return pipeline.seq2seq_examples(
        ragged(src), ragged(tgt), start_id=2, end_id=3, max_length=16
    )


def test_teacher_forcing_shifts_the_target_right():
    ex = pipeline.seq2seq_examples(
        ragged([[10, 11, 12]]), ragged([[20, 21]]), start_id=2, end_id=3, max_length=8
    )
    assert ex.features["encoder_token_ids"].to_list() == [[10, 11, 12]]
    assert ex.features["decoder_token_ids"].to_list() == [[2, 20, 21]]
    assert ex.labels.to_list() == [[20, 21, 3]]
    assert ex.lengths.tolist() == [3]


def test_truncation_keeps_start_and_end():
    ex = pipeline.seq2seq_examples(
        ragged([list(range(4, 20))]),
        ragged([list(range(4, 20))]),
        start_id=2,
        end_id=3,
        max_length=5,
    )
    assert ex.features["encoder_token_ids"].to_list() == [[4, 5, 6, 7, 8]]
    assert ex.features["decoder_token_ids"].to_list() == [[2, 4, 5, 6, 7]]
    assert ex.labels.to_list() == [[4, 5, 6, 7, 3]]


def test_every_training_batch_has_a_static_bucket_shape():
    ex = random_examples()
    stream = pipeline.training_stream(
        ex, batch_size=8, bucket_lengths=(8, 16), steps_per_epoch=10, seed=1
    )
    shapes = set()
    for features, labels in stream.take(30):
        for x in (*features.values(), labels):
            shapes.add(tuple(x.shape))
        # Labels are padded exactly where the decoder input is.
        np.testing.assert_array_equal(
            labels.numpy() == 0, features["decoder_token_ids"].numpy() == 0
        )
    assert shapes <= {(8, 8), (8, 16)}
    assert len(shapes) == 2


def test_bucketing_puts_each_example_in_the_smallest_bucket_that_fits():
    assert pipeline.bucket_index([1, 8, 9, 16], (8, 16)).tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        pipeline.bucket_index([17], (8, 16))
    # floor(count / batch) per bucket: 5 short ones give 2 batches of 2, 3 long 1.
    assert pipeline.batches_per_epoch([1] * 5 + [12] * 3, (8, 16), 2) == 3


def as_list(dataset, n):
    return [
        (f["encoder_token_ids"].numpy().tolist(), y.numpy().tolist())
        for f, y in dataset.take(n)
    ]


def test_stream_is_seeded_and_resumes_exactly():
    ex = random_examples()
    kwargs = dict(batch_size=8, bucket_lengths=(8, 16), steps_per_epoch=6)
    full = as_list(pipeline.training_stream(ex, seed=5, **kwargs), 20)
    assert full == as_list(pipeline.training_stream(ex, seed=5, **kwargs), 20)
    assert full != as_list(pipeline.training_stream(ex, seed=6, **kwargs), 20)
    # Epochs differ from each other (a new order per epoch).
    assert full[:6] != full[6:12]
    # Resuming at step 14 = epoch 2, 2 batches in, continues the same stream.
    resumed = pipeline.training_stream(
        ex, seed=5, first_epoch=2, skip_steps=2, **kwargs
    )
    assert as_list(resumed, 6) == full[14:20]


def test_an_epoch_is_one_pass_without_repeats():
    ex = random_examples(n=64, max_len=6)  # everything fits the first bucket
    steps = pipeline.batches_per_epoch(ex.lengths, (8, 16), 8)
    assert steps == 8
    stream = pipeline.training_stream(
        ex, batch_size=8, bucket_lengths=(8, 16), steps_per_epoch=steps, seed=0
    )
    seen = [
        tuple(row)
        for f, _ in stream.take(steps)
        for row in f["encoder_token_ids"].numpy()
    ]
    expected = [
        tuple(r + [0] * (8 - len(r)))
        for r in ex.features["encoder_token_ids"].to_list()
    ]
    assert sorted(seen) == sorted(expected)


def test_shards_are_disjoint_and_cover_the_data():
    ex = random_examples(n=64, max_len=6)
    kwargs = dict(batch_size=4, bucket_lengths=(8, 16), steps_per_epoch=8, seed=0)
    rows = []
    for index in range(2):
        stream = pipeline.training_stream(ex, num_shards=2, shard_index=index, **kwargs)
        rows.append(
            {
                tuple(r)
                for f, _ in stream.take(8)
                for r in f["encoder_token_ids"].numpy()
            }
        )
    assert not rows[0] & rows[1]
    assert len(rows[0] | rows[1]) == len(
        {tuple(r) for r in ex.features["encoder_token_ids"].to_list()}
    )


def test_evaluation_keeps_every_example_once_with_static_shapes():
    ex = random_examples(n=37)
    dataset = pipeline.evaluation_dataset(ex, batch_size=8, bucket_lengths=(8, 16))
    real = 0
    for _, labels in dataset:
        assert tuple(labels.shape) in {(8, 8), (8, 16)}
        real += int(np.sum(np.any(labels.numpy() != 0, axis=1)))
    assert real == 37


def test_classification_examples_carry_weights_and_pad_rows_weigh_zero():
    ex = pipeline.classification_examples(
        ragged([[5, 6], [7], [8, 9, 10]]), [1, 0, 1], start_id=2, end_id=3, max_length=8
    )
    assert ex.features["token_ids"].to_list() == [
        [2, 5, 6, 3],
        [2, 7, 3],
        [2, 8, 9, 10, 3],
    ]
    ((features, labels, weights),) = list(
        pipeline.evaluation_dataset(ex, batch_size=4, bucket_lengths=(8,))
    )
    assert features["token_ids"].shape == (4, 8)
    assert sorted(labels.numpy().tolist()[:3]) == [0, 1, 1]
    assert weights.numpy().tolist() == [1.0, 1.0, 1.0, 0.0]


def test_language_model_windows_shift_by_one():
    ex = pipeline.language_model_examples(np.arange(10, 21), sequence_length=4)
    assert ex.features["token_ids"].to_list() == [[10, 11, 12, 13], [14, 15, 16, 17]]
    assert ex.labels.to_list() == [[11, 12, 13, 14], [15, 16, 17, 18]]
    with pytest.raises(ValueError, match="fewer than one window"):
        pipeline.language_model_examples(np.arange(3), sequence_length=4)


def test_evaluation_steps_counts_the_padded_last_batches():
    ex = random_examples(n=37)
    dataset = pipeline.evaluation_dataset(ex, batch_size=8, bucket_lengths=(8, 16))
    assert pipeline.evaluation_steps(ex.lengths, (8, 16), 8) == len(list(dataset))


def test_token_batch_sizes_fill_each_bucket_up_to_the_budget():
    # 2048 // 16, 2048 // 24, 2048 // 32, 2048 // 64.
    assert pipeline.token_batch_sizes((16, 24, 32, 64), 2048) == (128, 85, 64, 32)
    # Rounded down to whole rows per replica.
    assert pipeline.token_batch_sizes((16, 24, 32, 64), 2048, 8) == (128, 80, 64, 32)
    with pytest.raises(ValueError, match=r"train.batch_tokens=100 .* at least 128"):
        pipeline.token_batch_sizes((16, 64), 100, 2, "train.batch_tokens")
    with pytest.raises(TypeError, match=r"batch_tokens must be an int.*2048\.0"):
        pipeline.token_batch_sizes((16, 64), 2048.0)
    with pytest.raises(TypeError, match=r"batch_tokens must be an int.*True"):
        pipeline.token_batch_sizes((16, 64), True)
    with pytest.raises(TypeError, match=r"batch_size must be an int or one .*64\.0"):
        pipeline.batches_per_epoch([3, 9], (8, 16), 64.0)
    with pytest.raises(ValueError, match=r"one size per bucket \(2: \[8, 16\]\)"):
        pipeline.bucket_batch_sizes((4, 4, 4), (8, 16))


def test_token_batches_have_their_buckets_rows_and_cover_an_epoch_once():
    # Each source starts with its own id, so rows tell examples apart.
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 15, 200)
    ex = pipeline.seq2seq_examples(
        ragged([[4 + i] + [5] * (n - 1) for i, n in enumerate(lengths)]),
        ragged([[6] * n for n in rng.integers(1, 15, 200)]),
        start_id=2,
        end_id=3,
        max_length=16,
    )
    sizes = pipeline.token_batch_sizes((8, 16), 64)  # (8, 4)
    assert sizes == (8, 4)
    steps = pipeline.batches_per_epoch(ex.lengths, (8, 16), sizes)
    counts = np.bincount(pipeline.bucket_index(ex.lengths, (8, 16)), minlength=2)
    assert steps == counts[0] // 8 + counts[1] // 4
    stream = pipeline.training_stream(
        ex, batch_size=sizes, bucket_lengths=(8, 16), steps_per_epoch=steps, seed=3
    )
    shapes, seen = [], []
    for features, labels in stream.take(steps):
        source = features["encoder_token_ids"].numpy()
        shapes.append(source.shape)
        assert labels.shape == source.shape
        seen += [int(row[0]) - 4 for row in source]
    # Every full batch of each bucket, and nothing of the next pass: all
    # of one pass's examples reach the windows before any of the next.
    assert shapes.count((8, 8)) == counts[0] // 8
    assert shapes.count((4, 16)) == counts[1] // 4
    assert len(seen) == len(set(seen)) == 8 * (counts[0] // 8) + 4 * (counts[1] // 4)
    assert set(seen) <= set(range(200))
    # The same seed gives the same batches (resumable), as with one batch size.
    again = pipeline.training_stream(
        ex, batch_size=sizes, bucket_lengths=(8, 16), steps_per_epoch=steps, seed=3
    )
    assert as_list(again, steps) == as_list(stream, steps)
