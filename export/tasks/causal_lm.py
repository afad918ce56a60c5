"""Export of causal language-model (GPT) runs.

SavedModel (TF Serving), core ops only, loadable with TensorFlow alone:
- `generate` (also `serving_default`): per prompt a string and its own
  `max_new_tokens`, `temperature`, `top_k` (0: none), `top_p` (1: none) and
  `seed`, each `(batch,)`, any batch size (0 too). The prompt is read as
  UTF-8 (invalid bytes become U+FFFD), its last 16 KiB tokenized in the graph
  and cut from the left to leave `max_new_tokens` of the context (an empty
  prompt starts from the start token). Sampling is
  `tfformer.decoding.Generator`'s (inverse transform on the portable
  stream): `top_k=1` is greedy. Returns the continuation's `text`, its
  `token_ids` and `log_probs` (each token's log-probability under the
  model, before temperature and filters) `(batch, longest)` padded with 0,
  `num_tokens` and `prompt_tokens` `(batch,)`. A bad setting fails the call
  with an InvalidArgumentError naming it.
- `score`: texts `(batch,)` -> `log_likelihood` (the sum of log P of every
  token after the first, each given the tokens before it in its window:
  windows of `context` + 1 tokens overlapping by one, as training and
  `tfformer-evaluate` cut the stream, except that a text's last partial
  window is scored too, where evaluation drops it), `num_tokens` (scored
  tokens) and `token_log_probs` `(batch, tokens)` (0 at the first). Texts
  are cut to their first 16 KiB.
- `logits`: `token_ids (batch, T<=context)` -> `logits (batch, T, vocab)`.
- `tokenize` / `detokenize`.

TFLite (LiteRT), builtin ops only, in the shape of ai-edge-torch's
generative models so that an app owns the loop and the sampling:
- `model.tflite` (or `model_<quantize>.tflite`) with two signatures:
  `prefill` (`tokens` int32 `(1, N)`, `input_pos` int32 `(N,)`, the caches)
  -> the caches, and `decode` (`tokens` `(1, 1)`, `input_pos` `(1,)`, the
  caches) -> `logits` `(1, 1, vocab)` and the caches. The caches are
  `kv_cache_k_{i}` / `kv_cache_v_{i}`, float32 `(1, context, kv_heads,
  head_dim)` per layer (ai-edge-torch's BTNH layout), the same names in and
  out; positions must be contiguous from `input_pos[0]`. Like ai-edge-torch,
  `prefill` returns no logits: the app prefills the prompt and then decodes
  its last token again. With `prefill_lengths` of more than one length the
  signatures are `prefill_{N}`, as ai-edge-torch names them.
- `model_loop.tflite`: the convenience form, `token_ids` `(1, context)`
  (the prompt, right-padded with 0) and `max_new_tokens` `(1,)` in,
  `token_ids` `(1, context)` out, the greedy KV-cached loop inside (one
  WHILE op, which the GPU delegate cannot run). The app cuts the prompt:
  the model reads its first context - 1 ids (leave room for the new
  tokens: at most context - max_new_tokens), clips `max_new_tokens` into
  [0, context - 1] and generates until [END] or the context ends. An empty
  prompt (all 0) starts from [START]. (A converted checkpoint's start and
  end ids are its own, in `text.json`'s `special_ids`.)
- `text.json`, the vocabulary (a converted run's tokenizer file,
  `text_tokenizer.json`), `tokenizer.py` (the translator's reference
  tokenizer, reused; GPT-2's byte-level BPE and token ids for converted
  runs) and `generate.py` (`export/runtimes/generate.py`, the
  reference runtime that drives prefill/decode and samples exactly as the
  Keras generator does).
"""

import dataclasses
import json
import os

import keras
import numpy as np
import tensorflow as tf

from tfformer.decoding import Generator
from tfformer.export.tasks.text import (
    DEVICE_TOKENIZER,
    MAX_INPUT_BYTES,
    clamp_ids,
    device_text_settings,
    make_tokenizer,
    valid_utf8,
)
from tfformer.export.wordpiece import probe_character_classes
from tfformer.models.cached_decoder import CachedDecoder
from tfformer.preprocessing.text import END_ID, PAD_ID, START_ID, UNK_ID
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import atomic_copy, atomic_write_text

