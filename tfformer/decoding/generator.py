"""Incremental decoding: greedy, beam search and sampling in one loop.

Everything is `keras.ops` on static shapes (a maximum length, fixed-size
key/value caches), with an `ops.while_loop` that exits early once every
sequence has ended, so the whole search traces into one graph. On the
TensorFlow backend `Generator.compiled()` wraps it in a
`tf.function(jit_compile=True)`.
"""

import random

import keras
import numpy as np
from keras import ops
from keras.tree import map_structure as tree_map

from tfformer.decoding.sampling import (
    NEG_INF,
    check_row_settings,
    check_sampling_arguments,
    filter_logits_per_row,
    greedy_choice,
    lowest_id_not,
    runs_compiled,
    sample_inverse_cdf,
    uniform_stream,
)
from tfformer.errors import InputError, InputTypeError
from tfformer.models.cached_decoder import CachedDecoder

SEARCHES = ("greedy", "beam", "sample")


def _check_int(name, value, minimum):
    """`value` as a Python int (a NumPy integer too), or InputError."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(
            f"{name} must be an int >= {minimum}. Received: {name}={value!r}"
        )
    return value


def gnmt_length_penalty(length, alpha):
    """((5 + length) / 6) ** alpha, from Wu et al. 2016 (GNMT), eq. 14."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


