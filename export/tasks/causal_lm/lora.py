"""A LoRA run's adapters kept apart from its model (`tfformer-export --lora
file`): the model's `prefill` and `decode` signatures take each attention
projection's low-rank pair as inputs named as LiteRT-LM binds them, the
model's weights are the run's before training (the adapters taken back
out of `model.keras`), and the adapters go to a LoRA file
(`tfformer.export.lora_file`) that LiteRT-LM and `generate.py` load beside
the model. With zeros in the inputs the model is the one the run started
from.

Each projection `p` (q, k, v, o) of layer i adds x a b, with `a` the
input `lora_atten_<p>_a_prime_weight_<i>` `(in, R)` and `b`
`lora_atten_<p>_b_prime_weight_<i>` `(R, out)`: the run's A scaled by
alpha / rank and its B, zero-padded to R = 16 or 32, the ranks LiteRT-LM
takes on CPU. A fused query-key-value projection's B is split into its
three parts, each with the same A. LiteRT-LM names no input for the
feed-forward layers or cross-attention: a run that adapts them is
refused. A session without the adapters loads `lora_none.tflite` (no
tensors: every input zero); LiteRT-LM 0.18 leaves the inputs unset in a
session given no LoRA file at all.

Where TensorFlow is used directly: the added products are traced into the
signatures by wrapping each projection's `call` on the instance, while
the SavedModel is written.
"""

import contextlib
import os

import numpy as np
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.models.lora import merged_into, read_adapters, unmerged
from tfformer.runs.directory import ADAPTERS

LORA_FILE = "lora.tflite"
# A LoRA file without tensors: every input zero, the model the run started
# from. LiteRT-LM 0.18 leaves the inputs unset in a session without a LoRA
# file (it then decodes noise), so that model needs this file.
NO_LORA_FILE = "lora_none.tflite"
RANKS = (16, 32)
LETTERS = {"query": "q", "key": "k", "value": "v", "output": "o"}


def input_name(letter, part, layer):
    return f"lora_atten_{letter}_{part}_prime_weight_{layer}"


def check_lora_option(lora):
    if lora not in ("merge", "file"):
        raise InputError(f"--lora must be 'merge' or 'file'. Received: {lora!r}")
    return lora


def run_adapters(run):
    """(adapters, R) of the run (`tfformer.models.lora.read_adapters`), or
    ValueError naming --lora: a run without adapters, one that adapts
    what LiteRT-LM has no input for, or a rank above 32."""
    path = os.path.join(run.directory, ADAPTERS)
    if not os.path.isfile(path):
        raise InputError(
            f"--lora file ships a LoRA run's adapters; {run.directory} has no "
            f"{ADAPTERS} (a run trained with model.lora_rank writes it)."
        )
    adapters = read_adapters(path, run.model)
    if not merged_into(run.model, adapters):
        raise InputError(
            f"--lora file: the model's adapted kernels are not {path}'s adapters "
            "merged into the weights (best.keras, whose adapters the run did not "
            "keep, or a model.keras written apart from them): export model.keras, "
            "or --lora merge."
        )
    for key in adapters:
        kind, _, part, name = key.split("/")
        if (kind, part) != ("decoder_blocks", "self_attention") or name not in (
            *LETTERS,
            "query_key_value",
        ):
            raise InputError(
                "--lora file: LiteRT-LM's LoRA inputs are attention's query, key, "
                f"value and output projections; this run also adapts {key}. "
                "Export with --lora merge."
            )
    rank = max(a.shape[1] for a, _, _ in adapters.values())
    fits = [r for r in RANKS if r >= rank]
    if not fits:
        raise InputError(
            f"--lora file: LiteRT-LM takes LoRA ranks {list(RANKS)} on CPU; this "
            f"run's is {rank}. Export with --lora merge."
        )
    return adapters, fits[0]


