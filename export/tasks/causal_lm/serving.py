"""The causal LM's serving graph (TF Serving): `generate`, `score`,
`logits`, `tokenize` and `detokenize`, core ops only (the signatures are
described in the package's docstring and in `SIGNATURES`)."""

import tensorflow as tf

from tfformer.decoding import Generator
from tfformer.export.archive import SignatureArchive
from tfformer.export.tasks.causal_lm.run import core_tokenizer
from tfformer.export.tasks.text import MAX_INPUT_BYTES, clamp_ids, valid_utf8
from tfformer.export.wordpiece import probe_character_classes
from tfformer.preprocessing.text import PAD_ID

SIGNATURES = {
    "generate": "prompt (batch,) string, max_new_tokens (batch,) int32, "
    "temperature (batch,) float32, top_k (batch,) int32, top_p (batch,) float32, "
    "seed (batch,) int32 -> text (batch,) string, token_ids (batch, n) int32, "
    "log_probs (batch, n) float32, num_tokens (batch,) int32, "
    "prompt_tokens (batch,) int32",
    "score": "text (batch,) string -> log_likelihood (batch,) float32, "
    "num_tokens (batch,) int32, token_log_probs (batch, tokens) float32",
    "logits": "token_ids (batch, T <= context) int32 -> logits (batch, T, "
    "vocabulary) float32",
    "tokenize": "text (batch,) string -> token_ids (batch, tokens) int32, "
    "num_tokens (batch,) int32",
    "detokenize": "token_ids (batch, length) int32 -> text (batch,) string",
}


def _rows_from(ids, starts, count, width):
    """`(batch, width)`: row r holds `ids[r, starts[r] : starts[r] + count[r]]`
    then 0s."""
    columns = tf.range(width)
    ids = tf.pad(ids, [[0, 0], [0, width]])
    picked = tf.gather(ids, starts[:, None] + columns[None, :], batch_dims=1)
    return tf.where(columns[None, :] < count[:, None], picked, tf.zeros_like(picked))


def _max_or(values, floor):
    """max(values), or `floor` for an empty batch."""
    return tf.reduce_max(tf.concat([tf.reshape(values, [-1]), [floor]], axis=0))