class Generator:
    """Generates token ids with a `transformer_seq2seq` or `gpt_decoder` model.

    The encoder runs once per source, and so do the cross-attention keys and
    values. Each new token costs one decoder step over a key/value cache.

    Args:
        model: a model from `transformer_seq2seq` or `gpt_decoder`.
        max_length: total length of the output, start token or prompt
            included; the caches have this size.
        search: "greedy", "beam" or "sample".
        start_id: first decoder token of a seq2seq model (ignored for GPT,
            whose prompt comes first).
        end_id: the token that ends a sequence, or a non-empty list, tuple
            or 1-D NumPy array of them (a sequence ends at the first it
            generates; Llama 3.1 Instruct's config lists three).
            `self.end_id` is the first.
        pad_id: written after a sequence has ended; also marks padding in
            sources and prompts. Never generated.
        beam_width: beams per example ("beam").
        length_penalty: GNMT alpha ("beam"): hypotheses are ranked by
            log P / ((5 + length) / 6) ** alpha; 0 ranks by log P.
        temperature, top_k, top_p: sampling filters ("sample").
        seed: int seed; the same seed gives the same samples. Row r of a
            batch samples with seed + r (mod 2**32) from the portable stream
            of `tfformer.decoding.sampling`, so the SavedModel and the TFLite
            reference runtime given that seed draw the same tokens. None: a
            seed drawn from Python's `random` (`keras.utils.set_random_seed`
            fixes it).
        carry_constants: make the greedy/sampling loop rebuild its loop
            invariants each step (a no-op in value) so TFLite's full-int8
            calibrator can run it; see `_refresh`. Export sets it.

    Call arguments:
        inputs: seq2seq: `(batch, S)` source ids (0 = padding). GPT: `(batch,
            P)` prompts, right-padded with 0; rows may differ in length, each
            continues after its own last token.

    Returns:
        A dict: "token_ids" `(batch, max_length)` (the prompt or start token,
        then the generated tokens; `pad_id` after the end token) and "scores"
        `(batch,)`, the sum of the generated tokens' log-probabilities
        (for "beam": the length-normalized score that ranked it). Greedy and
        sampling add "token_log_probs" `(batch, max_length)`: each generated
        token's log-probability under the model (before temperature and
        filters), 0 at prompt and padding columns.

    Example:
    >>> generator = Generator(model, max_length=32, search="beam", beam_width=4)
    >>> out = generator.compiled()(source_ids)   # one XLA-compiled graph
    """

    def __init__(
        self,
        model,
        *,
        max_length,
        search="greedy",
        start_id=2,
        end_id=3,
        pad_id=0,
        beam_width=4,
        length_penalty=0.6,
        temperature=1.0,
        top_k=None,
        top_p=None,
        seed=None,
        carry_constants=False,
    ):
        if search not in SEARCHES:
            raise InputError(
                f"search must be one of {SEARCHES}. Received: search={search!r}"
            )
        _check_int("max_length", max_length, 2)
        _check_int("beam_width", beam_width, 1)
        if isinstance(end_id, np.ndarray | np.integer) and end_id.ndim <= 1:
            end_id = end_id.tolist()  # NumPy ids, as tokenizers give them
        end_ids = list(end_id) if isinstance(end_id, list | tuple) else [end_id]
        if not end_ids:
            raise InputError(
                "end_id must be an id or a non-empty list of ids. Received: []"
            )
        start_id = _check_int("start_id", start_id, 0)
        end_ids = [_check_int("end_id", i, 0) for i in end_ids]
        pad_id = _check_int("pad_id", pad_id, 0)
        if isinstance(length_penalty, bool) or not isinstance(
            length_penalty, int | float
        ):
            raise InputTypeError(
                f"length_penalty must be a number. Received: {length_penalty!r}"
            )
        if length_penalty < 0:
            raise InputError(f"length_penalty must be >= 0. Received: {length_penalty}")
        check_sampling_arguments(temperature, top_k, top_p)
        # A model, or anything with CachedDecoder's interface (tests use a
        # hand-made Markov chain).
        self.decoder = CachedDecoder(model) if isinstance(model, keras.Model) else model
        capacity = getattr(
            getattr(self.decoder, "embedding", None), "sequence_length", None
        )
        if capacity is not None and max_length > capacity:
            raise InputError(
                f"max_length must be at most the model's max_sequence_length "
                f"({capacity}). Received: max_length={max_length}"
            )
        self.model = model
        self.max_length = max_length
        self.search = search
        self.start_id, self.pad_id = start_id, pad_id
        self.end_ids = tuple(dict.fromkeys(end_ids))
        self.end_id = self.end_ids[0]
        self.beam_width = beam_width
        self.length_penalty = float(length_penalty)
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.seed = seed
        self.carry_constants = bool(carry_constants)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InputTypeError(
                f"seed must be an int or None. Received: seed={seed!r}"
            )
        self.seed = (random.getrandbits(32) if seed is None else seed) % 2**32

    # -- shared pieces ---------------------------------------------------------

    def is_end(self, tokens):
        """Whether each of `tokens` (int32, any shape) is one of the end ids."""
        ends = tokens == self.end_ids[0]
        for end in self.end_ids[1:]:
            ends = ops.logical_or(ends, tokens == end)
        return ends

    def _prompt(self, inputs):
        """(prompt ids `(batch, max_length)`, prompt lengths `(batch,)`, encoded)."""
        inputs = ops.convert_to_tensor(inputs)
        if "int" not in str(inputs.dtype):
            raise InputTypeError(
                f"inputs must be integer token ids. Received: {inputs.dtype}"
            )
        batch = ops.shape(inputs)[0]
        if self.decoder.is_seq2seq:
            encoded = self.decoder.encode(inputs)
            prompt = ops.concatenate(
                [
                    ops.full((batch, 1), self.start_id, "int32"),
                    ops.full((batch, self.max_length - 1), self.pad_id, "int32"),
                ],
                axis=1,
            )
            return prompt, ops.ones((batch,), "int32"), encoded
        length = inputs.shape[1]
        if length is not None and length >= self.max_length:
            raise InputError(
                f"max_length ({self.max_length}) must exceed the prompt length "
                f"({length})."
            )
        inputs = ops.cast(inputs, "int32")
        lengths = ops.sum(ops.cast(ops.not_equal(inputs, self.pad_id), "int32"), axis=1)
        # An empty prompt still needs a first token to condition on.
        lengths = ops.maximum(lengths, 1)
        prompt = ops.pad(
            inputs,
            [[0, 0], [0, self.max_length - ops.shape(inputs)[1]]],
            constant_values=self.pad_id,
        )
        return prompt, lengths, None

    def _step(self, token, cache, index, encoded, cross):
        """Log-probabilities `(batch, vocab)` of the token after `token` at `index`."""
        logits, cache, cross = self.decoder.step(token, cache, index, encoded, cross)
        return (
            ops.log_softmax(ops.cast(logits[:, -1], "float32"), axis=-1),
            cache,
            cross,
        )

    def _without_padding(self, log_probs):
        """`log_probs` `(batch, vocab)` with `pad_id` ruled out (NEG_INF).

        Padding is never generated. The models mask id 0 wherever they read
        it (`mask_zero`), and the output writes `pad_id` after the end token:
        a generated pad would be attended to by the cached steps but skipped
        by the model's own forward pass, and read back as padding. The other
        tokens keep their log-probabilities (the softmax spans the whole
        vocabulary), so scores stay the model's log P of the sequence.
        """
        vocabulary = ops.shape(log_probs)[-1]
        is_pad = ops.arange(vocabulary, dtype="int32") == self.pad_id
        return ops.where(is_pad[None, :], NEG_INF, log_probs)

    def __call__(self, inputs):
        if self.search == "beam":
            return self._beam_search(inputs)
        return self._greedy_or_sample(inputs)

    def generate(
        self,
        inputs,
        *,
        max_new_tokens=None,
        temperature=None,
        top_k=None,
        top_p=None,
        seeds=None,
    ):
        """Greedy or sampled generation with settings given per row as
        tensors (what a serving signature passes through), each `(batch,)`:
        `max_new_tokens` (int, >= 0; the output still ends at `max_length`),
        `temperature` (> 0), `top_k` (0: none), `top_p` (in (0, 1]; 1: none)
        and `seeds` (int32 or uint32). None keeps the generator's own
        setting. Values given as arrays or eager tensors are checked
        (ValueError naming the setting); symbolic ones, inside a traced
        function, cannot be, and the caller checks them (the SavedModel's
        assertions do). Returns what calling the generator returns."""
        if self.search == "beam":
            raise InputError("generate() needs search 'greedy' or 'sample'.")
        check_row_settings(
            self.max_length,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
        )
        overrides = dict(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            seeds=seeds,
        )
        return self._greedy_or_sample(inputs, overrides)

    def _settings(self, batch, lengths, overrides=None):
        """The per-row sampling settings and end columns, as tensors."""
        overrides = overrides or {}

        def given(name, default, dtype):
            value = overrides.get(name)
            if value is None:
                return ops.full((batch,), default, dtype)
            return ops.cast(value, dtype)

        settings = {
            "temperature": given("temperature", float(self.temperature), "float32"),
            "top_k": given("top_k", int(self.top_k or 0), "int32"),
            "top_p": given(
                "top_p", 1.0 if self.top_p is None else float(self.top_p), "float32"
            ),
        }
        # A filter nobody asked for is left out of the graph (None): with
        # neither, no sort or threshold search over the vocabulary at each
        # step (`filter_logits_per_row`).
        for name in ("top_k", "top_p"):
            if getattr(self, name) is None and overrides.get(name) is None:
                settings[name] = None
        if overrides.get("seeds") is None:
            # (XLA has no uint32 Range.)
            rows = ops.cast(ops.arange(batch, dtype="int32"), "uint32")
            settings["seeds"] = ops.add(
                ops.convert_to_tensor(self.seed, "uint32"), rows
            )
        else:
            settings["seeds"] = ops.cast(overrides["seeds"], "uint32")
        new = overrides.get("max_new_tokens")
        # The first column that is not generated any more.
        settings["ends"] = (
            ops.full((batch,), self.max_length, "int32")
            if new is None
            else lengths + ops.cast(new, "int32")
        )
        return settings

    def compiled(self, jit_compile=True):
        """The same search as one `tf.function` (TensorFlow backend only)."""
        if keras.backend.backend() != "tensorflow":
            raise InputError(
                "compiled() needs the TensorFlow backend; call the generator "
                f"directly (or jax.jit it) on {keras.backend.backend()!r}."
            )
        import tensorflow as tf

        return tf.function(
            self.__call__,
            jit_compile=jit_compile,
            reduce_retracing=True,
            # ops.while_loop already; autograph would only re-read the source.
            autograph=False,
        )

    def _refresh(self, constants, i):
        """`constants` (encoder output, cross-attention caches), returned by
        the loop body as new tensors rather than as its inputs.

        With `carry_constants`, x * (i >= 0) (and mask & (i >= 0)): equal
        values that no converter can fold away. TFLite's calibrator crashes on
        a WHILE whose body passes an input straight through
        (tensorflow/tensorflow#75140), which blocks full-int8 export.
        """
        if not self.carry_constants:
            return constants
        keep = i >= 0

        def touch(x):
            if x is None:
                return None
            if "bool" in str(x.dtype):
                return ops.logical_and(x, keep)
            return x * ops.cast(keep, x.dtype)

        return tree_map(touch, constants)

    # -- greedy and sampling -------------------------------------------------

    def _choose(self, log_probs, i, settings):
        if self.search == "greedy":
            return greedy_choice(log_probs, self.pad_id)
        logits = filter_logits_per_row(
            self._without_padding(log_probs),
            temperature=settings["temperature"],
            top_k=settings["top_k"],
            top_p=settings["top_p"],
        )
        chosen = sample_inverse_cdf(logits, uniform_stream(settings["seeds"], i))
        # Padding has probability 0, so the draw returns it only for a row
        # with no positive probability (a NaN): that row gets the lowest id
        # that is not padding, as in greedy_choice.
        return ops.where(chosen == self.pad_id, lowest_id_not(self.pad_id), chosen)

    def _start(self, inputs, overrides=None, cache=None, cached=0):
        """The loop state of greedy and sampled generation after the first
        step, (i, tokens, cache, log_probs, finished, scores, constants,
        token_log_probs), and the per-row settings (`_settings`). A
        decoder-only model's `cache` may hold the keys and values of the
        prompts' first `cached` columns already (`DecodingSession`); the
        step reads the columns after them."""
        tokens, lengths, encoded = self._prompt(inputs)
        batch = ops.shape(tokens)[0]
        if cache is None:
            cache = self.decoder.init_cache(batch, self.max_length)
        # A decoder-only model reads the prompt's columns in one step, and
        # the loop starts after the shortest prompt (a longer row's later
        # columns, and any padding, are written again before they are read).
        # Compiled (XLA, JAX), the input's static width; else up to the
        # longest prompt (the TFLite loop model's input is context-wide).
        # (An empty batch: a step of width 1, as a seq2seq model's.)
        width, first = 1, 1
        if encoded is None:
            if runs_compiled():
                width = ops.shape(ops.convert_to_tensor(inputs))[1]
            else:
                width = ops.max(ops.concatenate([lengths, ops.ones((1,), "int32")]))
            at_most = ops.full((1,), width, "int32")
            first = ops.min(ops.concatenate([lengths, at_most]))
        logits, cache, cross = self.decoder.step(
            tokens[:, cached:width], cache, cached, encoded, None
        )
        last = ops.take(logits, ops.reshape(first - 1 - cached, (1,)), axis=1)
        # (A step of dynamic width loses the static batch size in a graph.)
        last = ops.reshape(last, (batch, ops.shape(logits)[-1]))
        log_probs = ops.log_softmax(ops.cast(last, "float32"), axis=-1)
        state = (
            ops.cast(first, "int32"),
            tokens,
            cache,
            log_probs,
            ops.zeros((batch,), "bool"),
            ops.zeros((batch,), "float32"),
            (encoded, cross) if encoded is not None else (),
            ops.zeros((batch, self.max_length), "float32"),
        )
        settings = self._settings(batch, lengths, overrides)
        settings["lengths"] = lengths
        return state, settings

    def _advance(
        self,
        settings,
        i,
        tokens,
        cache,
        log_probs,
        finished,
        scores,
        constants,
        token_log_probs,
    ):
        """One position of greedy or sampled generation: the token at column
        `i` (copied from the prompt, chosen, or padding after the end) and the
        step that reads it. Returns the next state and whether each row's
        token at `i` was generated."""
        encoded, cross = constants if constants else (None, None)
        lengths = settings["lengths"]
        chosen = self._choose(log_probs, i, settings)
        # Rows past their max_new_tokens have ended.
        finished = ops.logical_or(finished, i >= settings["ends"])
        # Prompt tokens are copied, not chosen; ended rows get padding.
        forced = i < lengths
        prompt_token = ops.take(tokens, i, axis=1)
        token = ops.where(forced, prompt_token, chosen)
        token = ops.where(finished, self.pad_id, token)
        generated = ops.logical_and(ops.logical_not(forced), ops.logical_not(finished))
        picked = ops.take_along_axis(log_probs, token[:, None], axis=-1)[:, 0]
        picked = ops.where(generated, picked, 0.0)
        scores = scores + picked
        # (batch, max_length): the new token written at column i.
        positions = ops.arange(self.max_length, dtype="int32")
        at_i = positions[None, :] == i
        tokens = ops.where(at_i, token[:, None], tokens)
        token_log_probs = ops.where(at_i, picked[:, None], token_log_probs)
        finished = ops.logical_or(
            finished, ops.logical_and(generated, self.is_end(token))
        )
        log_probs, cache, _ = self._step(token[:, None], cache, i, encoded, cross)
        state = (
            i + 1,
            tokens,
            cache,
            log_probs,
            finished,
            scores,
            self._refresh(constants, i),
            token_log_probs,
        )
        return state, generated

    def _greedy_or_sample(self, inputs, overrides=None):
        state, settings = self._start(inputs, overrides)

        def cond(i, tokens, cache, log_probs, finished, scores, *_):
            return ops.logical_and(
                i < self.max_length, ops.logical_not(ops.all(finished))
            )

        def body(*state):
            return self._advance(settings, *state)[0]

        _, tokens, _, _, _, scores, _, token_log_probs = ops.while_loop(
            cond, body, state
        )
        return {
            "token_ids": tokens,
            "scores": scores,
            "token_log_probs": token_log_probs,
        }

    def stream(self, inputs, *, compile_step=True):
        """Greedy or sampled generation, one position at a time, for callers
        that show tokens as they are made.

        The same steps, tokens and random draws as calling the generator
        (one seed gives the same samples either way). Beam search decides
        its hypotheses only at the end and has no stream.

        Args:
            inputs: as for calling the generator.
            compile_step: run each step as one `tf.function` (TensorFlow
                backend; other backends run eagerly).

        Yields:
            `(position, token_ids, generated)` for positions from the
            shortest prompt's length (the prompts' columns are read in one
            step) to `max_length - 1` until every row has ended: numpy `(batch,)` ids
            written at `position` and whether each was generated (rather than
            copied from the prompt or padding after the end).
        """
        if self.search == "beam":
            raise InputError(
                "stream() needs search 'greedy' or 'sample'; beam search "
                "chooses its hypotheses at the end. Received: search='beam'"
            )
        start, settings = self._start(inputs)
        for position, state, generated in self._steps(start, settings, compile_step):
            yield (
                position,
                ops.convert_to_numpy(ops.take(state[1], position, axis=1)),
                generated,
            )

    def resume(self, inputs, cache, cached, max_new_tokens, compile_step=True):
        """`stream`'s steps for a decoder-only model whose `cache` holds the
        keys and values of the prompts' first `cached` columns already
        (`DecodingSession`), at most `max_new_tokens` `(batch,)` each: yields
        (position, the loop state after it (its cache third), numpy
        `generated`)."""
        inputs = ops.convert_to_tensor(inputs)
        lengths = ops.sum(ops.cast(ops.not_equal(inputs, self.pad_id), "int32"), 1)
        shortest = int(ops.convert_to_numpy(ops.min(lengths)))
        if self.decoder.is_seq2seq or not 0 <= cached < shortest:
            raise InputError(
                "resume() needs a decoder-only model and cached in [0, the "
                f"shortest prompt's length) ({shortest}). Received: {cached!r}"
            )
        overrides = {"max_new_tokens": max_new_tokens}
        start, settings = self._start(inputs, overrides, cache, cached)
        yield from self._steps(start, settings, compile_step)

    def _steps(self, state, settings, compile_step):
        """`stream`'s loop from `_start`'s state: (position, the state after
        it, numpy `generated`) until every row has ended. The step's graph
        is kept for the generator's next stream (a chat's next turn): the
        generator's settings are read when it is traced, so a changed
        setting needs a new generator."""
        advance = self._advance
        if compile_step and keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            if getattr(self, "_graph_advance", None) is None:
                self._graph_advance = tf.function(
                    advance, autograph=False, reduce_retracing=True
                )
            advance = self._graph_advance
        while int(state[0]) < self.max_length and not bool(ops.all(state[4])):
            position = int(state[0])
            state, generated = advance(settings, *state)
            yield position, state, ops.convert_to_numpy(generated)

    # -- beam search -----------------------------------------------------------

    def _beam_search(self, inputs):
        """Beam search with GNMT length normalization.

        Per example it keeps `beam_width` alive hypotheses and `beam_width`
        finished ones. Each step takes the 2W best extensions of the alive
        beams: those ending with an end id are scored log P / lp(length) and
        compete with the finished set; the best W others stay alive. It stops
        when no alive beam can still beat the worst finished one.
        """
        width, max_length = self.beam_width, self.max_length
        tokens, lengths, encoded = self._prompt(inputs)
        batch = ops.shape(tokens)[0]

        def tile(x):
            # (batch, ...) -> (batch * width, ...), beams of an example adjacent.
            return ops.repeat(x, width, axis=0)

        if encoded is not None:
            encoded = (tile(encoded[0]), tile(encoded[1]))
        cache = self.decoder.init_cache(batch * width, max_length)
        log_probs, cache, cross = self._step(
            tile(tokens[:, :1]), cache, 0, encoded, None
        )
        vocabulary = ops.shape(log_probs)[-1]
        positions = ops.arange(max_length, dtype="int32")
        lengths_beam = tile(lengths)
        # Only the first beam of each example starts alive.
        first = ops.concatenate(
            [ops.zeros((batch, 1)), ops.full((batch, width - 1), NEG_INF)], axis=1
        )
        offsets = ops.arange(batch, dtype="int32")[:, None] * width

        def gather_beams(x, beams):
            """Rows of `x` `(batch * width, ...)` picked by `beams` `(batch, width)`."""
            return ops.take(x, ops.reshape(beams + offsets, (-1,)), axis=0)

        def cond(i, sequences, cache, log_probs, alive, done, done_scores):
            # The best an alive beam can still reach: its log P (which only
            # falls) over the largest length penalty.
            best_alive = ops.max(alive, axis=1) / gnmt_length_penalty(
                max_length, self.length_penalty
            )
            worst_done = ops.min(done_scores, axis=1)
            can_improve = ops.any(best_alive > worst_done)
            return ops.logical_and(i < max_length, can_improve)

        def body(i, sequences, cache, log_probs, alive, done, done_scores):
            forced = i < lengths_beam  # (batch * width,)
            prompt_token = ops.take(sequences, i, axis=1)
            forced_scores = ops.where(
                ops.arange(vocabulary, dtype="int32")[None, :] == prompt_token[:, None],
                0.0,
                NEG_INF,
            )
            step_scores = ops.where(
                forced[:, None], forced_scores, self._without_padding(log_probs)
            )
            # (batch, width * vocab): total log P of every extension.
            totals = ops.reshape(
                ops.reshape(alive, (-1, 1)) + step_scores, (batch, width * vocabulary)
            )
            top_scores, top_index = ops.top_k(totals, 2 * width)
            beams = top_index // vocabulary
            words = ops.cast(top_index % vocabulary, "int32")
            forced_now = ops.reshape(forced, (batch, width))[:, 0:1]
            ends = ops.logical_and(self.is_end(words), ops.logical_not(forced_now))
            # (batch, 2W, max_length): each candidate's parent, new word at i.
            candidates = ops.reshape(
                gather_beams(sequences, beams), (batch, 2 * width, max_length)
            )
            candidates = ops.where(
                positions[None, None, :] == i, words[:, :, None], candidates
            )
            # Finished candidates, normalized by their generated length
            # (columns prompt_length..i).
            generated = i + 1 - ops.reshape(lengths_beam, (batch, width))[:, 0:1]
            normalized = top_scores / gnmt_length_penalty(
                generated, self.length_penalty
            )
            new_done = ops.where(ends, normalized, NEG_INF)
            merged_scores = ops.concatenate([done_scores, new_done], axis=1)
            merged = ops.concatenate([done, candidates], axis=1)
            done_scores, keep = ops.top_k(merged_scores, width)
            done = ops.take_along_axis(merged, keep[:, :, None], axis=1)
            # Alive: the best W candidates that did not end.
            alive_scores = ops.where(ends, NEG_INF, top_scores)
            alive, pick = ops.top_k(alive_scores, width)
            chosen_beams = ops.take_along_axis(beams, pick, axis=1)
            chosen_words = ops.take_along_axis(words, pick, axis=1)
            sequences = ops.reshape(
                ops.take_along_axis(candidates, pick[:, :, None], axis=1),
                (batch * width, max_length),
            )
            cache = tuple(gather_beams(c, chosen_beams) for c in cache)
            log_probs, cache, _ = self._step(
                ops.reshape(chosen_words, (-1, 1)), cache, i, encoded, cross
            )
            return i + 1, sequences, cache, log_probs, alive, done, done_scores

        state = (
            ops.convert_to_tensor(1, "int32"),
            tile(tokens),
            cache,
            log_probs,
            first,
            ops.full((batch, width, max_length), self.pad_id, "int32"),
            ops.full((batch, width), NEG_INF),
        )
        _, sequences, _, _, alive, done, done_scores = ops.while_loop(cond, body, state)
        # Examples with no finished hypothesis return their best alive beam.
        has_done = done_scores[:, 0] > NEG_INF / 2
        alive_sequences = ops.reshape(sequences, (batch, width, max_length))[:, 0]
        length = ops.sum(
            ops.cast(ops.not_equal(alive_sequences, self.pad_id), "int32"), 1
        )
        alive_score = alive[:, 0] / gnmt_length_penalty(
            length - lengths, self.length_penalty
        )
        return {
            "token_ids": ops.where(has_done[:, None], done[:, 0], alive_sequences),
            "scores": ops.where(has_done, done_scores[:, 0], alive_score),
        }
