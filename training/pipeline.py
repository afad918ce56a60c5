"""tf.data input pipelines with static batch shapes.

Examples are tokenized once, up front, into ragged id tensors. Each batch is
then drawn from one length bucket and padded to that bucket's length, with a
fixed batch size (`drop_remainder`), so every batch has one of a few static
shapes: XLA compiles each shape once and TPUs need nothing else.

Training data is an endless stream of numbered epochs. Epoch `e` is shuffled
with seed `seed + e`, so the stream is a pure function of the seed: a resumed
run rebuilds it from (epoch, step) and continues with exactly the batches the
killed run would have seen.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tfformer.errors import InputError, InputTypeError

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass
class Examples:
    """Tokenized examples of one split.

    `features` maps input names to int32 RaggedTensors `(num_examples, None)`;
    `labels` is a RaggedTensor of the same row lengths as the decoder input
    (sequence tasks) or an int32 vector (classification). `lengths` is the
    padded length each example needs (numpy), used to choose its bucket.
    """

    features: dict
    labels: object
    lengths: np.ndarray
    # Applied to each example after it is padded to its bucket's length:
    # `transform(features, labels, seed) -> (features, labels)`, with `seed`
    # a (2,) int64 stateless seed, fresh for every visit of a training
    # example (epoch and pass) and fixed per example in evaluation. Masked
    # language modelling masks here, so every epoch sees new masks. Its
    # outputs must have one shape per bucket.
    transform: object = None

    def __len__(self):
        return len(self.lengths)


def _check_ids(name, ids):
    if not isinstance(ids, tf.RaggedTensor):
        raise InputTypeError(f"{name} must be a tf.RaggedTensor. Received: {type(ids)}")


def seq2seq_examples(source_ids, target_ids, *, start_id, end_id, max_length):
    """Teacher forcing: decoder input = [start] + target, labels = target + [end].

    Sources are cut to `max_length` tokens and targets to `max_length - 1`, so
    decoder inputs and labels are at most `max_length` long.
    """
    _check_ids("source_ids", source_ids)
    _check_ids("target_ids", target_ids)
    if source_ids.nrows() != target_ids.nrows():
        raise InputError(
            f"source_ids and target_ids differ in length: {source_ids.nrows()} vs "
            f"{target_ids.nrows()}"
        )
    source = source_ids[:, :max_length]
    target = target_ids[:, : max_length - 1]
    rows = target.nrows()
    starts = tf.fill([rows, 1], tf.constant(start_id, tf.int32))
    ends = tf.fill([rows, 1], tf.constant(end_id, tf.int32))
    decoder_input = tf.concat([starts, target], axis=1)
    labels = tf.concat([target, ends], axis=1)
    lengths = np.maximum(
        source.row_lengths().numpy(), decoder_input.row_lengths().numpy()
    )
    return Examples(
        {"encoder_token_ids": source, "decoder_token_ids": decoder_input},
        labels,
        lengths,
    )


def language_model_examples(ids, *, sequence_length):
    """Non-overlapping windows of a token stream: inputs w[:-1], labels w[1:]."""
    ids = np.asarray(ids, np.int32)
    windows = (len(ids) - 1) // sequence_length
    if windows < 1:
        raise InputError(
            f"The text has {len(ids)} tokens, fewer than one window of "
            f"sequence_length={sequence_length} + 1."
        )
    starts = np.arange(windows) * sequence_length
    index = starts[:, None] + np.arange(sequence_length + 1)[None, :]
    chunks = ids[index]
    inputs = tf.RaggedTensor.from_tensor(chunks[:, :-1])
    labels = tf.RaggedTensor.from_tensor(chunks[:, 1:])
    return Examples({"token_ids": inputs}, labels, np.full(windows, sequence_length))


def classification_examples(token_ids, labels, *, start_id, end_id, max_length):
    """BERT-style inputs: [start] tokens [end] (start is the pooled position)."""
    _check_ids("token_ids", token_ids)
    body = token_ids[:, : max_length - 2]
    rows = body.nrows()
    starts = tf.fill([rows, 1], tf.constant(start_id, tf.int32))
    ends = tf.fill([rows, 1], tf.constant(end_id, tf.int32))
    ids = tf.concat([starts, body, ends], axis=1)
    return Examples(
        {"token_ids": ids, "segment_ids": tf.zeros_like(ids)},
        tf.constant(labels, tf.int32),
        ids.row_lengths().numpy(),
    )


def rows_examples(features, labels):
    """Classification examples from lists of id rows: `features` maps input
    names to lists of int lists (the same lengths row by row), `labels` are
    class ids (int32), or one float row per example (float32; a
    distillation run's targets)."""
    names = list(features)
    lengths = np.array([len(row) for row in features[names[0]]], np.int64)
    for name in names[1:]:
        if [len(row) for row in features[name]] != lengths.tolist():
            raise InputError(
                f"features[{name!r}] rows differ in length from {names[0]!r}."
            )
    ragged = {
        name: tf.RaggedTensor.from_row_lengths(
            np.array([i for row in rows for i in row], np.int32), lengths
        )
        for name, rows in features.items()
    }
    labels = np.asarray(labels)
    dtype = tf.float32 if labels.ndim > 1 else tf.int32
    return Examples(ragged, tf.constant(labels, dtype), lengths)


def bucket_index(lengths, bucket_lengths):
    """Index of the smallest bucket that holds each length (numpy)."""
    lengths = np.asarray(lengths)
    if lengths.size and lengths.max() > bucket_lengths[-1]:
        raise InputError(
            f"An example of length {lengths.max()} exceeds the largest bucket "
            f"{bucket_lengths[-1]}."
        )
    return np.searchsorted(np.asarray(bucket_lengths), lengths, side="left")


def token_batch_sizes(bucket_lengths, batch_tokens, multiple=1, name="batch_tokens"):
    """Rows per batch of each bucket when a batch holds at most `batch_tokens`
    padded tokens (fairseq's `max_tokens`, with static shapes): `batch_tokens //
    length`, rounded down to a multiple of `multiple` (the replicas a batch is
    split over). Short buckets get many rows, long ones few, so every step
    does about the same work. `name` is the argument's name in errors."""
    if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int):
        raise InputTypeError(
            f"{name} must be an int. Received: {batch_tokens!r} "
            f"({type(batch_tokens).__name__})"
        )
    sizes = tuple(
        batch_tokens // length // multiple * multiple for length in bucket_lengths
    )
    if min(sizes) < 1:
        raise InputError(
            f"{name}={batch_tokens} holds no batch of {multiple} row(s) of "
            f"the longest bucket ({bucket_lengths[-1]} tokens): it must be at least "
            f"{bucket_lengths[-1] * multiple}."
        )
    return sizes


