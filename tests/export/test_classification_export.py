"""Export of text-classification runs (single sentences and sentence pairs):
the SavedModel's `classify`, `embed` and `tokenize` against the Keras model
and training's encoding, its guarantees (TensorFlow alone, any bytes,
fuzzing); the TFLite classifier and its reference runtime against Keras;
the quantized variants."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import tfformer
from tests.fuzzing import BATCH, fuzz_settings
from tests.testing import run_python
from tfformer.export.flatbuffer import FLOAT_TYPES, ops, read_model, signature_types
from tfformer.export.saved_model import export_saved_model
from tfformer.export.tasks.bert_text import pair_lengths
from tfformer.export.tflite import check_integer_only, export_tflite
from tfformer.training.tasks import get_task
from tfformer.training.tasks.text_classification import encode_texts

from ..training.tiny import (
    CLASSIFIER_MAX_LENGTH,
    FILLER,
    GOOD,
    train_tiny_classifier,
)

FLOATS = set(FLOAT_TYPES)


@pytest.fixture(
    scope="module",
    params=["single", pytest.param("pairs", marks=pytest.mark.integration)],
)
def case(request, tmp_path_factory):
    """(run dir, loaded run, served SavedModel, test inputs) of one run: the
    session's tiny classifier, or a classifier of sentence pairs."""
    root = tmp_path_factory.mktemp(f"classifier_{request.param}")
    if request.param == "pairs":
        run_dir = train_tiny_classifier(root, pairs=True)
    else:
        run_dir = request.getfixturevalue("tiny_classifier_run")
    path = export_saved_model(run_dir, str(root / "serving"), progress=lambda *_: None)
    task = get_task("text_classification")
    loaded = tfformer.load(run_dir)
    test = [text for text, _ in task.raw_splits(loaded.config.data)["test"]]
    return run_dir, loaded, path, tf.saved_model.load(path), test


def keras_probabilities(loaded, texts):
    return loaded.probabilities(texts)


def call(served, name, texts, pairs=None):
    if pairs is None:
        pairs = bool(texts) and isinstance(texts[0], tuple)
    if pairs:
        out = served.signatures[name](
            text=tf.constant([a for a, _ in texts], tf.string),
            text_b=tf.constant([b for _, b in texts], tf.string),
        )
    else:
        out = served.signatures[name](text=tf.constant(texts, tf.string))
    return {k: v.numpy() for k, v in out.items()}


# -- SavedModel ----------------------------------------------------------------


def test_classify_equals_keras_on_every_test_input(case):
    _, loaded, _, served, test = case
    expected = keras_probabilities(loaded, test)
    out = call(served, "classify", test)
    np.testing.assert_allclose(out["probabilities"], expected, atol=1e-5)
    labels = loaded.directory.manifest.labels
    assert out["label"].astype(str).tolist() == [labels[i] for i in expected.argmax(-1)]
    np.testing.assert_array_equal(out["label_id"], expected.argmax(-1))
    assert out["label_names"].shape == (len(test), len(labels))
    assert sorted(served.signatures) == [
        "classify",
        "embed",
        "serving_default",
        "tokenize",
    ]


def test_tokenize_is_trainings_encoding(case):
    """The graph's ids and segments equal `encode_texts` (training's) on the
    test inputs and on long ones that must be cut (pairs: longest-first)."""
    _, loaded, _, served, test = case
    tokenizer = loaded.tokenizers["text"]
    rng = np.random.default_rng(1)
    long = " ".join(rng.choice(FILLER + GOOD, 40))
    pairs = loaded.directory.manifest.pairs
    extra = [(long, "a plot"), ("a", long), (long, long)] if pairs else [long, "", "  "]
    texts = [*test, *extra]
    rows, segments = encode_texts(tokenizer, texts, CLASSIFIER_MAX_LENGTH)
    out = call(served, "tokenize", texts)
    for i, (row, segment) in enumerate(zip(rows, segments, strict=True)):
        assert out["token_ids"][i].tolist() == row + [0] * (
            CLASSIFIER_MAX_LENGTH - len(row)
        )
        assert out["segment_ids"][i, : len(row)].tolist() == segment
    classified = call(served, "classify", extra)
    expected = [True, True, True] if pairs else [True, False, False]
    assert classified["truncated"].tolist() == expected


def test_pair_lengths_equal_berts_loop():
    rng = np.random.default_rng(2)
    first = rng.integers(0, 30, 500)
    second = rng.integers(0, 30, 500)
    budget = rng.integers(1, 25, 500)
    for a, b, n in zip(first, second, budget, strict=True):
        x, y = list(range(a)), list(range(b))
        while len(x) + len(y) > n:
            (x if len(x) > len(y) else y).pop()
        got = pair_lengths(tf.constant([a]), tf.constant([b]), int(n))
        assert (int(got[0][0]), int(got[1][0])) == (len(x), len(y)), (a, b, n)


