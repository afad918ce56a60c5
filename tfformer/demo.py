"""A short demo: build the tiny encoder-decoder, print its summary, run it.

    python3 -m tfformer.demo

It stands in for the main job (train -> evaluate -> export) until the
training and export packages exist.
"""

import argparse
import os
import time

# Keep TensorFlow's C++ start-up chatter out of the demo's output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from tfformer.models import CachedDecoder, from_preset


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="transformer_tiny")
    parser.add_argument("--vocabulary-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.length < 2:
        parser.error(f"--length must be at least 2. Received: {args.length}")

    model = from_preset(args.preset, args.vocabulary_size, args.vocabulary_size)
    model.summary()

    rng = np.random.default_rng(args.seed)
    shape = (args.batch_size, args.length)
    source = rng.integers(1, args.vocabulary_size, shape).astype("int32")
    target = rng.integers(1, args.vocabulary_size, shape).astype("int32")
    source[0, args.length // 2 :] = 0  # one padded sentence
    started = time.perf_counter()
    logits = model({"encoder_token_ids": source, "decoder_token_ids": target})
    forward_s = time.perf_counter() - started
    logits = np.asarray(logits)
    print(f"forward pass: logits {logits.shape} in {forward_s * 1000:.0f} ms")
    # Untrained, the loss is above uniform guessing (ln(vocabulary)): the
    # attention sublayers start small, so each post-norm decoder output is
    # close to its own input embedding, and the tied output layer mostly
    # predicts the input token again.
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labels = np.roll(target, -1, axis=1)
    loss = -np.take_along_axis(log_probs, labels[..., None], -1).mean()
    copies = (logits.argmax(-1) == target).mean()
    print(
        f"untrained cross-entropy: {loss:.2f} nats/token "
        f"(uniform guessing: ln({args.vocabulary_size}) = "
        f"{np.log(args.vocabulary_size):.2f}); predicts its input token "
        f"{copies:.0%} of the time"
    )

    # The same logits, one token at a time through the key/value cache.
    decoder = CachedDecoder(model)
    encoded = decoder.encode(source)
    cache = decoder.init_cache(args.batch_size, args.length)
    cross = None
    steps = []
    for index in range(args.length):
        step_logits, cache, cross = decoder.step(
            target[:, index : index + 1], cache, index, encoded, cross
        )
        steps.append(np.asarray(step_logits))
    gap = np.abs(np.concatenate(steps, axis=1) - logits).max()
    print(f"cached step-by-step decoding vs full pass: max |difference| = {gap:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
