"""The causal LM's LiteRT models, in the shape LiteRT-LM runs:
`prefill`/`decode` signatures over per-layer caches
(`model.tflite`), the greedy loop model (`model_loop.tflite`), and the
full-int8 calibration samples of both."""

import numpy as np
import tensorflow as tf

from tfformer.decoding import Generator
from tfformer.errors import InputError
from tfformer.export.archive import SignatureArchive
from tfformer.export.tasks.causal_lm import lora as lora_inputs
from tfformer.export.tasks.causal_lm.run import core_tokenizer, stray_id
from tfformer.export.tasks.text import clamp_ids
from tfformer.models.cached_decoder import CachedDecoder
from tfformer.preprocessing.text import PAD_ID


class DeviceSignatures:
    """`prefill` and `decode` over per-layer caches, as LiteRT-LM runs them.

    The model's own cache is `(batch, 2, kv_heads, length, head_dim)` per
    layer; at the signature boundary it is split into k and v, each `(1,
    kv_heads, length, head_dim)`. That is the layout LiteRT-LM reads: a
    model without a mask input has its cache length read from dimension 2
    of `kv_cache_k_0` (ai-edge-torch's `(1, length, kv_heads, head_dim)`
    made it read the number of heads as the length).

    With `lora_rank` R, `prefill` and `decode` also take the LoRA inputs
    of `tfformer.export.tasks.causal_lm.lora` after the caches.
    """

    def __init__(self, run, lora_rank=None):
        self.run = run
        self.decoder = CachedDecoder(run.model)
        attention = self.decoder.blocks[0].self_attention
        self.layers = len(self.decoder.blocks)
        self.kv_heads = attention.kv_heads
        self.key_dim = attention.key_dim
        self.value_dim = attention.value_head_dim
        self.lora_shapes = {}
        if lora_rank is not None:
            self.lora_shapes = lora_inputs.input_shapes(self.decoder.blocks, lora_rank)

    def lora_specs(self):
        return [
            tf.TensorSpec(shape, tf.float32, name=name)
            for name, shape in self.lora_shapes.items()
        ]

    def cache_shapes(self, batch=1):
        """{name: shape} of every cache tensor, in signature order."""
        shapes = {}
        for i in range(self.layers):
            shapes[f"kv_cache_k_{i}"] = (
                batch,
                self.kv_heads,
                self.run.context,
                self.key_dim,
            )
            shapes[f"kv_cache_v_{i}"] = (
                batch,
                self.kv_heads,
                self.run.context,
                self.value_dim,
            )
        return shapes

    def cache_specs(self, batch=1):
        return [
            tf.TensorSpec(shape, tf.float32, name=name)
            for name, shape in self.cache_shapes(batch).items()
        ]

    def _run(self, tokens, input_pos, tensors, positions=None):
        caches = tensors[: 2 * self.layers]
        low_rank = dict(zip(self.lora_shapes, tensors[2 * self.layers :], strict=True))
        with lora_inputs.adding(self.decoder.blocks, low_rank):
            return self._step(tokens, input_pos, caches, positions)

    def _step(self, tokens, input_pos, caches, positions):
        cache = tuple(
            tf.stack([caches[2 * i], caches[2 * i + 1]], axis=1)
            for i in range(self.layers)
        )
        tokens = clamp_ids(tokens, self.run.vocabulary_size, stray_id(self.run))
        index = input_pos[0] if positions is None else positions
        logits, cache, _ = self.decoder.step(tokens, cache, index)
        out = {}
        for i, layer in enumerate(cache):
            out[f"kv_cache_k_{i}"] = layer[:, 0]
            out[f"kv_cache_v_{i}"] = layer[:, 1]
        return logits, out

    def decode(self, tokens, input_pos, *tensors):
        logits, out = self._run(tokens, input_pos, tensors)
        return {"logits": tf.cast(logits, tf.float32), **out}

    def prefill(self, tokens, input_pos, *tensors):
        return self._run(tokens, input_pos, tensors)[1]

    def decode_batch(self, tokens, input_pos, *caches):
        """`decode` of B sequences at once, each at its own position:
        `tokens` `(B, 1)`, `input_pos` `(B,)`, caches `(B, ...)`. A position
        outside the context is clipped into it (the runtime refuses it
        first)."""
        positions = tf.clip_by_value(input_pos, 0, self.run.context - 1)
        logits, out = self._run(tokens, input_pos, caches, positions)
        return {"logits": tf.cast(logits, tf.float32), **out}


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
            raise InputError(
                f"prefill_lengths must be ints in [1, {context}] (the context). "
                f"Received: prefill_lengths={list(lengths)!r}"
            )
    if len(set(lengths)) != len(lengths):
        raise InputError(
            f"prefill_lengths must differ. Received: prefill_lengths={list(lengths)!r}"
        )
    return tuple(sorted(lengths))


