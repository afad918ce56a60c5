"""Held-out exact match of a trained encoder-decoder, by greedy decoding.

A minimal KV-cached greedy decoder (one tf.while_loop) so a training run can
report exact match; the decoding issue brings beam search and sampling.
"""

import numpy as np
import tensorflow as tf

from tfformer.models import CachedDecoder


def greedy_decoder(model, *, max_length, start_id, end_id):
    """A compiled function: padded source ids `(batch, S)` to greedy target ids
    `(batch, max_length)`. Position 0 holds `start_id`; after `end_id` a row
    holds padding (0). Build it once and call it for every batch.
    """
    decoder = CachedDecoder(model)

    @tf.function
    def run(source):
        batch = tf.shape(source)[0]
        encoded = decoder.encode(source)
        cache = decoder.init_cache(batch, max_length)
        tokens = tf.concat(
            [
                tf.fill([batch, 1], tf.constant(start_id, tf.int32)),
                tf.zeros([batch, max_length - 1], tf.int32),
            ],
            axis=1,
        )
        logits, cache, cross = decoder.step(tokens[:, :1], cache, 0, encoded)
        positions = tf.range(max_length)

        def write(tokens, index, logits, finished):
            next_ids = tf.argmax(logits[:, -1], axis=-1, output_type=tf.int32)
            next_ids = tf.where(finished, 0, next_ids)
            # (batch, max_length): the new token at column `index`.
            hot = tf.cast(positions[None, :] == index, tf.int32)
            return tokens + hot * next_ids[:, None], finished | (next_ids == end_id)

        tokens, finished = write(tokens, 1, logits, tf.zeros([batch], tf.bool))

        def cond(i, tokens, cache, finished):
            return (i < max_length - 1) & ~tf.reduce_all(finished)

        def body(i, tokens, cache, finished):
            logits, cache, _ = decoder.step(
                tokens[:, i : i + 1], cache, i, encoded, cross
            )
            tokens, finished = write(tokens, i + 1, logits, finished)
            return i + 1, tokens, cache, finished

        _, tokens, _, _ = tf.while_loop(
            cond, body, (tf.constant(1), tokens, cache, finished)
        )
        return tokens

    return run


def exact_match(
    model, pairs, source_tokenizer, target_tokenizer, *, max_length, batch_size=64
):
    """Share of `pairs` whose greedy translation equals the reference.

    Both sides are compared after a tokenize/detokenize round trip, so the
    comparison is not thrown off by the tokenizer's spacing of punctuation.

    Returns:
        `(exact_match, examples)`, `examples` being (source, reference,
        prediction) triples for the first few pairs.
    """
    decode = greedy_decoder(
        model,
        max_length=max_length,
        start_id=target_tokenizer.start_id,
        end_id=target_tokenizer.end_id,
    )
    hits, shown = 0, []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        source = source_tokenizer.tokenize([s for s, _ in chunk])[:, :max_length]
        # One static shape for every batch: a single trace of the loop.
        source = source.to_tensor(shape=[batch_size, max_length])
        ids = decode(source).numpy()[: len(chunk)]
        predictions = target_tokenizer.detokenize(ids).numpy()
        references = target_tokenizer.detokenize(
            target_tokenizer.tokenize([t for _, t in chunk])
        ).numpy()
        hits += int(np.sum(predictions == references))
        for (s, t), p in zip(chunk, predictions, strict=True):
            if len(shown) < 5:
                shown.append((s, t, p.decode("utf-8", "replace")))
    return hits / max(len(pairs), 1), shown
