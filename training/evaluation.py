"""Held-out exact match of a trained encoder-decoder, by greedy decoding."""

import numpy as np

from tfformer.decoding import Generator


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
    decode = Generator(
        model,
        max_length=max_length,
        start_id=target_tokenizer.start_id,
        end_id=target_tokenizer.end_id,
    ).compiled(jit_compile=False)
    hits, shown = 0, []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        source = source_tokenizer.tokenize([s for s, _ in chunk])[:, :max_length]
        # One static shape for every batch: a single trace of the loop.
        source = source.to_tensor(shape=[batch_size, max_length])
        ids = decode(source)["token_ids"].numpy()[: len(chunk)]
        predictions = target_tokenizer.detokenize(ids).numpy()
        references = target_tokenizer.detokenize(
            target_tokenizer.tokenize([t for _, t in chunk])
        ).numpy()
        hits += int(np.sum(predictions == references))
        for (s, t), p in zip(chunk, predictions, strict=True):
            if len(shown) < 5:
                shown.append((s, t, p.decode("utf-8", "replace")))
    return hits / max(len(pairs), 1), shown