DEVICE_GENERATOR = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "runtimes", "generate.py"
)
VOCABULARY_FILE = "text_vocab.txt"
# A converted decoder's tokenizer file (GPT-2's BPE, token ids) on device.
CONVERTED_TOKENIZER = "text_tokenizer.json"

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


@dataclasses.dataclass
class CausalLMRun:
    """What export needs from a causal-LM run directory."""

    directory: str
    model: keras.Model
    text: object  # TokenizerSpec
    context: int  # the training window: the caches' length
    vocabulary_size: int
    # The generator's start and end ids: the reserved ones, or a converted
    # checkpoint's (shifted by one).
    start_id: int = START_ID
    end_id: int = END_ID


def read_run(run_dir, checkpoint="model.keras"):
    """A finished causal-LM run as a `CausalLMRun` (ValueError naming the
    missing file, or the wrong task)."""
    run = run_dir if isinstance(run_dir, RunDirectory) else RunDirectory(run_dir)
    if run.task != "causal_lm":
        raise ValueError(f"{run.path} holds a {run.task!r} run, not a causal_lm run.")
    spec = run.tokenizer("text")
    context = run.manifest.max_length
    model = run.load_model(checkpoint)
    special = {}
    if spec.kind in CONVERTED_KINDS:
        tokenizer = converted_tokenizer(spec)
        special = {"start_id": tokenizer.start_id, "end_id": tokenizer.end_id}
    return CausalLMRun(
        directory=run.path,
        model=model,
        text=spec,
        context=context,
        vocabulary_size=int(model.backbone.token_embedding.vocabulary_size),
        **special,
    )


# A converted decoder's tokenizers (token ids; GPT-2's byte-level BPE), in
# core ops for its SavedModel, in plain Python (`device_tokenizer.py`) next
# to its TFLite model.
CONVERTED_KINDS = ("ids", "bpe")


def converted_tokenizer(spec):
    from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer
    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer

    kind = ByteLevelBPETokenizer if spec.kind == "bpe" else TokenIdTokenizer
    return kind.load(spec.path)


def _rows_from(ids, starts, count, width):
    """`(batch, width)`: row r holds `ids[r, starts[r] : starts[r] + count[r]]`
    then 0s."""
    columns = tf.range(width)
    ids = tf.pad(ids, [[0, 0], [0, width]])
    picked = tf.gather(ids, starts[:, None] + columns[None, :], batch_dims=1)
    return tf.where(columns[None, :] < count[:, None], picked, tf.zeros_like(picked))