def check_decode_batch(decode_batch):
    """`decode_batch` (None, or an int in [2, 256]), or ValueError naming it."""
    if decode_batch is None:
        return None
    if isinstance(decode_batch, bool) or not isinstance(decode_batch, int):
        raise InputError(f"--decode-batch must be an int. Received: {decode_batch!r}")
    if not 2 <= decode_batch <= 256:
        raise InputError(
            f"--decode-batch must be in [2, 256] (sequences stepped together). "
            f"Received: {decode_batch}"
        )
    return decode_batch


def write_device_saved_model(
    run, path, prefill_lengths=None, decode_batch=None, lora="merge"
):
    """The SavedModel the converter reads for `model.tflite`; returns its
    signature keys. `decode_batch` B adds `decode_batch`: `tokens` `(B, 1)`,
    `input_pos` `(B,)` (one position per sequence) and caches `(B, ...)`.
    `lora="file"`: a LoRA run's model before training, with LoRA inputs
    (`tfformer.export.tasks.causal_lm.lora`)."""
    lengths = check_prefill_lengths(prefill_lengths, run.context)
    batch = check_decode_batch(decode_batch)
    adapters, rank = None, None
    if lora_inputs.check_lora_option(lora) == "file":
        adapters, rank = lora_inputs.run_adapters(run)
    with lora_inputs.base_weights(run, adapters):
        return _write_device_saved_model(run, path, lengths, batch, rank)


def _write_device_saved_model(run, path, lengths, batch, lora_rank):
    signatures = DeviceSignatures(run, lora_rank)
    archive = SignatureArchive()
    archive.track(run.model)
    caches = [*signatures.cache_specs(), *signatures.lora_specs()]
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
    if batch is not None:
        archive.add_endpoint(
            "decode_batch",
            signatures.decode_batch,
            [
                tf.TensorSpec([batch, 1], tf.int32, name="tokens"),
                tf.TensorSpec([batch], tf.int32, name="input_pos"),
                *signatures.cache_specs(batch),
            ],
        )
        keys.append("decode_batch")
    archive.write_out(path)
    return keys


def loop_function(run):
    """`token_ids (1, context), max_new_tokens (1,) -> {"token_ids": (1,
    context)}`: greedy, the loop inside (the run's start and end ids)."""
    generator = Generator(
        run.model,
        max_length=run.context,
        search="greedy",
        start_id=run.start_id,
        end_id=run.ends,
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


def write_loop_saved_model(run, path):
    """The SavedModel the converter reads for `model_loop.tflite`."""
    archive = SignatureArchive()
    archive.track(run.model)
    archive.add_endpoint(
        "serving_default",
        loop_function(run),
        [
            tf.TensorSpec([1, run.context], tf.int32, name="token_ids"),
            tf.TensorSpec([1], tf.int32, name="max_new_tokens"),
        ],
    )
    archive.write_out(path)


def calibration_samples(run, texts, lengths, decode_batch=None):
    """`(signature_key, inputs)` samples: each text's tokens prefilled into
    real caches by every prefill signature, a decode step after them (and
    `decode_batch` B copies of it), and the loop model's prompt."""
    tokenizer = core_tokenizer(run)
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
        if decode_batch:
            step = samples[-1][1]
            samples.append(
                (
                    "decode_batch",
                    {k: np.repeat(v, decode_batch, axis=0) for k, v in step.items()},
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