def test_the_device_packing_equals_the_graphs():
    """`classify.py`'s `encode` (what an app ports) against the graph's
    closed form: the same tokens kept of each text, in [START] a [END]
    (b [END]) with segment ids 0 then 1."""
    from tfformer.export.runtimes.classify import encode

    rng = np.random.default_rng(3)
    for a, b, n in rng.integers((0, 0, 4), (30, 30, 28), (300, 3)):
        first, second = list(range(10, 10 + a)), list(range(100, 100 + b))
        keep = pair_lengths(tf.constant([a]), tf.constant([b]), int(n) - 3)
        keep_a, keep_b = int(keep[0][0]), int(keep[1][0])
        ids, segments = encode(first, second, int(n), start=2, end=3)
        assert ids == [2, *first[:keep_a], 3, *second[:keep_b], 3]
        assert segments == [0] * (keep_a + 2) + [1] * (keep_b + 1)
        ids, segments = encode(first, None, int(n), start=2, end=3)
        assert ids == [2, *first[: int(n) - 2], 3] and segments == [0] * len(ids)


def test_embed_is_the_pooled_vector_and_the_normalised_mean(case):
    _, loaded, _, served, test = case
    texts = test[:12]
    out = call(served, "embed", texts)
    model = loaded.model
    backbone = model.backbone

    def encoder(inputs, training):
        out = backbone(inputs, training=training)
        return {"pooled": out["pooled_output"], "sequence": out["sequence_output"]}

    rows, segments = encode_texts(
        loaded.tokenizers["text"], texts, CLASSIFIER_MAX_LENGTH
    )
    for i, (row, segment) in enumerate(zip(rows, segments, strict=True)):
        got = encoder(
            {"token_ids": np.array([row]), "segment_ids": np.array([segment])},
            training=False,
        )
        np.testing.assert_allclose(out["embedding"][i], got["pooled"][0], atol=1e-5)
        mean = np.asarray(got["sequence"][0]).mean(axis=0)
        np.testing.assert_allclose(
            out["mean_embedding"][i], mean / np.linalg.norm(mean), atol=1e-5
        )


@pytest.mark.integration
def test_loads_in_a_process_that_imports_only_tensorflow(case):
    _, loaded, path, _, _ = case
    pairs = loaded.directory.manifest.pairs
    inputs = "text=t, text_b=t" if pairs else "text=t"
    script = f"""
import sys
sys.modules["keras"] = None  # any import of Keras fails
import tensorflow as tf
model = tf.saved_model.load({path!r})
t = tf.constant(["a great film", b"\\xff\\xfe"])
out = model.signatures["classify"]({inputs})
assert out["probabilities"].shape[0] == 2, out
leaked = [m for m in ("tfformer", "training", "export", "keras", "tensorflow_text")
          if sys.modules.get(m) is not None]
print("LEAKED", leaked)
"""
    done = run_python(script)
    assert "LEAKED []" in done.stdout, done.stdout


texts = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=60).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.integers(1, 3000).map(lambda n: b"superb " * n),  # past 16 KiB at > 2340
)


def test_pairs_of_unequal_halves_are_refused_by_name(case):
    _, loaded, _, served, _ = case
    if not loaded.directory.manifest.pairs:
        pytest.skip("a single-sentence run has no text_b")
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="text and text_b must hold as many"
    ):
        served.signatures["classify"](
            text=tf.constant(["a", "b"]), text_b=tf.constant(["c"])
        )


def test_an_empty_batch_classifies_tokenizes_and_embeds_nothing(case):
    _, loaded, _, served, _ = case
    pairs = loaded.directory.manifest.pairs
    for name in ("classify", "tokenize", "embed"):
        out = call(served, name, [], pairs=pairs)
        assert all(v.shape[0] == 0 for v in out.values()), name