def _projection_units(attention):
    """{letter: (in, out)} of `attention`'s four projections."""
    q = attention.num_heads * attention.key_dim
    k = attention.kv_heads * attention.key_dim
    v = attention.kv_heads * attention.value_head_dim
    first = (
        attention.query_key_value_dense
        if attention.fused_qkv
        else attention.query_dense
    )
    width = int(first.kernel.shape[0])
    inner, out = (int(d) for d in attention.output_dense.kernel.shape)
    return {"q": (width, q), "k": (width, k), "v": (width, v), "o": (inner, out)}


def input_shapes(blocks, rank):
    """{input name: shape} of every LoRA input, in signature order."""
    shapes = {}
    for i, block in enumerate(blocks):
        for letter, (n_in, n_out) in _projection_units(block.self_attention).items():
            shapes[input_name(letter, "a", i)] = (n_in, rank)
            shapes[input_name(letter, "b", i)] = (rank, n_out)
    return shapes


@contextlib.contextmanager
def adding(blocks, tensors):
    """Inside: each attention projection of `blocks` returns its own
    output plus x a b of its pair in `tensors` ({input name: tensor};
    empty: nothing changes)."""
    if not tensors:
        yield
        return
    wrapped = []

    def wrap(dense, pairs):
        own = dense.call

        def call(inputs, *args, **kwargs):
            # (A mixed-precision run's layers compute in their own dtype.)
            added = [
                tf.matmul(
                    tf.matmul(inputs, tf.cast(a, inputs.dtype)),
                    tf.cast(b, inputs.dtype),
                )
                for a, b in pairs
            ]
            extra = added[0] if len(added) == 1 else tf.concat(added, axis=-1)
            return own(inputs, *args, **kwargs) + extra

        # Not a Keras attribute (no tracking): removed again below.
        object.__setattr__(dense, "call", call)
        wrapped.append(dense)

    def pair(letter, i):
        return tensors[input_name(letter, "a", i)], tensors[input_name(letter, "b", i)]

    try:
        for i, block in enumerate(blocks):
            attention = block.self_attention
            if attention.fused_qkv:
                wrap(attention.query_key_value_dense, [pair(x, i) for x in "qkv"])
            else:
                for name in ("query", "key", "value"):
                    wrap(getattr(attention, f"{name}_dense"), [pair(LETTERS[name], i)])
            wrap(attention.output_dense, [pair("o", i)])
        yield
    finally:
        for dense in wrapped:
            object.__delattr__(dense, "call")


def file_weights(blocks, adapters, rank):
    """{input name: array} of the LoRA file: each adapted projection's
    scaled A and B, zero-padded to `rank`."""
    weights = {}
    for key, (a, b, scale) in adapters.items():
        _, layer, _, name = key.split("/")
        i = int(layer)
        r = a.shape[1]
        a_padded = np.zeros((a.shape[0], rank), np.float32)
        a_padded[:, :r] = scale * a
        units = _projection_units(blocks[i].self_attention)
        letters = "qkv" if name == "query_key_value" else LETTERS[name]
        start = 0
        for letter in letters:
            width = units[letter][1]
            b_padded = np.zeros((rank, width), np.float32)
            b_padded[:r] = b[:, start : start + width]
            start += width
            weights[input_name(letter, "a", i)] = a_padded
            weights[input_name(letter, "b", i)] = b_padded
    return weights


def base_weights(run, adapters):
    """`with base_weights(run, adapters):` the run's model reads its
    weights before training (`unmerged`); a run without adapters
    (None) as it is."""
    if adapters is None:
        return contextlib.nullcontext()
    return unmerged(run.model, adapters)


def remove_stale_files(out_dir):
    """Removes the LoRA files of an earlier `--lora file` export from
    `out_dir` (and their digests): they do not fit a merged model."""
    from tfformer.export import runtimes

    names = [
        n for n in (LORA_FILE, NO_LORA_FILE) if os.path.isfile(os.path.join(out_dir, n))
    ]
    runtimes.forget_digests(out_dir, names)
    for name in names:
        os.remove(os.path.join(out_dir, name))
