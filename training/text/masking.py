"""BERT's masked-language-model corruption, as TensorFlow graph ops on one
padded example (so tf.data draws new masks every epoch, in parallel with
training).

Of the candidate tokens (every id >= `first_regular_id`: not padding, not
the start/end/unknown/mask tokens), `rate` (15 %) are chosen; of the chosen,
80 % become the mask token, 10 % a random regular token and 10 % stay
unchanged (Devlin et al. 2019, section 3.1). The model predicts the original
token at every chosen position. With whole-word masking, the units chosen are
words (a token and the "##" pieces that continue it), and every piece of a
chosen word is chosen.

The count per example is max(1, round(rate x candidates)), and the positions
are padded with 0 (label 0 = padding, ignored by the loss) to a fixed
`num_predictions` per bucket length, so batches keep static shapes for XLA
and TPUs.
"""

import tensorflow as tf


def mask_tokens(
    token_ids,
    seed,
    *,
    num_predictions,
    mask_id,
    first_regular_id,
    vocabulary_size,
    rate=0.15,
    mask_token_rate=0.8,
    random_token_rate=0.1,
    continues_word=None,
):
    """Masks one example.

    Args:
        token_ids: `(length,)` int32 ids, padded with 0.
        seed: `(2,)` int stateless seed: the same seed, the same masks.
        num_predictions: the number of prediction slots (int or scalar
            tensor); at most this many tokens are chosen.
        mask_id: the mask token's id.
        first_regular_id: ids below it are never chosen nor drawn as random
            replacements (the reserved tokens).
        vocabulary_size: random replacements are drawn from
            [first_regular_id, vocabulary_size).
        rate, mask_token_rate, random_token_rate: BERT's 15 % and 80/10/10.
        continues_word: None for token-level masking, or a `(vocabulary_size,)`
            bool tensor, True for the "##" pieces: whole-word masking.

    Returns:
        `(masked_ids (length,), positions (num_predictions,), labels
        (num_predictions,))`: positions in increasing order, then 0s; labels
        the original ids there, then 0s.
    """
    token_ids = tf.convert_to_tensor(token_ids, tf.int32)
    length = tf.shape(token_ids)[0]
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 4)
    candidate = token_ids >= first_regular_id
    count = tf.reduce_sum(tf.cast(candidate, tf.int32))
    target = tf.cast(tf.round(rate * tf.cast(count, tf.float32)), tf.int32)
    target = tf.minimum(tf.maximum(target, tf.minimum(count, 1)), num_predictions)

    # Units: each candidate token (token level) or each word. A unit is
    # named by the position of its first token; a "##" piece belongs to the
    # unit that starts before it (any token that is not a piece starts one).
    positions = tf.range(length)
    if continues_word is None:
        starts = tf.ones([length], tf.bool)
    else:
        piece = tf.gather(tf.convert_to_tensor(continues_word, tf.bool), token_ids)
        starts = ~piece | ~candidate | (positions == 0)
    start_positions = tf.cast(tf.where(starts)[:, 0], tf.int32)
    unit = tf.gather(start_positions, tf.cumsum(tf.cast(starts, tf.int32)) - 1)
    size = tf.math.unsorted_segment_sum(tf.cast(candidate, tf.int32), unit, length)
    score = tf.random.stateless_uniform([length], seeds[0])
    score = tf.where(size > 0, score, 2.0)
    order = tf.argsort(score, stable=True)
    sizes_in_order = tf.gather(size, order)
    if continues_word is None:
        # Every unit is one token: the first `target` in the random order.
        taken_in_order = (tf.cumsum(sizes_in_order) <= target) & (sizes_in_order > 0)
    else:
        # Words in the random order, each taken if it still fits the count,
        # skipped otherwise (as BERT's create_pretraining_data.py does).
        def fits(total_and_taken, word_size):
            total, _ = total_and_taken
            take = (word_size > 0) & (total + word_size <= target)
            return total + tf.where(take, word_size, 0), take

        _, taken_in_order = tf.scan(
            fits, sizes_in_order, initializer=(tf.constant(0), tf.constant(False))
        )
        # No word fits (all are longer than the count): the first one, if
        # it fits the slots.
        first_only = (
            tf.equal(tf.range(length), 0)
            & (sizes_in_order[0] > 0)
            & (sizes_in_order[0] <= num_predictions)
        )
        taken_in_order = tf.where(
            tf.reduce_any(taken_in_order), taken_in_order, first_only
        )
    taken = tf.scatter_nd(order[:, None], tf.cast(taken_in_order, tf.int32), [length])
    chosen = candidate & (tf.gather(taken, unit) > 0)

    draw = tf.random.stateless_uniform([length], seeds[1])
    random_ids = tf.random.stateless_uniform(
        [length], seeds[2], first_regular_id, vocabulary_size, dtype=tf.int32
    )
    replacement = tf.where(
        draw < mask_token_rate,
        tf.fill([length], tf.constant(mask_id, tf.int32)),
        tf.where(draw < mask_token_rate + random_token_rate, random_ids, token_ids),
    )
    masked = tf.where(chosen, replacement, token_ids)
    where = tf.cast(tf.where(chosen)[:, 0], tf.int32)
    padding = [[0, num_predictions - tf.shape(where)[0]]]
    return (
        masked,
        tf.pad(where, padding),
        tf.pad(tf.gather(token_ids, where), padding),
    )
