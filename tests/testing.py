"""Checks every public layer must pass, in one helper.

`run_layer_test` builds the layer, then:
1. round-trips `get_config()` through JSON and `deserialize_keras_object`;
2. calls it eagerly and symbolically (inside a functional model) and checks
   both give the same values;
3. saves that model to `.keras`, loads it, and checks identical outputs;
4. runs it under `mixed_float16` and `mixed_bfloat16` with the same weights and
   checks the compute dtype and that the values stay close to float32;
5. trains one `fit` step in a graph and checks the loss is finite and the
   weights moved (`run_model_test`, the model-level contract every layer
   sits in, does it in a graph and, with `FIT_STEP`, XLA-compiled).
"""

import json

import keras
import numpy as np
import pytest

from tests import numpy_reference as ref

MIXED_TOLERANCE = {"mixed_float16": 2e-2, "mixed_bfloat16": 8e-2}

# The model contracts' `fit` step, once in a graph (TensorFlow's default
# tier) and once XLA-compiled (the integration tier, and the JAX run, which
# runs that tier). On the 2-core machine the XLA compile is most of a
# contract: the one-layer seq2seq contract takes 11.2 s with it and 3.3 s
# without. The default tier keeps one XLA-compiled fit step, the rotary
# GPT's contract (test_gpt_decoder.py), and lowers the trainer's whole step
# to HLO for every bucket shape (test_trainer.py). On JAX, jit is XLA and a
# step outside it runs op by op (a minute for the seq2seq contract), so
# there the XLA variant is the contract.
ON_TENSORFLOW = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="a graph step is TensorFlow's; on JAX the XLA variant is the contract",
)
FIT_STEP = pytest.mark.parametrize(
    "jit_compile",
    [
        pytest.param(False, marks=ON_TENSORFLOW),
        pytest.param(True, marks=pytest.mark.integration),
    ],
    ids=["graph", "xla"],
)


def _call(layer, tensors, names, call_kwargs):
    first = tensors[names[0]]
    rest = {name: tensors[name] for name in names[1:]}
    return layer(first, **rest, **call_kwargs)


def assert_close_to_scale(actual, expected, rtol, what):
    """max |actual - expected| <= rtol * max(1, max |expected|)."""
    actual = np.asarray(actual, "float32")
    expected = np.asarray(expected, "float32")
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values"
    scale = max(1.0, float(np.abs(expected).max()))
    gap = float(np.abs(actual - expected).max())
    assert gap <= rtol * scale, (
        f"{what}: max |difference| {gap:.3g} > {rtol * scale:.3g}"
    )


