"""Export of a causal-LM run: the SavedModel's `generate` and `score` against
the Keras generator and a NumPy scorer, its guarantees (core ops, TensorFlow
alone, errors naming the setting, fuzzing); the TFLite `prefill`/`decode`
model against the Keras forward pass, its reference runtime against the
Keras generator (greedy and seeded sampling), the loop model, the quantized
variants."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import BATCH, fuzz_settings
from tests.testing import run_python
from tfformer.decoding import Generator
from tfformer.export.flatbuffer import constant_buffers, ops, read_model
from tfformer.export.saved_model import export_saved_model
from tfformer.export.tasks.causal_lm import EXPORTER
from tfformer.export.tflite import export_tflite

from ..training.tiny import GPT_CONTEXT, GPT_LINE
from .shipped import assert_one_line_error, copy_export, run_shipped

CONTEXT, LINE = GPT_CONTEXT, GPT_LINE  # the shared tiny_gpt_run's
START, END = 2, 3


@pytest.fixture(scope="module")
def run_dir(tiny_gpt_run):
    return tiny_gpt_run


@pytest.fixture(scope="module")
def run(run_dir):
    return EXPORTER.read(run_dir)


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt_serving")
    return export_saved_model(run_dir, str(out), progress=lambda *_: None)


@pytest.fixture(scope="module")
def served(exported):
    return tf.saved_model.load(exported)


@pytest.fixture(scope="module")
def device(run_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gpt_device"))
    path = export_tflite(run_dir, out, progress=lambda *_: None)
    sys.path.insert(0, out)
    try:
        import generate  # the shipped generate.py

        runtime = generate.LiteRTGenerator(path)
    finally:
        sys.path.remove(out)
    return out, path, runtime


def byte_ids(text):
    return [b + 4 for b in text.encode("utf-8")]


def call_generate(served, prompts, new, temperature=1.0, top_k=1, top_p=1.0, seed=0):
    n = len(prompts)
    full = lambda v, dtype: tf.constant(  # noqa: E731
        v if isinstance(v, list) else [v] * n, dtype
    )
    out = served.signatures["generate"](
        prompt=tf.constant(prompts, tf.string),
        max_new_tokens=full(new, tf.int32),
        temperature=full(temperature, tf.float32),
        top_k=full(top_k, tf.int32),
        top_p=full(top_p, tf.float32),
        seed=full(seed, tf.int32),
    )
    return {k: v.numpy() for k, v in out.items()}


GENERATORS = {}


def keras_generate(run, ids, new, **settings):
    """(generated ids, their log-probs) of the Keras generator for one prompt.
    One generator per model and settings, its search traced once into a graph
    (eagerly, each position's forward pass ran op by op: seconds a prompt)."""
    search = "sample" if settings else "greedy"
    key = (id(run.model), search, tuple(sorted(settings.items())))
    if key not in GENERATORS:
        generator = Generator(run.model, max_length=CONTEXT, search=search, **settings)
        GENERATORS[key] = tf.function(
            lambda ids, new: generator.generate(ids, max_new_tokens=new),
            autograph=False,
        )
    # Padded to one width (short of the context, which must exceed it), so
    # that every prompt runs the one traced graph.
    padded = np.zeros((1, CONTEXT - 1), np.int32)
    padded[0, : len(ids)] = ids
    out = GENERATORS[key](tf.constant(padded), tf.constant([new], tf.int32))
    tokens = np.asarray(out["token_ids"])[0]
    log_probs = np.asarray(out["token_log_probs"])[0]
    n = len(ids)
    end = n + int(np.sum(tokens[n:] != 0))
    return tokens[n:end].tolist(), log_probs[n:end]


# -- SavedModel ----------------------------------------------------------------


def test_signatures_and_layout(served, exported):
    assert set(served.signatures) == {
        "serving_default",
        "generate",
        "score",
        "logits",
        "tokenize",
        "detokenize",
    }
    inputs = served.signatures["generate"].structured_input_signature[1]
    assert sorted(inputs) == sorted(
        ["prompt", "max_new_tokens", "temperature", "top_k", "top_p", "seed"]
    )
    with open(os.path.join(exported, "assets.extra", "export.json")) as f:
        assert json.load(f)["task"] == "causal_lm"


def test_greedy_generation_equals_keras_on_a_ragged_batch(served, run):
    prompts = ["to be or", "", "that is the question.\nto be or not to", "x"]
    new = [10, 5, 3, 0]
    out = call_generate(served, prompts, new, top_k=1)
    assert out["num_tokens"].tolist() == [10, 5, 3, 0]
    # Row 2 (37 bytes) keeps its last 32 - 3; the empty prompt is [START].
    assert out["prompt_tokens"].tolist() == [8, 1, 29, 1]
    for row, (prompt, n) in enumerate(zip(prompts, new, strict=True)):
        ids = byte_ids(prompt)[-min(CONTEXT - n, CONTEXT - 1) :] or [START]
        expected, log_probs = keras_generate(run, ids, n)
        got = out["token_ids"][row][: out["num_tokens"][row]].tolist()
        assert got == expected
        np.testing.assert_allclose(
            out["log_probs"][row][: len(got)], log_probs, rtol=1e-5, atol=1e-5
        )
        text = bytes(t - 4 for t in got if t >= 4).decode("utf-8", "replace")
        assert out["text"][row].decode("utf-8") == text
    # Padding after each row's tokens.
    assert not out["token_ids"][1][5:].any() and not out["log_probs"][1][5:].any()


def test_seeded_sampling_equals_keras(served, run):
    prompts = ["to be", "or not", "to be"]
    settings = dict(
        temperature=[1.5, 0.8, 1.5], top_k=[0, 20, 0], top_p=[0.9, 1.0, 0.9]
    )
    out = call_generate(served, prompts, 12, seed=[7, 8, 9], **settings)
    for row, prompt in enumerate(prompts):
        expected, _ = keras_generate(
            run,
            byte_ids(prompt),
            12,
            temperature=settings["temperature"][row],
            top_k=settings["top_k"][row] or None,
            top_p=settings["top_p"][row],
            seed=[7, 8, 9][row],
        )
        got = out["token_ids"][row][: out["num_tokens"][row]].tolist()
        assert got == expected
    # Rows 0 and 2: the same prompt and settings, other seeds, other samples.
    assert out["token_ids"][0].tolist() != out["token_ids"][2].tolist()
    again = call_generate(served, prompts, 12, seed=[7, 8, 9], **settings)
    np.testing.assert_array_equal(again["token_ids"], out["token_ids"])


def test_long_prompts_are_cut_from_the_left(served, run):
    prompt = "that is the question. " * 5  # 110 bytes
    out = call_generate(served, [prompt], 6)
    assert out["prompt_tokens"].tolist() == [CONTEXT - 6]
    kept = byte_ids(prompt)[-(CONTEXT - 6) :]
    expected, _ = keras_generate(run, kept, 6)
    assert out["token_ids"][0][: out["num_tokens"][0]].tolist() == expected


def test_an_empty_batch_gives_empty_outputs(served):
    out = call_generate(served, [], [])
    assert out["text"].shape == (0,) and out["token_ids"].shape == (0, 0)
    assert served.signatures["score"](text=tf.constant([], tf.string))[
        "log_likelihood"
    ].shape == (0,)


@pytest.mark.parametrize(
    "setting, message",
    [
        (dict(new=-1), r"max_new_tokens must be in \[0, 31\]"),
        (dict(new=32), r"max_new_tokens must be in \[0, 31\]"),
        (dict(temperature=0.0), "temperature must be positive and finite"),
        (dict(temperature=float("nan")), "temperature must be positive and finite"),
        (dict(top_k=-1), "top_k must be >= 0"),
        (dict(top_p=0.0), r"top_p must be in \(0, 1\]"),
        (dict(top_p=1.5), r"top_p must be in \(0, 1\]"),
        (dict(seed=[1, 2]), "seed must have one value per prompt"),
    ],
)
def test_bad_settings_fail_the_call_naming_them(served, setting, message):
    new = setting.pop("new", 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call_generate(served, ["to be"], new, **setting)


def numpy_score(run, ids):
    """Sum of log P of every token after the first, in windows of CONTEXT as
    training cuts the stream, with softmax in NumPy (float64)."""
    total = 0.0
    for start in range(0, len(ids) - 1, CONTEXT):
        window = ids[start : start + CONTEXT + 1]
        logits = np.asarray(
            run.model({"token_ids": np.array([window[:-1]], np.int32)}), np.float64
        )[0]
        top = logits.max(-1, keepdims=True)
        log_p = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        total += sum(log_p[t, window[t + 1]] for t in range(len(window) - 1))
    return total


def test_score_equals_a_numpy_scorer_and_the_evaluation(served, run):
    texts = [LINE * 2, "to", "t", LINE[:33]]  # 86 tokens: 3 windows
    out = served.signatures["score"](text=tf.constant(texts))
    for row, text in enumerate(texts):
        ids = byte_ids(text)
        assert out["num_tokens"].numpy()[row] == len(ids) - 1
        np.testing.assert_allclose(
            out["log_likelihood"].numpy()[row],
            numpy_score(run, ids),
            rtol=1e-5,
            atol=1e-4,
        )
    # The evaluation's nats per token of the same stream (65 tokens: two
    # whole windows) equal the signature's.
    from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
    from tfformer.training.evaluation.language_model import score_text

    text = (LINE * 2)[:65]
    evaluated = score_text(
        run.model, ByteTokenizer(), text, CONTEXT, progress=lambda *_: None
    )
    scored = served.signatures["score"](text=tf.constant([text]))
    nats = -scored["log_likelihood"].numpy()[0] / scored["num_tokens"].numpy()[0]
    assert evaluated["tokens"] == 64
    assert abs(nats - evaluated["nats_per_token"]) < 1e-4


def test_logits_signature_equals_keras(served, run):
    ids = np.array([byte_ids(LINE[:20])], np.int32)
    got = served.signatures["logits"](token_ids=tf.constant(ids))["logits"].numpy()
    np.testing.assert_allclose(
        got, np.asarray(run.model({"token_ids": ids})), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="at most 32 columns"):
        served.signatures["logits"](token_ids=tf.zeros([1, 33], tf.int32))


def test_invalid_utf8_prompts_become_replacement_characters(served):
    bad = call_generate(served, [b"to \xff\xfe be"], 3)
    good = call_generate(served, ["to \ufffd\ufffd be"], 3)
    np.testing.assert_array_equal(bad["token_ids"], good["token_ids"])
    assert bad["prompt_tokens"].tolist() == [len(byte_ids("to \ufffd\ufffd be"))]


@pytest.mark.integration
def test_loads_in_a_process_that_imports_only_tensorflow(exported):
    script = f"""
import sys
import tensorflow as tf
model = tf.saved_model.load({exported!r})
n = tf.constant([4, 4])
out = model.signatures["generate"](prompt=tf.constant(["to be", ""]), max_new_tokens=n,
    temperature=tf.constant([1.0, 1.0]), top_k=tf.constant([1, 5]),
    top_p=tf.constant([1.0, 0.9]), seed=tf.constant([1, 2]))
assert out["text"].shape == (2,), out
scored = model.signatures["score"](text=tf.constant(["to be"]))
assert scored["num_tokens"].numpy()[0] == 4
leaked = [m for m in ("tfformer", "training", "export", "keras", "tensorflow_text")
          if m in sys.modules]
print("LEAKED", leaked)
"""
    done = run_python(script)
    assert "LEAKED ['keras']" in done.stdout or "LEAKED []" in done.stdout, done.stdout


# Raw bytes of any kind: empty, not UTF-8, long (cut to the context).
prompts = st.one_of(
    st.binary(max_size=80),
    st.text(max_size=60).map(lambda s: s.encode("utf-8", "surrogatepass")),
    # Far past the context (the left cut); the 16 KiB cut has its own test.
    st.integers(1, 400).map(lambda n: b"to be " * n),
)


@pytest.mark.integration
def test_inputs_are_cut_at_16_kib(served, run):
    long = b"to be " * 3000  # 18,000 bytes
    scored = served.signatures["score"](text=tf.constant([long]))
    assert scored["num_tokens"].numpy().tolist() == [16384 - 1]
    out = call_generate(served, [long], 4)
    assert out["prompt_tokens"].tolist() == [CONTEXT - 4]
    expected, _ = keras_generate(run, byte_ids(long.decode())[-(CONTEXT - 4) :], 4)
    assert out["token_ids"][0].tolist() == expected


@pytest.fixture(scope="module")
def text_tokenizer(run_dir):
    import tfformer

    return tfformer.load(run_dir).tokenizers["text"]


def check_tokenizes(served, tokenizer, batch):
    """The served `tokenize` gives each row the run's tokenizer's ids of the
    text with invalid UTF-8 replaced, and their count."""
    out = served.signatures["tokenize"](text=tf.constant(batch, tf.string))
    ids, counts = out["token_ids"].numpy(), out["num_tokens"].numpy()
    assert counts.shape == (len(batch),)
    for row, count, raw in zip(ids, counts, batch, strict=True):
        expected = tokenizer.tokenize([raw.decode("utf-8", "replace")])[0].numpy()
        assert count == len(expected), raw
        assert row[:count].tolist() == expected.tolist(), raw
        assert not row[count:].any(), raw


def test_an_empty_batch_generates_scores_and_tokenizes_nothing(served, text_tokenizer):
    assert call_generate(served, [], 3)["text"].shape == (0,)
    assert served.signatures["score"](text=tf.constant([], tf.string))[
        "log_likelihood"
    ].shape == (0,)
    check_tokenizes(served, text_tokenizer, [])


@pytest.mark.integration
@fuzz_settings(1000)
@given(
    st.lists(prompts, **BATCH),
    # Mostly short continuations (the loop's length is not what is fuzzed).
    st.sampled_from([0, 1, 2, 3, 5, 8, 13, CONTEXT - 1]),
    st.integers(-(2**31), 2**31 - 1),
)
def test_no_prompt_makes_generate_or_score_fail(
    served, text_tokenizer, batch, new, seed
):
    out = call_generate(served, batch, new, top_k=0, top_p=0.95, seed=seed)
    assert out["text"].shape == (len(batch),)
    for row in range(len(batch)):
        out["text"][row].decode("utf-8")  # valid UTF-8, always
        assert out["num_tokens"][row] <= new
        assert 1 <= out["prompt_tokens"][row] <= min(CONTEXT - new, CONTEXT - 1)
        assert np.all(out["log_probs"][row] <= 0)
    scored = served.signatures["score"](text=tf.constant(batch, tf.string))
    assert np.all(np.isfinite(scored["log_likelihood"].numpy()))
    check_tokenizes(served, text_tokenizer, batch)


# -- TFLite --------------------------------------------------------------------


def test_device_files_and_signatures(device, run):
    out, path, runtime = device
    assert sorted(os.listdir(out)) == [
        "SHA256SUMS",
        "generate.py",
        "model.tflite",
        "model_file.py",
        "model_loop.tflite",
        "text.json",
        "tokenizer.py",
    ]
    signatures = runtime.interpreter.get_signature_list()
    caches = [f"kv_cache_{kv}_{i}" for i in range(2) for kv in "kv"]
    assert sorted(signatures["decode"]["inputs"]) == sorted(
        ["tokens", "input_pos", *caches]
    )
    assert sorted(signatures["decode"]["outputs"]) == sorted(["logits", *caches])
    assert sorted(signatures["prefill"]["outputs"]) == sorted(caches)
    # Caches (1, kv_heads, context, head_dim): LiteRT-LM reads the cache
    # length from dimension 2.
    assert runtime.cache_shapes["kv_cache_k_0"] == (1, 2, CONTEXT, 16)
    with open(path, "rb") as f:
        model = read_model(f.read())
    names = {op.name for op in ops(model)}
    assert "WHILE" not in names  # the app owns the loop (GPU delegate)
    # One copy of the weights for both signatures (a second copy of the
    # embedding alone would add 33 KB). The converter folds each block's
    # layer-norm scale and offset into the matrix products that read the
    # norm (gamma into their kernels, beta into their biases), so those
    # vectors are not stored on their own.
    weights = run.model.count_params() * 4
    folded = sum(
        int(np.prod(w.shape)) * 4
        for w in run.model.weights
        if w.path.startswith("decoder_block_") and "_norm/" in w.path
    )
    stored = sum(size for _, size in constant_buffers(model, "FLOAT32").values())
    assert weights - folded <= stored < weights + 1024


def keras_logits(run, ids):
    return np.asarray(run.model({"token_ids": np.array([ids], np.int32)}))[0]


def test_prefill_and_decode_logits_equal_the_keras_forward_pass(device, run):
    _, _, runtime = device
    ids = byte_ids(LINE[:CONTEXT])
    expected = keras_logits(run, ids)
    for prefilled in (0, 1, 13, CONTEXT - 1):
        cache = runtime.prefill(ids[:prefilled], runtime.new_cache())
        for position in range(prefilled, CONTEXT):
            logits, cache = runtime.decode(ids[position], position, cache)
            np.testing.assert_allclose(logits, expected[position], atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "settings",
    [
        # Greedy: the device's greedy path also runs in LiteRT-LM's and the
        # TFLite tests; here in the integration tier.
        pytest.param(dict(greedy=True), id="greedy", marks=pytest.mark.integration),
        # Sampling without filters is the filtered case's draw with top-k
        # and top-p off: slow.
        pytest.param(
            dict(temperature=1.5, top_k=0, top_p=1.0, seed=3),
            id="sample",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            dict(temperature=0.9, top_k=12, top_p=0.85, seed=41),
            id="sample-filtered",
        ),
    ],
)
def test_the_reference_runtime_generates_what_keras_generates(device, run, settings):
    _, _, runtime = device
    for prompt in ("to be or", "", "that is the question.\nto be or not to"):
        ids = byte_ids(prompt)
        got, got_log_probs = runtime.generate(ids, 20, **settings)
        keras_settings = {} if settings.get("greedy") else dict(settings)
        if keras_settings:
            keras_settings["top_k"] = keras_settings["top_k"] or None
        expected, log_probs = keras_generate(
            run, ids[-(CONTEXT - 20) :] or [START], 20, **keras_settings
        )
        assert got == expected
        np.testing.assert_allclose(got_log_probs, log_probs, atol=1e-4)


def test_the_loop_model_generates_greedily(device, run):
    from ai_edge_litert.interpreter import Interpreter

    out, _, _ = device
    runner = Interpreter(
        model_path=os.path.join(out, "model_loop.tflite")
    ).get_signature_runner()
    ids = byte_ids("to be or")
    tokens = np.zeros((1, CONTEXT), np.int32)
    tokens[0, : len(ids)] = ids
    got = runner(token_ids=tokens, max_new_tokens=np.array([15], np.int32))[
        "token_ids"
    ][0]
    expected, _ = keras_generate(run, ids, 15)
    assert got[: len(ids)].tolist() == ids
    assert got[len(ids) :][: len(expected)].tolist() == expected
    assert not got[len(ids) + len(expected) :].any()


def test_a_wrong_cache_is_refused_naming_the_tensor(device):
    _, _, runtime = device
    cache = runtime.new_cache()
    cache["kv_cache_v_1"] = np.zeros((1, 2, CONTEXT, 8), np.float32)
    with pytest.raises(ValueError, match=r"kv_cache_v_1.*\(1, 2, 32, 16\)"):
        runtime.decode(5, 0, cache)
    del cache["kv_cache_v_1"]
    with pytest.raises(ValueError, match="lacks 'kv_cache_v_1'"):
        runtime.prefill([5, 6], cache)
    with pytest.raises(ValueError, match=r"max_new_tokens must be in \[0, 31\]"):
        runtime.generate([5], 32)
    with pytest.raises(ValueError, match="temperature must be positive"):
        runtime.generate([5], 3, temperature=0.0)


def test_the_reference_runtime_writes_text(device):
    out, path, _ = device
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(out, "generate.py"),
            path,
            "to be",
            "--greedy",
            "--max-new-tokens",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("to be")
    bad = subprocess.run(
        [sys.executable, os.path.join(out, "generate.py"), path, "x", "--top-p", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "top_p must be in (0, 1]" in bad.stderr


@pytest.mark.integration
def test_quantized_variants_convert_and_agree(run_dir, run, tmp_path):
    """float16 keeps the logits within 1e-2 and greedy tokens equal; dynamic
    int8 within 0.15 (measured: up to 0.11 on an AVX-512 VNNI CPU, whose
    int8 kernels round otherwise than AVX2's; full int8 is converted and run in
    `test_chunked_prefill_and_full_int8_with_several_prefill_lengths`)."""
    lines = [LINE.strip()] * 20
    ids = byte_ids(LINE[:CONTEXT])
    expected = keras_logits(run, ids)
    tolerance = {"float16": 1e-2, "int8": 0.15}
    for quantize, atol in tolerance.items():
        out = str(tmp_path / quantize)
        path = export_tflite(
            run_dir,
            out,
            quantize=quantize,
            representative_sentences=lines,
            progress=lambda *_: None,
        )
        assert os.path.basename(path) == f"model_{quantize}.tflite"
        assert os.path.isfile(os.path.join(out, f"model_loop_{quantize}.tflite"))
        sys.path.insert(0, out)
        try:
            import generate

            runtime = generate.LiteRTGenerator(path)
        finally:
            sys.path.remove(out)
        cache = runtime.new_cache()
        for position, token in enumerate(ids):
            logits, cache = runtime.decode(token, position, cache)
            assert np.all(np.isfinite(logits))
            np.testing.assert_allclose(logits, expected[position], atol=atol)
        if quantize == "float16":
            got, _ = runtime.generate(byte_ids("to be"), 10, greedy=True)
            assert got == keras_generate(run, byte_ids("to be"), 10)[0]


@pytest.mark.parametrize("greedy", [True, False])
def test_the_numpy_runtime_gives_a_nan_row_the_lowest_id_that_is_not_padding(greedy):
    """As the Keras generator: a row of logits with a NaN, or with +inf
    (log-softmax makes it NaN), becomes id 1, never padding or a crash."""
    from tfformer.export.runtimes import generate as device

    for bad in (np.nan, np.inf):
        logits = np.linspace(-3.0, 2.0, 40).astype(np.float32)
        logits[7] = bad
        token, log_p = device.choose(
            logits, 5, greedy=greedy, temperature=0.8, top_k=5, top_p=0.9, seed=1
        )
        assert token == 1 and np.isnan(log_p)
    all_nan = np.full(40, np.nan, np.float32)
    assert (
        device.choose(
            all_nan, 5, greedy=greedy, temperature=1.0, top_k=0, top_p=1.0, seed=1
        )[0]
        == 1
    )


@pytest.mark.parametrize("jit_compile", [False, True], ids=["sorted", "xla"])
def test_the_numpy_sampling_rules_equal_the_keras_ones(jit_compile):
    """The runtime's filter and inverse-transform draw against
    `filter_logits_per_row` and `sample_inverse_cdf`, on random rows with
    ties and on top-p boundaries: eagerly the Keras filter sorts, under XLA
    it bisects."""
    from keras import ops

    from tfformer.decoding.sampling import (
        filter_logits_per_row,
        sample_inverse_cdf,
        uniform_stream,
    )
    from tfformer.export.runtimes import generate as device

    rng = np.random.default_rng(3)
    rows = []
    for _ in range(300):
        logits = rng.normal(size=40).astype(np.float32) * rng.choice([0.5, 3.0])
        if rng.random() < 0.3:  # ties with the top tokens
            logits[rng.integers(40, size=5)] = logits.max()
        rows.append(
            (
                logits,
                float(rng.choice([0.3, 1.0, 1.7])),
                int(rng.choice([0, 1, 5, 40])),
                float(rng.choice([1.0, 0.5, 0.9])),
                int(rng.integers(-(2**31), 2**31)),
                int(rng.integers(0, 500)),
            )
        )
    logits = np.stack([r[0] for r in rows])
    keras_filtered = ops.convert_to_numpy(
        tf.function(filter_logits_per_row, jit_compile=jit_compile)(
            logits,
            temperature=np.array([r[1] for r in rows], np.float32),
            top_k=np.array([r[2] for r in rows], np.int32),
            top_p=np.array([r[3] for r in rows], np.float32),
        )
    )
    seeds = np.array([r[4] for r in rows], np.int32)
    uniforms = np.stack(
        [
            ops.convert_to_numpy(uniform_stream(seeds[i : i + 1], r[5]))[0]
            for i, r in enumerate(rows)
        ]
    )
    keras_tokens = ops.convert_to_numpy(sample_inverse_cdf(keras_filtered, uniforms))
    for i, (row, temperature, top_k, top_p, seed, position) in enumerate(rows):
        filtered = device.filter_logits(row, temperature, top_k, top_p)
        np.testing.assert_array_equal(filtered <= -1e8, keras_filtered[i] <= -1e8)
        np.testing.assert_allclose(filtered, keras_filtered[i], rtol=1e-5, atol=1e-5)
        assert device.uniform(seed, position) == uniforms[i]
        assert device.sample(filtered, uniforms[i]) == keras_tokens[i]


@pytest.mark.integration
def test_chunked_prefill_and_full_int8_with_several_prefill_lengths(
    run_dir, run, tmp_path
):
    out = str(tmp_path / "f32")
    path = export_tflite(
        run_dir, out, prefill_lengths=[8, 16], progress=lambda *_: None
    )
    sys.path.insert(0, out)
    try:
        import generate

        runtime = generate.LiteRTGenerator(path)
    finally:
        sys.path.remove(out)
    assert sorted(runtime.prefills) == [8, 16]
    assert "prefill" not in runtime.interpreter.get_signature_list()
    ids = byte_ids(LINE[:CONTEXT])
    expected = keras_logits(run, ids)
    # 29 ids from 0: prefill_16 twice; 5: prefill_8; 9 from position 20:
    # prefill_16 would pass the context's end, so decode steps instead.
    for prefilled, start in ((29, 0), (5, 0), (9, 20)):
        cache = runtime.prefill(ids[:start], runtime.new_cache())
        cache = runtime.prefill(ids[start : start + prefilled], cache, start=start)
        for position in range(start + prefilled, CONTEXT):
            logits, cache = runtime.decode(ids[position], position, cache)
            np.testing.assert_allclose(logits, expected[position], atol=1e-4, rtol=0)
    got, _ = runtime.generate(byte_ids("to be or not to be, that is"), 4, greedy=True)
    assert got == keras_generate(run, byte_ids("to be or not to be, that is"), 4)[0]
    # full_int8 (activations too, calibrated on lines of text) calibrates
    # every prefill signature under its own name. Its logits move by up to
    # a few nats, so it is held to floors on the trained shared run, decoded
    # step by step over the line: its mean nats per next byte within 0.3
    # of the Keras model's, and the Keras model's top byte among its top 5
    # at 90 % of the positions (measured: 1.81 against 1.65 nats, 32 of 32,
    # on an AVX2 CPU; 1.72 against 1.47 on an AVX-512 one, where the shared
    # run trains to other weights; its own top byte is Keras's at 11 of 32,
    # so no floor is set on that).
    # (The quality gate refuses it at its default 0.1 nats per token: this
    # run's full int8 loses about 0.25. The threshold is raised to test the
    # signatures.)
    quantized = export_tflite(
        run_dir,
        str(tmp_path / "int8"),
        quantize="full_int8",
        prefill_lengths=[8, 16],
        representative_sentences=[LINE.strip()] * 8,
        max_quality_loss=1.0,
        progress=lambda *_: None,
    )
    assert os.path.basename(quantized) == "model_full_int8.tflite"
    assert os.path.isfile(str(tmp_path / "int8" / "model_loop_full_int8.tflite"))
    sys.path.insert(0, str(tmp_path / "int8"))
    try:
        runtime = generate.LiteRTGenerator(quantized)
    finally:
        sys.path.remove(str(tmp_path / "int8"))
    assert sorted(runtime.prefills) == [8, 16]
    cache, in_top_5, nats = runtime.new_cache(), 0, {"keras": [], "int8": []}
    for position, token in enumerate(ids):
        logits, cache = runtime.decode(token, position, cache)
        assert logits.shape == expected[position].shape
        in_top_5 += int(np.argmax(expected[position]) in np.argsort(logits)[-5:])
        if position + 1 < len(ids):
            for name, row in (("keras", expected[position]), ("int8", logits)):
                row = row.astype(np.float64)
                log_p = row - row.max() - np.log(np.sum(np.exp(row - row.max())))
                nats[name].append(-log_p[ids[position + 1]])
    keras_nats, int8_nats = np.mean(nats["keras"]), np.mean(nats["int8"])
    assert keras_nats < 2.0, keras_nats  # the shared run has learned the line
    assert int8_nats <= keras_nats + 0.3, (int8_nats, keras_nats)
    assert in_top_5 >= 0.9 * len(ids), f"{in_top_5} of {len(ids)}"
    # The prefill signatures run too, and continue where the Keras model does.
    cache = runtime.prefill(ids[:16], runtime.new_cache())
    logits, _ = runtime.decode(ids[16], 16, cache)
    assert np.argmax(expected[16]) in np.argsort(logits)[-5:]


def test_the_loop_model_starts_an_empty_prompt_from_the_start_token(device, run):
    from ai_edge_litert.interpreter import Interpreter

    out, _, _ = device
    runner = Interpreter(
        model_path=os.path.join(out, "model_loop.tflite")
    ).get_signature_runner()
    got = runner(
        token_ids=np.zeros((1, CONTEXT), np.int32),
        max_new_tokens=np.array([6], np.int32),
    )["token_ids"][0]
    expected, _ = keras_generate(run, [START], 6)
    assert got[0] == START and got[1:7].tolist() == expected


def test_the_runtime_command_reads_prompts_that_are_not_utf8(device):
    out, path, _ = device
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(out, "generate.py"),
            path,
            b"to \xff be",
            "--greedy",
            "--max-new-tokens",
            "3",
        ],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.decode("utf-8").startswith("to \ufffd be")
    missing = subprocess.run(
        [sys.executable, os.path.join(out, "generate.py"), path + ".gone", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no model at" in missing.stderr


@pytest.mark.parametrize("missing", ["tokenizer.py", "text.json"])
def test_the_runtime_command_names_a_missing_neighbour(device, tmp_path, missing):
    out, _, _ = device
    app = copy_export(out, tmp_path / "app", [missing])
    done = run_shipped(app, "generate.py", "model.tflite", "to be", "--greedy")
    assert_one_line_error(done, "generate.py: error", missing)