class GeneratorGraph(tf.Module):
    """The serving functions of one causal-LM run.

    Args:
        run: a `CausalLMRun`.
        jit_compile: compile the generation loop with XLA (the server must
            have XLA; off by default).
    """

    def __init__(self, run, *, jit_compile=False, character_classes=None):
        super().__init__()
        if run.text.kind == "wordpiece" and character_classes is None:
            character_classes = probe_character_classes()
        self.model = run.model
        self.converted = run.converted
        self.tokenizer = core_tokenizer(run, character_classes)
        self.context = run.context
        self.vocabulary_size = run.vocabulary_size
        self.start_id, self.end_id = run.start_id, run.end_id
        self.generator = Generator(
            run.model,
            max_length=run.context,
            search="sample",
            start_id=run.start_id,
            end_id=run.ends,
            pad_id=PAD_ID,
            seed=0,
        )
        self._generate = (
            tf.function(self.generator.generate, jit_compile=True, autograph=False)
            if jit_compile
            else self.generator.generate
        )
        self.settings = {
            "context": run.context,
            "max_input_bytes": MAX_INPUT_BYTES,
            "jit_compile": bool(jit_compile),
            "tokenizer": run.text.kind,
            "lower_case": run.text.lower_case,
            "signatures": SIGNATURES,
        }

    # -- pieces ----------------------------------------------------------------

    def tokenize_all(self, text):
        """Ragged int32 ids of UTF-8-checked `text`."""
        ids = self.tokenizer.tokenize(valid_utf8(tf.reshape(text, [-1])))
        return tf.cast(ids, tf.int32)

    def prompt_ids(self, prompt, keep):
        """Right-padded prompt ids `(batch, longest)`, each row its last
        `keep[r]` tokens (the start token if none), and their counts. A row
        that starts with the start token (Llama 3's tokenizer puts it there,
        and a prompt of ids may) keeps it first when cut, before its last
        `keep[r] - 1` tokens."""
        prompt = tf.reshape(prompt, [-1])
        size = tf.strings.length(prompt)
        # The last MAX_INPUT_BYTES bytes: the end of a prompt is what counts.
        prompt = tf.strings.substr(
            prompt,
            tf.maximum(size - MAX_INPUT_BYTES, 0),
            tf.fill(tf.shape(size), MAX_INPUT_BYTES),
        )
        ids = self.tokenize_all(prompt)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        kept = tf.minimum(lengths, keep)
        width = tf.maximum(_max_or(kept, 0), 1)
        rows = _rows_from(ids.to_tensor(), lengths - kept, kept, width)
        empty = kept == 0
        leading = ids[:, :1].to_tensor(default_value=-1, shape=[None, 1])[:, 0]
        cut = tf.logical_and(lengths > kept, leading == self.start_id)
        starts = tf.logical_or(empty, cut)
        first = tf.range(width)[None, :] == 0
        rows = tf.where(tf.logical_and(starts[:, None], first), self.start_id, rows)
        return rows, tf.where(empty, 1, kept)

    def _checks(self, batch, max_new_tokens, temperature, top_k, top_p, seed):
        limit = self.context - 1
        checks = []
        for name, value in (
            ("max_new_tokens", max_new_tokens),
            ("temperature", temperature),
            ("top_k", top_k),
            ("top_p", top_p),
            ("seed", seed),
        ):
            checks.append(
                tf.debugging.assert_equal(
                    tf.size(value),
                    batch,
                    message=f"{name} must have one value per prompt",
                )
            )
        rules = (
            (
                tf.logical_and(max_new_tokens >= 0, max_new_tokens <= limit),
                f"max_new_tokens must be in [0, {limit}] (the context is "
                f"{self.context} tokens)",
                max_new_tokens,
            ),
            (
                tf.logical_and(temperature > 0, tf.math.is_finite(temperature)),
                "temperature must be positive and finite",
                temperature,
            ),
            (top_k >= 0, "top_k must be >= 0 (0: no top-k filter)", top_k),
            (
                tf.logical_and(top_p > 0, top_p <= 1),
                "top_p must be in (0, 1] (1: no top-p filter)",
                top_p,
            ),
        )
        for ok, message, value in rules:
            checks.append(
                tf.debugging.Assert(
                    tf.reduce_all(ok), [message + ". Received:", value], summarize=8
                )
            )
        return checks

    # -- signatures --------------------------------------------------------------

    def generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed):
        batch = tf.size(prompt)
        with tf.control_dependencies(
            self._checks(batch, max_new_tokens, temperature, top_k, top_p, seed)
        ):
            max_new_tokens = tf.identity(tf.reshape(max_new_tokens, [-1]))
        # The prompt leaves room for the new tokens, and at least one
        # column for the generator (which needs max_length > prompt).
        keep = tf.minimum(self.context - max_new_tokens, self.context - 1)
        ids, kept = self.prompt_ids(prompt, keep)
        out = self._generate(
            ids,
            max_new_tokens=max_new_tokens,
            temperature=tf.reshape(temperature, [-1]),
            top_k=tf.reshape(top_k, [-1]),
            top_p=tf.reshape(top_p, [-1]),
            seeds=tf.reshape(seed, [-1]),
        )
        tokens = out["token_ids"]
        columns = tf.range(self.context)
        generated = tf.logical_and(columns[None, :] >= kept[:, None], tokens != PAD_ID)
        count = tf.reduce_sum(tf.cast(generated, tf.int32), axis=1)
        width = _max_or(count, 0)
        new_ids = _rows_from(tokens, kept, count, width)
        log_probs = _rows_from(out["token_log_probs"], kept, count, width)
        # The continuation's text: the whole text minus the prompt's (WordPiece
        # joins a "##" piece or punctuation to the prompt's last word).
        prompt_ids = _rows_from(tokens, tf.zeros_like(kept), kept, self.context)
        # The end token is not text (a converted tokenizer would write it).
        tokens = tf.where(
            tf.logical_and(generated, self.generator.is_end(tokens)), PAD_ID, tokens
        )
        new_text_ids = tf.where(self.generator.is_end(new_ids), PAD_ID, new_ids)
        whole = self.tokenizer.detokenize(tokens)
        before = self.tokenizer.detokenize(prompt_ids)
        cut = tf.strings.length(before)
        starts_alike = tf.strings.substr(whole, tf.zeros_like(cut), cut) == before
        text = tf.where(
            starts_alike,
            tf.strings.substr(whole, cut, tf.strings.length(whole) - cut),
            self.tokenizer.detokenize(new_text_ids),
        )
        return {
            "text": valid_utf8(text),
            "token_ids": new_ids,
            "log_probs": log_probs,
            "num_tokens": count,
            "prompt_tokens": kept,
        }

    def score(self, text):
        text = tf.reshape(text, [-1])
        size = tf.strings.length(text)
        text = tf.strings.substr(
            text, tf.zeros_like(size), tf.fill(tf.shape(size), MAX_INPUT_BYTES)
        )
        ids = self.tokenize_all(text)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        batch = tf.shape(lengths)[0]
        window = self.context
        longest = _max_or(lengths, 0)
        windows = tf.maximum((longest - 1 + window - 1) // window, 1)
        span = windows * window
        dense = ids.to_tensor()
        dense = tf.pad(dense, [[0, 0], [0, span + 1 - tf.shape(dense)[1]]])
        # (windows, batch, window): inputs w[:-1], labels w[1:], as training.
        inputs = tf.transpose(
            tf.reshape(dense[:, :span], [batch, windows, window]), [1, 0, 2]
        )
        labels = tf.transpose(
            tf.reshape(dense[:, 1 : span + 1], [batch, windows, window]), [1, 0, 2]
        )

        def one_window(pair):
            x, y = pair
            logits = tf.cast(self.model({"token_ids": x}, training=False), tf.float32)
            log_p = tf.nn.log_softmax(logits, axis=-1)
            picked = tf.gather(log_p, y, batch_dims=2)
            return tf.where(y != PAD_ID, picked, 0.0)

        picked = tf.map_fn(
            one_window,
            (inputs, labels),
            fn_output_signature=tf.TensorSpec([None, window], tf.float32),
        )
        picked = tf.reshape(tf.transpose(picked, [1, 0, 2]), [batch, span])
        token_log_probs = tf.concat([tf.zeros([batch, 1]), picked], axis=1)
        token_log_probs = token_log_probs[:, :longest]
        return {
            "log_likelihood": tf.reduce_sum(token_log_probs, axis=1),
            "num_tokens": tf.maximum(lengths - 1, 0),
            "token_log_probs": token_log_probs,
        }

    def logits(self, token_ids):
        check = tf.debugging.assert_less_equal(
            tf.shape(token_ids)[1],
            self.context,
            message=f"token_ids must have at most {self.context} columns (the context)",
        )
        with tf.control_dependencies([check]):
            if self.converted:
                # No [UNK] to map strays to: id 1 is the checkpoint's id 0.
                inside = tf.debugging.Assert(
                    tf.reduce_all(
                        tf.logical_and(token_ids >= 0, token_ids < self.vocabulary_size)
                    ),
                    [f"token_ids must be in [0, {self.vocabulary_size})"],
                )
                with tf.control_dependencies([inside]):
                    ids = tf.identity(token_ids)
            else:
                ids = clamp_ids(token_ids, self.vocabulary_size)
        logits = self.model({"token_ids": ids}, training=False)
        return {"logits": tf.cast(logits, tf.float32)}

    def tokenize(self, text):
        ids = self.tokenize_all(text)
        return {
            "token_ids": ids.to_tensor(),
            "num_tokens": tf.cast(ids.row_lengths(), tf.int32),
        }

    def detokenize(self, token_ids):
        return {"text": valid_utf8(self.tokenizer.detokenize(token_ids))}

    def write(self, path):
        """Writes the signatures as a SavedModel at `path` (no atomicity)."""
        archive = SignatureArchive()
        archive.track(self.model)
        archive.track(self.tokenizer)
        rows = lambda dtype, name: tf.TensorSpec([None], dtype, name=name)  # noqa: E731
        generate_inputs = [
            rows(tf.string, "prompt"),
            rows(tf.int32, "max_new_tokens"),
            rows(tf.float32, "temperature"),
            rows(tf.int32, "top_k"),
            rows(tf.float32, "top_p"),
            rows(tf.int32, "seed"),
        ]
        # The first endpoint is also `serving_default` (the archive aliases
        # it): one trace of the search instead of two.
        archive.add_endpoint("generate", self.generate, generate_inputs)
        text = rows(tf.string, "text")
        archive.add_endpoint("score", self.score, [text])
        archive.add_endpoint(
            "logits",
            self.logits,
            [tf.TensorSpec([None, None], tf.int32, name="token_ids")],
        )
        archive.add_endpoint("tokenize", self.tokenize, [text])
        archive.add_endpoint(
            "detokenize",
            self.detokenize,
            [tf.TensorSpec([None, None], tf.int32, name="token_ids")],
        )
        archive.write_out(path)