def fit_one_step(model, inputs, targets, optimizer, loss, jit_compile=True):
    """One `fit` step on the whole batch, XLA-compiled unless `jit_compile`
    is False.

    Asserts a finite loss; returns the fraction of trainable weights it moved.
    """
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    assert model.jit_compile is jit_compile  # Keras did not overrule it
    # Built here, as `fit` builds it under a distribution strategy (the
    # trainer's case). Without one, Keras builds the optimizer inside the
    # step's first trace, and `tf.function` traces a step that created
    # variables a second time: twice the tracing of every contract's step.
    model.optimizer.build(model.trainable_variables)
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    history = model.fit(inputs, targets, batch_size=len(targets), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    moved = [
        not np.allclose(b, keras.ops.convert_to_numpy(w))
        for b, w in zip(before, model.trainable_weights, strict=True)
    ]
    return sum(moved) / len(moved)


def run_layer_test(
    layer_cls,
    init_kwargs,
    inputs,
    tmp_path,
    call_kwargs=None,
    fit=True,
    mixed_precision=True,
    atol=1e-5,
):
    """Runs the five checks above; returns the eager output for value tests.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        inputs: dict of call argument name -> NumPy array; the first entry is
            passed positionally, the rest as keywords. Their first axis is the
            batch.
        tmp_path: pytest's tmp_path for the `.keras` file.
        call_kwargs: non-tensor call arguments (e.g. `use_causal_mask=True`).
        fit: run the `fit` step (off for layers without weights).
        mixed_precision: run the mixed-precision check.
        atol: tolerance of the float32 comparisons.
    """
    call_kwargs = call_kwargs or {}
    names = list(inputs)
    layer = layer_cls(**init_kwargs)
    eager = keras.ops.convert_to_numpy(_call(layer, inputs, names, call_kwargs))

    # 1. Config round trip through JSON.
    serialized = json.dumps(keras.saving.serialize_keras_object(layer))
    clone = keras.saving.deserialize_keras_object(json.loads(serialized))
    assert type(clone) is layer_cls
    assert clone.get_config() == layer.get_config()

    # 2. Symbolic call: a functional model around the same layer.
    symbolic = {
        name: keras.Input(array.shape[1:], dtype=str(array.dtype), name=name)
        for name, array in inputs.items()
    }
    model = keras.Model(symbolic, _call(layer, symbolic, names, call_kwargs))
    np.testing.assert_allclose(model(inputs), eager, atol=atol, rtol=atol)

    # 3. `.keras` save and load.
    path = tmp_path / f"{layer.name}.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded(inputs), eager, atol=atol, rtol=atol)

    # 4. Mixed precision with the same weights.
    if mixed_precision:
        for policy, rtol in MIXED_TOLERANCE.items():
            mixed = layer_cls.from_config({**layer.get_config(), "dtype": policy})
            _call(mixed, inputs, names, call_kwargs)  # build
            mixed.set_weights(layer.get_weights())
            out = _call(mixed, inputs, names, call_kwargs)
            compute_dtype = policy.split("_")[1]
            assert keras.backend.standardize_dtype(out.dtype) == compute_dtype
            assert_close_to_scale(out, eager, rtol, policy)
    # 5. One training step, in a graph. Not compiled with XLA: every layer
    # is inside a model whose contract (`run_model_test`) fits with XLA (in
    # the integration tier, see `FIT_STEP`), and compiling each layer again
    # was a fifth of the layer and model tests' time.
    if fit:
        target = np.random.default_rng(0).normal(size=eager.shape).astype("float32")
        optimizer = keras.optimizers.SGD(0.1)
        moved = fit_one_step(model, inputs, target, optimizer, "mse", jit_compile=False)
        assert moved > 0, "fit changed no weight"

    return eager


def attention_weights(layer):
    """Dense matrices of a built MultiHeadAttention, in the reference's order."""
    n = keras.ops.convert_to_numpy
    if layer.fused_qkv:
        kernel = n(layer.query_key_value_dense.kernel)
        bias = n(layer.query_key_value_dense.bias)
        q_units = layer.num_heads * layer.key_dim
        k_units = layer.kv_heads * layer.key_dim
        split = [q_units, q_units + k_units]
        wq, wk, wv = np.split(kernel, split, axis=1)
        bq, bk, bv = np.split(bias, split)
    else:
        wq, bq = n(layer.query_dense.kernel), n(layer.query_dense.bias)
        wk, bk = n(layer.key_dense.kernel), n(layer.key_dense.bias)
        wv, bv = n(layer.value_dense.kernel), n(layer.value_dense.bias)
    wo, bo = n(layer.output_dense.kernel), n(layer.output_dense.bias)
    return wq, bq, wk, bk, wv, bv, wo, bo


def reference_attention(layer, x_q, x_kv, masks=None):
    """NumPy multi-head attention with `layer`'s weights, example by example.

    `masks` is `(batch, T, S)` (True = may attend) or None. Returns the
    outputs `(batch, T, out)` and weights `(batch, H, T, S)`.
    """
    outputs, weights = [], []
    for b in range(x_q.shape[0]):
        out, w = ref.multi_head_attention(
            x_q[b],
            x_kv[b],
            *attention_weights(layer),
            num_heads=layer.num_heads,
            mask=None if masks is None else masks[b],
            kv_heads=layer.kv_heads,
        )
        outputs.append(out)
        weights.append(w)
    return np.stack(outputs), np.stack(weights)


def norm_weights(norm):
    n = keras.ops.convert_to_numpy
    return n(norm.gamma), n(norm.beta), norm.epsilon


def ffn_weights(ffn):
    n = keras.ops.convert_to_numpy
    return (
        n(ffn.intermediate_dense.kernel),
        n(ffn.intermediate_dense.bias),
        n(ffn.output_dense.kernel),
        n(ffn.output_dense.bias),
    )


def run_model_test(build, inputs, labels, tmp_path, atol=1e-5, *, jit_compile):
    """The model-level contract for a builder.

    `build()` returns a fresh model of the same architecture. Checks: the
    config survives JSON (`to_json` / `model_from_json`) and gives the same
    outputs with the same weights; `.keras` save/load gives identical outputs;
    mixed_float16 and mixed_bfloat16 forward passes stay close to float32
    with float32 logits; one `fit` step (XLA-compiled if `jit_compile`, see
    `FIT_STEP`) on sparse labels gives a finite loss and moves the weights.
    Returns the model.
    """
    model = build()
    expected = keras.ops.convert_to_numpy(model(inputs))

    clone = keras.models.model_from_json(model.to_json())
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(inputs), expected, atol=atol, rtol=atol)

    path = tmp_path / f"{model.name}.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded(inputs), expected, atol=atol, rtol=atol)

    for policy, rtol in MIXED_TOLERANCE.items():
        keras.config.set_dtype_policy(policy)
        try:
            mixed = build()
        finally:
            keras.config.set_dtype_policy("float32")
        mixed.set_weights(model.get_weights())
        out = mixed(inputs)
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        assert_close_to_scale(out, expected, rtol, policy)

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    moved = fit_one_step(
        model, inputs, labels, keras.optimizers.Adam(1e-3), loss, jit_compile
    )
    assert moved >= 0.5, "fit left most weights unchanged"
    return model


def run_python(script):
    """Runs `script` in a fresh Python process (working directory /, no
    PYTHONPATH: only what is installed), asserts that it exits with 0 and
    returns its `CompletedProcess` (stdout and stderr as text)."""
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


END_OF_TEXT = "<|endoftext|>"
BPE_WORDS = [
    *"the cat sat on mat don't we'll I'm they're 2024 3.14 naïve café Straße "
    "日本語 😀 e-mail hello world !! ... ünïcödé ab aaaa".split(),
    "   ",
    "\n",
    "\t",
]


def train_byte_level_bpe(
    vocab_size=400,
    add_prefix_space=False,
    *,
    words=BPE_WORDS,
    pre_tokenizer=None,
    ignore_merges=False,
):
    """A byte-level BPE (`<|endoftext|>` its first token) trained by
    Hugging Face's tokenizers on sentences of `words`: GPT-2's pieces, or
    those of the Hugging Face `pre_tokenizer` given."""
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)]
    hf = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    hf.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(
        add_prefix_space=add_prefix_space
    )
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(corpus, trainer)
    return hf


def transformer_blocks(model):
    """Every Transformer block of a task model or backbone, encoder's first,
    from the backbone's typed handles."""
    backbone = getattr(model, "backbone", model)
    return [
        *getattr(backbone, "encoder_blocks", []),
        *getattr(backbone, "decoder_blocks", []),
    ]


def tree_digest(path):
    """{relative path: SHA-256} of every file under `path`, and "<dir>" for
    each folder: equal digests mean nothing was added, removed or changed."""
    import hashlib
    import os

    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), path)] = "<dir>"
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            found[os.path.relpath(full, path)] = digest
    return found
