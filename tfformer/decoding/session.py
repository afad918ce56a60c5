"""A decoder-only model's key/value cache kept from one generation to the
next, as a chat keeps it between turns."""

import operator

from keras import ops

from tfformer.errors import InputError, InputTypeError


def shared_prefix(a, b):
    """The length of the longest common prefix of the id lists `a` and `b`."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class DecodingSession:
    """Streams generations of one model, keeping its key/value cache from
    one to the next: each prompt's ids after the longest prefix it shares
    with the ids the cache holds (the last prompt and what was generated
    after it) are read in one step, and generation goes on as
    `Generator.stream` does it.

    A causal decoder's keys and values at a column depend only on the ids
    up to it, so the kept ones are those a fresh pass computes (up to
    float round-off from reading in other step widths). A conversation cut
    at its start, or a reply its chat template writes back as other ids,
    shares a shorter prefix and re-reads the rest.

    The cache grows with what it holds, a power of two from 64 slots up to
    the generator's `max_length` (a chat's: the model's context, which for
    a converted checkpoint may be 128 Ki tokens), so a step attends over
    about the conversation so far, not the whole context.

    Args:
        generator: a `Generator` of a decoder-only model with search
            "greedy" or "sample"; its `max_length` bounds each prompt plus
            its new tokens; its settings (search, seed, end ids) hold for
            every call.

    Attributes:
        ids: the ids whose keys and values the cache holds, in order.
        reused: how many of the last prompt's ids came from the cache.

    Example:
    >>> session = DecodingSession(Generator(model, max_length=512))
    >>> for position, token, generated in session.stream(ids, max_new_tokens=64):
    ...     ...
    >>> # A longer conversation starting with ids + the reply reads only
    >>> # the new ids.
    """

    def __init__(self, generator):
        if generator.decoder.is_seq2seq:
            raise InputError(
                "DecodingSession needs a decoder-only model (an encoder-decoder "
                "model's source changes the whole cache)."
            )
        if generator.search == "beam":
            raise InputError(
                "DecodingSession needs search 'greedy' or 'sample'. Received: "
                "search='beam'"
            )
        self.generator = generator
        self.ids = []
        self.reused = 0
        self._cache, self._capacity = None, 0

    def stream(self, prompt_ids, *, max_new_tokens, compile_step=True):
        """Continues `prompt_ids` (a non-empty list of ids without the pad
        id) by up to `max_new_tokens` tokens, as `Generator.stream` of
        that one prompt would with the generator's settings.

        Yields:
            `(position, token_ids, generated)` as `Generator.stream` does,
            each `(1,)`.
        """
        generator = self.generator
        try:
            ids = [operator.index(i) for i in prompt_ids]
        except TypeError:
            raise InputTypeError(
                f"prompt_ids must be a list of ints. Received: {prompt_ids!r:.80}"
            ) from None
        if not ids or generator.pad_id in ids or len(ids) >= generator.max_length:
            raise InputError(
                f"prompt_ids must be 1 to {generator.max_length - 1} ids (the "
                f"generator's max_length less one), without the pad id "
                f"({generator.pad_id}). Received: {len(ids)} ids {ids[:8]!r}"
            )
        try:
            new = operator.index(max_new_tokens)
        except TypeError:
            raise InputTypeError(
                f"max_new_tokens must be an int. Received: {max_new_tokens!r}"
            ) from None
        if isinstance(max_new_tokens, bool) or not (
            0 <= new <= generator.max_length - len(ids)
        ):
            raise InputError(
                f"max_new_tokens must be in [0, {generator.max_length - len(ids)}] "
                f"(a prompt of {len(ids)} ids, max_length {generator.max_length}). "
                f"Received: {max_new_tokens!r}"
            )
        # One column at least is read, for the logits of the first new token.
        shared = min(shared_prefix(self.ids, ids), len(ids) - 1)
        # The step after the last new token writes padding one slot further.
        self._reserve(min(len(ids) + new + 1, generator.max_length))
        # Columns past `shared` are written before anything reads them (a
        # step hides the slots after the last one it writes).
        self.ids, self.reused = self.ids[:shared], shared
        steps = generator.resume(
            ops.convert_to_tensor([ids], "int32"),
            self._cache,
            shared,
            ops.convert_to_tensor([new], "int32"),
            compile_step,
        )
        held = list(ids)  # what the cache holds once a step has run
        for position, state, generated in steps:
            token = ops.convert_to_numpy(ops.take(state[1], position, axis=1))
            if int(token[0]) != generator.pad_id:  # (padding ends the row)
                held.append(int(token[0]))
            self._cache, self.ids = state[2], list(held)
            yield position, token, generated

    @property
    def capacity(self):
        """The slots the cache has now (0 before the first stream)."""
        return self._capacity

    def _reserve(self, slots):
        """A cache of at least `slots` slots: the next power of two (64 at
        least, the generator's max_length at most), the kept keys and values
        copied in."""
        if self._cache is not None and self._capacity >= slots:
            return
        generator = self.generator
        capacity = min(generator.max_length, max(64, 1 << (slots - 1).bit_length()))
        cache = generator.decoder.init_cache(1, capacity)
        if self._cache is not None:
            cache = tuple(
                ops.slice_update(new, [0] * len(old.shape), old)
                for new, old in zip(cache, self._cache, strict=True)
            )
        self._cache, self._capacity = cache, capacity