def _largest(values, floor):
    """max(values) or `floor` for an empty batch."""
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
        self.converted = run.text.kind in CONVERTED_KINDS
        if self.converted:
            self.tokenizer = converted_tokenizer(run.text)
        else:
            self.tokenizer = make_tokenizer(run.text, character_classes)
        self.context = run.context
        self.vocabulary_size = run.vocabulary_size
        self.start_id, self.end_id = run.start_id, run.end_id
        self.generator = Generator(
            run.model,
            max_length=run.context,
            search="sample",
            start_id=run.start_id,
            end_id=run.end_id,
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
        `keep[r]` tokens (the start token if none), and their counts."""
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
        width = tf.maximum(_largest(kept, 0), 1)
        rows = _rows_from(ids.to_tensor(), lengths - kept, kept, width)
        empty = kept == 0
        first = tf.range(width)[None, :] == 0
        rows = tf.where(tf.logical_and(empty[:, None], first), self.start_id, rows)
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
        width = _largest(count, 0)
        new_ids = _rows_from(tokens, kept, count, width)
        log_probs = _rows_from(out["token_log_probs"], kept, count, width)
        # The continuation's text: the whole text minus the prompt's (WordPiece
        # joins a "##" piece or punctuation to the prompt's last word).
        prompt_ids = _rows_from(tokens, tf.zeros_like(kept), kept, self.context)
        # The end token is not text (a converted tokenizer would write it).
        tokens = tf.where(
            tf.logical_and(generated, tokens == self.end_id), PAD_ID, tokens
        )
        new_text_ids = tf.where(new_ids == self.end_id, PAD_ID, new_ids)
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
        longest = _largest(lengths, 0)
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
        archive = keras.export.ExportArchive()
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
        archive.add_endpoint("serving_default", self.generate, generate_inputs)
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
        archive.write_out(path, verbose=False)


# -- TFLite --------------------------------------------------------------------


class DeviceSignatures:
    """`prefill` and `decode` over per-layer caches in ai-edge-torch's layout.

    The model's own cache is `(batch, 2, kv_heads, length, head_dim)` per
    layer; at the signature boundary it is split into k and v and transposed
    to `(1, length, kv_heads, head_dim)`.
    """

    def __init__(self, run):
        self.run = run
        self.decoder = CachedDecoder(run.model)
        attention = self.decoder.blocks[0].self_attention
        self.layers = len(self.decoder.blocks)
        self.kv_heads = attention._kv_heads
        self.key_dim = attention.key_dim
        self.value_dim = attention._value_dim

    def cache_shapes(self):
        """{name: shape} of every cache tensor, in signature order."""
        shapes = {}
        for i in range(self.layers):
            shapes[f"kv_cache_k_{i}"] = (
                1,
                self.run.context,
                self.kv_heads,
                self.key_dim,
            )
            shapes[f"kv_cache_v_{i}"] = (
                1,
                self.run.context,
                self.kv_heads,
                self.value_dim,
            )
        return shapes

    def cache_specs(self):
        return [
            tf.TensorSpec(shape, tf.float32, name=name)
            for name, shape in self.cache_shapes().items()
        ]

    def _run(self, tokens, input_pos, caches):
        cache = tuple(
            tf.stack(
                [
                    tf.transpose(caches[2 * i], [0, 2, 1, 3]),
                    tf.transpose(caches[2 * i + 1], [0, 2, 1, 3]),
                ],
                axis=1,
            )
            for i in range(self.layers)
        )
        tokens = clamp_ids(tokens, self.run.vocabulary_size, stray_id(self.run))
        logits, cache, _ = self.decoder.step(tokens, cache, input_pos[0])
        out = {}
        for i, layer in enumerate(cache):
            out[f"kv_cache_k_{i}"] = tf.transpose(layer[:, 0], [0, 2, 1, 3])
            out[f"kv_cache_v_{i}"] = tf.transpose(layer[:, 1], [0, 2, 1, 3])
        return logits, out

    def decode(self, tokens, input_pos, *caches):
        logits, out = self._run(tokens, input_pos, caches)
        return {"logits": tf.cast(logits, tf.float32), **out}

    def prefill(self, tokens, input_pos, *caches):
        return self._run(tokens, input_pos, caches)[1]


def prefill_signature_name(length, lengths):
    return "prefill" if len(lengths) == 1 else f"prefill_{length}"


def check_prefill_lengths(prefill_lengths, context):
    lengths = tuple(prefill_lengths or (context,))
    for length in lengths:
        if (
            isinstance(length, bool)
            or not isinstance(length, int)
            or not (1 <= length <= context)
        ):
            raise ValueError(
                f"prefill_lengths must be ints in [1, {context}] (the context). "
                f"Received: prefill_lengths={list(lengths)!r}"
            )
    if len(set(lengths)) != len(lengths):
        raise ValueError(
            f"prefill_lengths must differ. Received: prefill_lengths={list(lengths)!r}"
        )
    return tuple(sorted(lengths))


def write_device_saved_model(run, path, prefill_lengths=None):
    """The SavedModel the converter reads for `model.tflite`; returns its
    signature keys."""
    lengths = check_prefill_lengths(prefill_lengths, run.context)
    signatures = DeviceSignatures(run)
    archive = keras.export.ExportArchive()
    archive.track(run.model)
    caches = signatures.cache_specs()
    archive.add_endpoint(
        "decode",
        signatures.decode,
        [
            tf.TensorSpec([1, 1], tf.int32, name="tokens"),
            tf.TensorSpec([1], tf.int32, name="input_pos"),
            *caches,
        ],
    )
    keys = ["decode"]
    for length in lengths:
        name = prefill_signature_name(length, lengths)
        archive.add_endpoint(
            name,
            signatures.prefill,
            [
                tf.TensorSpec([1, length], tf.int32, name="tokens"),
                tf.TensorSpec([length], tf.int32, name="input_pos"),
                *caches,
            ],
        )
        keys.append(name)
    archive.write_out(path, verbose=False)
    return keys


def stray_id(run):
    """What the device models read an id outside the vocabulary as: [UNK],
    or padding for a converted checkpoint (which has no [UNK]: the model's
    id 1 is the checkpoint's id 0)."""
    return PAD_ID if run.text.kind in CONVERTED_KINDS else UNK_ID


def loop_function(run):
    """`token_ids (1, context), max_new_tokens (1,) -> {"token_ids": (1,
    context)}`: greedy, the loop inside (the run's start and end ids)."""
    generator = Generator(
        run.model,
        max_length=run.context,
        search="greedy",
        start_id=run.start_id,
        end_id=run.end_id,
        pad_id=PAD_ID,
        carry_constants=True,
    )

    def generate(token_ids, max_new_tokens):
        ids = clamp_ids(token_ids, run.vocabulary_size, stray_id(run))
        # The generator needs a free column after the prompt.
        ids = ids[:, : run.context - 1]
        # An empty prompt starts from the start token, as everywhere else.
        empty = tf.reduce_all(ids == PAD_ID, axis=1, keepdims=True)
        first = tf.range(run.context - 1)[None, :] == 0
        ids = tf.where(tf.logical_and(empty, first), run.start_id, ids)
        new = tf.clip_by_value(max_new_tokens, 0, run.context - 1)
        return {"token_ids": generator.generate(ids, max_new_tokens=new)["token_ids"]}

    return generate


class CausalLMExporter:
    """The causal-LM task's exporters, as `tfformer-export` calls them."""

    name = "causal_lm"

    def add_arguments(self, parser):
        parser.add_argument(
            "--jit-compile",
            action="store_true",
            help="saved_model: XLA-compile the generation loop (the server needs XLA)",
        )
        parser.add_argument(
            "--prefill-lengths",
            help="tflite: comma-separated prompt lengths of the prefill "
            "signatures (default: the context; several give prefill_N)",
        )

    def saved_model_options(self, args):
        return {"jit_compile": args.jit_compile}

    def tflite_options(self, args):
        if not args.prefill_lengths:
            return {"prefill_lengths": None}
        try:
            lengths = [int(x) for x in args.prefill_lengths.split(",")]
        except ValueError:
            raise ValueError(
                "--prefill-lengths must be comma-separated ints. Received: "
                f"{args.prefill_lengths!r}"
            ) from None
        return {"prefill_lengths": lengths}

    def read(self, run_dir, checkpoint):
        return read_run(run_dir, checkpoint)

    def check_saved_model_options(self, **_):
        pass

    def saved_model(self, run, path, **options):
        graph = GeneratorGraph(run, **options)
        graph.write(path)
        return graph.settings

    def tflite_sources(self, run, staging, quantize=None, prefill_lengths=None):
        del quantize  # one graph for every quantization
        device = os.path.join(staging, "device")
        keys = write_device_saved_model(run, device, prefill_lengths)
        loop = os.path.join(staging, "loop")
        archive = keras.export.ExportArchive()
        archive.track(run.model)
        archive.add_endpoint(
            "serving_default",
            loop_function(run),
            [
                tf.TensorSpec([1, run.context], tf.int32, name="token_ids"),
                tf.TensorSpec([1], tf.int32, name="max_new_tokens"),
            ],
        )
        archive.write_out(loop, verbose=False)
        return [("model", device, keys), ("model_loop", loop, None)]

    def calibration(self, run, texts, prefill_lengths=None, limit=64):
        """Full-int8 samples: caches and tokens of real text for `decode`
        and each `prefill`, and prompts for the loop model."""
        texts = [t for t in texts if t.strip()][:limit]
        if not texts:
            raise ValueError(
                "representative_sentences is empty; full-int8 calibration needs "
                "real text (for example lines of the training file)."
            )
        lengths = check_prefill_lengths(prefill_lengths, run.context)
        return calibration_samples(run, texts, lengths)

    def device_files(self, run, out_dir, prefill_lengths=None):
        """The vocabulary (a converted run's tokenizer file), `text.json`,
        `tokenizer.py` and `generate.py`."""
        lengths = check_prefill_lengths(prefill_lengths, run.context)
        if run.text.kind in CONVERTED_KINDS:
            atomic_copy(run.text.path, os.path.join(out_dir, CONVERTED_TOKENIZER))
            settings = {
                "tokenizer": run.text.kind,
                "tokenizer_file": CONVERTED_TOKENIZER,
                "special_ids": {
                    "pad": PAD_ID,
                    "start": run.start_id,
                    "end": run.end_id,
                },
                "source_length": run.context,
                "context": run.context,
                "prefill_lengths": list(lengths),
            }
        else:
            settings = self.device_text_settings(run, lengths, out_dir)
        atomic_write_text(
            os.path.join(out_dir, "text.json"), json.dumps(settings, indent=1)
        )
        atomic_copy(DEVICE_TOKENIZER, os.path.join(out_dir, "tokenizer.py"))
        atomic_copy(DEVICE_GENERATOR, os.path.join(out_dir, "generate.py"))

    def device_text_settings(self, run, lengths, out_dir):
        """`text.json` of a trained run (its vocabulary copied to `out_dir`)."""
        classes = probe_character_classes() if run.text.kind == "wordpiece" else None
        vocabulary = {}
        if run.text.kind == "wordpiece":
            atomic_copy(run.text.path, os.path.join(out_dir, VOCABULARY_FILE))
            vocabulary = {
                "source_vocabulary": VOCABULARY_FILE,
                "target_vocabulary": VOCABULARY_FILE,
            }
        return device_text_settings(
            run.text.kind,
            run.text.lower_case,
            classes,
            source_length=run.context,
            context=run.context,
            prefill_lengths=list(lengths),
            **vocabulary,
        )


def calibration_samples(run, texts, lengths):
    """`(signature_key, inputs)` samples: each text's tokens prefilled into
    real caches by every prefill signature, a decode step after them, and
    the loop model's prompt."""
    if run.text.kind in CONVERTED_KINDS:
        tokenizer = converted_tokenizer(run.text)
    else:
        tokenizer = make_tokenizer(run.text)
    signatures = DeviceSignatures(run)
    names = list(signatures.cache_shapes())
    samples = []
    for text in texts:
        ids = tokenizer.tokenize(tf.constant([text]))[0].numpy().astype(np.int32)
        ids = ids[: run.context - 1]
        if len(ids) < 2:
            continue
        zeros = [np.zeros(s, np.float32) for s in signatures.cache_shapes().values()]
        for length in lengths:
            n = min(len(ids) - 1, length)
            prefill_tokens = np.zeros((1, length), np.int32)
            prefill_tokens[0, :n] = ids[:n]
            positions = np.arange(length, dtype=np.int32)
            samples.append(
                (
                    prefill_signature_name(length, lengths),
                    {
                        "tokens": prefill_tokens,
                        "input_pos": positions,
                        **dict(zip(names, zeros, strict=True)),
                    },
                )
            )
        out = signatures.prefill(
            tf.constant(prefill_tokens), tf.constant(positions), *zeros
        )
        caches = [out[name].numpy() for name in names]
        samples.append(
            (
                "decode",
                {
                    "tokens": ids[None, n : n + 1],
                    "input_pos": np.array([n], np.int32),
                    **dict(zip(names, caches, strict=True)),
                },
            )
        )
        loop_ids = np.zeros((1, run.context), np.int32)
        loop_ids[0, : len(ids)] = ids
        samples.append(
            (
                "serving_default",
                {"token_ids": loop_ids, "max_new_tokens": np.array([8], np.int32)},
            )
        )
    return samples


EXPORTER = CausalLMExporter()