# 50 batches of 20 to 24 inputs for each run kind (single sentences, pairs)
# by default, 500 under TFFORMER_FUZZ=full (tests/fuzzing.py).
@pytest.mark.integration
@fuzz_settings(500)
@given(st.lists(st.tuples(texts, texts), **BATCH))
def test_no_input_makes_classify_fail(case, batch):
    """Any bytes: probabilities that sum to 1, a label that is the argmax,
    and for valid UTF-8 under 16 KiB the training tokenizer's token count
    (and `truncated` exactly when those tokens do not fit)."""
    _, loaded, _, served, _ = case
    pairs = loaded.directory.manifest.pairs
    labels = loaded.directory.manifest.labels
    if not pairs:
        batch = [(a,) for a, _ in batch]
    texts = batch if pairs else [t[0] for t in batch]
    out = call(served, "classify", texts, pairs=pairs)
    assert out["probabilities"].shape == (len(batch), len(labels))
    # The other two signatures of the same inputs: the same token counts,
    # and a finite embedding per row.
    tokens = call(served, "tokenize", texts, pairs=pairs)
    np.testing.assert_array_equal(tokens["num_tokens"], out["num_tokens"])
    embedded = call(served, "embed", texts, pairs=pairs)["embedding"]
    assert embedded.shape[0] == len(batch) and np.all(np.isfinite(embedded))
    np.testing.assert_allclose(out["probabilities"].sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(out["label_id"], out["probabilities"].argmax(-1))
    assert out["label"].astype(str).tolist() == [labels[i] for i in out["label_id"]]
    budget = CLASSIFIER_MAX_LENGTH - (3 if pairs else 2)
    tokenizer = loaded.tokenizers["text"]
    for row, parts in enumerate(batch):
        if any(len(t) > 16384 for t in parts):
            assert out["truncated"][row]
            continue
        try:
            decoded = [t.decode("utf-8") for t in parts]
        except UnicodeDecodeError:
            continue
        count = sum(len(tokenizer.tokenize([t])[0]) for t in decoded)
        assert out["num_tokens"][row] == count
        assert out["truncated"][row] == (count > budget)


# -- TFLite --------------------------------------------------------------------


@pytest.fixture(scope="module")
def device(case, tmp_path_factory):
    run_dir = case[0]
    out = str(tmp_path_factory.mktemp("classifier_device"))
    path = export_tflite(run_dir, out, progress=lambda *_: None)
    sys.path.insert(0, out)
    try:
        import classify  # the shipped classify.py

        runtime = classify.LiteRTClassifier(path)
    finally:
        sys.path.remove(out)
    return out, path, runtime


def test_tflite_float32_equals_keras_on_every_test_input(case, device):
    _, loaded, _, _, test = case
    out, path, runtime = device
    assert sorted(os.listdir(out)) == [
        "SHA256SUMS",
        "classify.py",
        "model.tflite",
        "model_file.py",
        "text.json",
        "text_vocab.txt",
        "tokenizer.py",
    ]
    expected = keras_probabilities(loaded, test)
    rows, segments = encode_texts(
        loaded.tokenizers["text"], test, CLASSIFIER_MAX_LENGTH
    )
    for i, text in enumerate(test):
        ids, kinds = runtime.encode(text)
        # The reference tokenizer gives training's ids.
        assert ids[0].tolist() == rows[i] and kinds[0].tolist() == segments[i]
        np.testing.assert_allclose(
            runtime.probabilities(ids, kinds), expected[i], atol=1e-4
        )
    # The float model is no integer-only model: the check says which ops.
    with open(path, "rb") as f:
        with pytest.raises(ValueError, match=r"left these ops in float: .*SOFTMAX"):
            check_integer_only(f.read())
    # Segment ids outside the table of 2 are clamped into it, not read past it.
    wild = np.where(kinds == 0, -5, 9).astype(np.int32)
    np.testing.assert_allclose(
        runtime.probabilities(ids, wild),
        runtime.probabilities(ids, np.clip(wild, 0, 1)),
        atol=1e-6,
    )


@pytest.mark.integration
def test_quantized_variants_convert_and_mostly_agree(case, tmp_path):
    """float16, dynamic int8 and integer-only int8 on the single-sentence
    run, full int8 (calibrated on "a<TAB>b" lines) on the pair run."""
    run_dir, loaded, _, _, test = case
    expected = keras_probabilities(loaded, test).argmax(-1)
    lines = [t if isinstance(t, str) else "\t".join(t) for t in test]
    pairs = loaded.directory.manifest.pairs
    kinds = ("full_int8",) if pairs else ("float16", "int8", "integer_only")
    for quantize in kinds:
        out = str(tmp_path / quantize)
        path = export_tflite(
            run_dir,
            out,
            quantize=quantize,
            representative_sentences=lines,
            progress=lambda *_: None,
        )
        sys.path.insert(0, out)
        try:
            import classify

            runtime = classify.LiteRTClassifier(path)
        finally:
            sys.path.remove(out)
        got = np.array([runtime.classify(t)[1].argmax() for t in test])
        agree = float(np.mean(got == expected))
        least = {"float16": 1.0, "int8": 0.9, "full_int8": 0.75, "integer_only": 0.75}
        assert agree >= least[quantize], (quantize, agree)
        if quantize == "integer_only":
            with open(path, "rb") as f:
                model = read_model(f.read())
            # Every op reads and writes integers; the output is int8.
            floats = [op for op in ops(model) if set(op.inputs + op.outputs) & FLOATS]
            assert not floats, floats
            assert signature_types(model) == (("INT32", "INT32"), ("INT8",))
            scale, _ = runtime.output_quantization
            probabilities = runtime.classify(test[0])[1]
            assert abs(probabilities.sum() - 1.0) <= 2 * scale


def test_the_runtime_command(device):
    out, path, runtime = device
    text = ("a plot\tthe film was superb") if runtime.pairs else "the film was superb"
    done = subprocess.run(
        [sys.executable, os.path.join(out, "classify.py"), path, text],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    label, probability, echoed = done.stdout.rstrip("\n").split("\t", 2)
    assert label in runtime.labels and 0 < float(probability) <= 1 and echoed == text
    missing = subprocess.run(
        [sys.executable, os.path.join(out, "classify.py"), "nope.tflite", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no model at" in missing.stderr