def bucket_batch_sizes(batch_size, bucket_lengths):
    """`batch_size` per bucket (numpy int64): an int is every bucket's size; a
    sequence gives one size per bucket."""
    if isinstance(batch_size, (int, np.integer)) and not isinstance(batch_size, bool):
        sizes = np.full(len(bucket_lengths), batch_size, np.int64)
    else:
        if np.ndim(batch_size) != 1 or not all(
            isinstance(s, (int, np.integer)) for s in batch_size
        ):
            raise InputTypeError(
                "batch_size must be an int or one int per bucket. Received: "
                f"{batch_size!r}"
            )
        sizes = np.asarray(batch_size, np.int64)
        if sizes.shape != (len(bucket_lengths),):
            raise InputError(
                f"batch_size needs one size per bucket ({len(bucket_lengths)}: "
                f"{list(bucket_lengths)}). Received: {list(batch_size)}"
            )
    if sizes.min() < 1:
        raise InputError(f"batch_size must be positive. Received: {batch_size}")
    return sizes


def batches_per_epoch(lengths, bucket_lengths, batch_size):
    """Full batches in one pass: sum over buckets of floor(count / batch size),
    `batch_size` an int or one per bucket."""
    counts = np.bincount(
        bucket_index(lengths, bucket_lengths), minlength=len(bucket_lengths)
    )
    return int(np.sum(counts // bucket_batch_sizes(batch_size, bucket_lengths)))


def evaluation_steps(lengths, bucket_lengths, batch_size):
    """Batches of `evaluation_dataset`: sum over buckets of ceil(count / batch_size)."""
    counts = np.bincount(
        bucket_index(lengths, bucket_lengths), minlength=len(bucket_lengths)
    )
    return int(np.sum(-(-counts // batch_size)))


def _pad_rows(batch_size):
    """Pads a partial batch with all-padding rows (weight 0) to `batch_size` rows."""

    def pad(features, labels, weights):
        missing = batch_size - tf.shape(weights)[0]

        def grow(x):
            paddings = [[0, missing]] + [[0, 0]] * (len(x.shape) - 1)
            return tf.pad(x, paddings)

        return (
            tf.nest.map_structure(grow, features),
            tf.nest.map_structure(grow, labels),
            grow(weights),
        )

    return pad


# Named functions, not lambdas: AutoGraph cannot read a lambda's source.
def _drop_last(*parts):
    return parts[:-1]


def _last(*parts):
    return parts[-1]


def _bucketed(dataset, bucket_lengths, batch_size, *, drop_remainder, transform=None):
    """Groups elements by bucket and pads each batch to its bucket's length
    (`transform`: see `Examples.transform`). `batch_size` is an int, or one
    size per bucket (training only: `drop_remainder`)."""
    lengths = tf.constant(bucket_lengths, tf.int64)
    per_bucket = not isinstance(batch_size, (int, np.integer))
    if per_bucket and not drop_remainder:
        raise InputError(
            "batch_size per bucket is for training streams (drop_remainder=True); "
            f"evaluation pads its last batches to one size. Received: "
            f"batch_size={batch_size}"
        )
    sizes = tf.constant(bucket_batch_sizes(batch_size, bucket_lengths))

    def to_dense(features, labels, bucket, seed):
        # Ragged rows become dense rows padded to the bucket length.
        length = tf.gather(lengths, bucket)

        def pad(x):
            # A row of static length (a label vector) is not a sequence.
            if x.shape.rank == 0 or x.shape[0] is not None:
                return x
            return tf.pad(x, [[0, length - tf.shape(x, out_type=tf.int64)[0]]])

        features, labels = tf.nest.map_structure(pad, features), pad(labels)
        if transform is not None:
            features, labels = transform(features, labels, seed)
        return features, labels, tf.constant(1.0), bucket

    def window_size(bucket):
        return tf.gather(sizes, bucket)

    def batch_bucket(bucket, window):
        window = window.map(_drop_last)
        # An int keeps the batch dimension static (evaluation pads to it).
        rows = window_size(bucket) if per_bucket else batch_size
        return window.batch(rows, drop_remainder=drop_remainder)

    dataset = dataset.map(to_dense, num_parallel_calls=AUTOTUNE)
    dataset = dataset.group_by_window(
        key_func=_last, reduce_func=batch_bucket, window_size_func=window_size
    )
    if not drop_remainder:
        dataset = dataset.map(_pad_rows(batch_size))
    if all(
        spec.shape.rank > 1 and not spec.dtype.is_floating
        for spec in tf.nest.flatten(dataset.element_spec[1])
    ):
        # Sequence labels (a tensor, or a dict of them for a model with
        # several outputs) mark padding with id 0 and need no sample weights;
        # float target rows (distillation's) keep them.
        dataset = dataset.map(_drop_last)
    return dataset


def _lookup(examples, bucket):
    """Maps (example index, its seed) to (features, labels, bucket, seed)."""
    features = examples.features
    labels = examples.labels
    bucket = tf.constant(bucket)

    def lookup(i, seed):
        return (
            {name: values[i] for name, values in features.items()},
            labels[i],
            tf.gather(bucket, i),
            seed,
        )

    return lookup


# Seeds of `Examples.transform` in evaluation: the same masks every time.
EVALUATION_SEED = 0x5EED


def _with_seed(first):
    """Pairs an example index i with the stateless seed (first, i)."""

    def pair(i):
        return i, tf.stack([first, i])

    return pair


def shard_indices(count, batch_size, steps_per_epoch, num_shards, shard_index):
    """The example indices of one shard (int64 tensor), after checking a
    training stream's arguments (ValueError naming them)."""
    if np.min(batch_size) < 1 or steps_per_epoch < 1:
        raise InputError(
            "batch_size and steps_per_epoch must be positive. Received: "
            f"batch_size={batch_size}, steps_per_epoch={steps_per_epoch}"
        )
    if not 0 <= shard_index < num_shards:
        raise InputError(
            f"shard_index must be in [0, {num_shards}). Received: {shard_index}"
        )
    indices = tf.constant(np.arange(shard_index, count, num_shards, np.int64))
    if indices.shape[0] == 0:
        raise InputError(f"Shard {shard_index} of {num_shards} holds no examples.")
    return indices


def epoch_stream(epoch, first_epoch, skip_steps):
    """Epochs `epoch(e)` from `first_epoch` on, endlessly, `skip_steps`
    batches in: deterministic, unsharded by tf.distribute, prefetched."""
    stream = (
        tf.data.Dataset.range(first_epoch, np.iinfo(np.int64).max)
        .flat_map(epoch)
        .skip(skip_steps)
    )
    options = tf.data.Options()
    options.deterministic = True
    # Sharding is done per worker; tf.distribute must not shard again.
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF
    )
    return stream.with_options(options).prefetch(AUTOTUNE)


def training_stream(
    examples,
    *,
    batch_size,
    bucket_lengths,
    steps_per_epoch,
    seed,
    first_epoch=0,
    skip_steps=0,
    num_shards=1,
    shard_index=0,
):
    """The endless training stream of `(features, labels[, sample_weight])` batches.

    `batch_size` is an int, or one size per bucket (see `token_batch_sizes`).

    Epoch `e` visits this shard's examples in the order of a stateless shuffle
    seeded with (seed, e, r) for its r-th pass (an epoch longer than one pass
    continues with a fresh order), buckets them, and stops after
    `steps_per_epoch` batches. The stream starts at epoch `first_epoch`,
    `skip_steps` batches in: a resumed run sees exactly the batches that the
    interrupted one had not yet trained on.
    """
    indices = shard_indices(
        len(examples), batch_size, steps_per_epoch, num_shards, shard_index
    )
    bucket = bucket_index(examples.lengths, bucket_lengths).astype(np.int64)
    lookup = _lookup(examples, bucket)
    forever = np.iinfo(np.int64).max

    def epoch(e):
        def one_pass(r):
            epoch_seed = tf.constant(seed, tf.int64) * 65537 + e
            order = tf.random.experimental.stateless_shuffle(
                indices, seed=tf.stack([epoch_seed, r])
            )
            # Transform seeds: one per (epoch, pass, example), apart from
            # the shuffle's (first part negative).
            return tf.data.Dataset.from_tensor_slices(order + r * len(examples)).map(
                _with_seed(-epoch_seed - 1)
            )

        def index_of(visit, visit_seed):
            return visit % len(examples), visit_seed

        passes = tf.data.Dataset.range(forever).flat_map(one_pass).map(index_of)
        elements = passes.map(lookup, num_parallel_calls=AUTOTUNE)
        batches = _bucketed(
            elements,
            bucket_lengths,
            batch_size,
            drop_remainder=True,
            transform=examples.transform,
        )
        return batches.take(steps_per_epoch)

    return epoch_stream(epoch, first_epoch, skip_steps)


def evaluation_dataset(examples, *, batch_size, bucket_lengths, repeat=False):
    """Every example once, bucketed; the last batch of a bucket is padded with
    zero-weight rows so that every batch still has a static shape.

    With `repeat`, the same pass comes again endlessly: Keras keeps one
    validation iterator across epochs and reads `validation_steps` from it.
    """
    bucket = bucket_index(examples.lengths, bucket_lengths).astype(np.int64)
    elements = (
        tf.data.Dataset.range(len(examples))
        .map(_with_seed(tf.constant(EVALUATION_SEED, tf.int64)))
        .map(_lookup(examples, bucket))
    )
    dataset = _bucketed(
        elements,
        bucket_lengths,
        batch_size,
        drop_remainder=False,
        transform=examples.transform,
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    dataset = dataset.with_options(options).cache()
    if repeat:
        dataset = dataset.repeat()
    return dataset.prefetch(AUTOTUNE)
