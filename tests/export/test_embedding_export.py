"""Export of a converted sentence embedder: the SavedModel's `embed`,
`similarity` and `tokenize` against Keras and Hugging Face's tokenizer, its
load with TensorFlow alone, and the TFLite embedder with its reference
runtime (float32 and int8)."""

import importlib.util
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

import tfformer
from tests.fuzzing import BATCH, fuzz_settings
from tests.testing import run_python
from tests.training.convert.huggingface.test_bert import (
    bert_tensors,
    hf_tokenizer,
    write_checkpoint,
)
from tfformer.export.flatbuffer import ops, read_model
from tfformer.export.saved_model import export_saved_model
from tfformer.export.tflite import export_tflite
from tfformer.training.convert import convert

pytest.importorskip("safetensors")
TEXTS = [
    "A man is eating food.",
    "Café, the horse-riding man's bread?",
    "的x  a\tman\u200b\x00 eats",
    "the dogs ride!",
    "",
    "man " * 40,  # longer than max_length (16)
]


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("embedding_export")
    # Wider than test_convert's model: the converter's dynamic-range int8
    # quantizes only weights of 1,024 elements or more (the FFN's here).
    sizes = {"hidden": 32, "inner": 64}
    source = write_checkpoint(
        root / "hf",
        np.random.default_rng(7),
        tensors=bert_tensors(np.random.default_rng(7), **sizes),
        config={"hidden_size": 32, "intermediate_size": 64},
        sentence_transformers={"pooling": "mean", "normalize": True},
    )
    run = convert(str(source), str(root / "run"), progress=lambda *_: None)
    loaded = tfformer.load(run)
    path = export_saved_model(run, str(root / "serving"), progress=lambda *_: None)
    return root, run, loaded, tf.saved_model.load(path), path


def test_embed_equals_keras(case):
    _, _, loaded, served, _ = case
    out = served.signatures["embed"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(out["embedding"], loaded.embed(TEXTS), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out["embedding"], axis=1), 1, atol=1e-5)
    assert out["truncated"].numpy().tolist() == [False] * 5 + [True]
    assert out["num_tokens"].numpy()[-1] == 40  # before the cut to 16
    default = served.signatures["serving_default"](text=tf.constant(TEXTS[:2]))
    # (Padded to each batch's longest row, so equal to rounding.)
    np.testing.assert_allclose(default["embedding"], out["embedding"][:2], atol=1e-6)


def test_tokenize_equals_hugging_face_and_similarity_the_dot_product(case):
    _, _, _, served, _ = case
    ids = served.signatures["tokenize"](text=tf.constant(TEXTS[:5]))["token_ids"]
    reference = hf_tokenizer()
    for row, text in zip(ids.numpy(), TEXTS[:5], strict=True):
        assert row[row != 0].tolist() == reference.encode(text).ids, text
    vectors = served.signatures["embed"](text=tf.constant(TEXTS))["embedding"]
    cosine = served.signatures["similarity"](
        text=tf.constant(TEXTS[:3]), text_b=tf.constant(TEXTS[3:])
    )["cosine"]
    np.testing.assert_allclose(
        cosine, np.sum(vectors[:3] * vectors[3:], axis=1), atol=1e-5
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many strings"):
        served.signatures["similarity"](
            text=tf.constant(TEXTS[:2]), text_b=tf.constant(TEXTS[:3])
        )


def test_an_empty_batch_embeds_and_tokenizes_to_nothing(case):
    served = case[3]
    empty = tf.constant([], tf.string)
    assert served.signatures["embed"](text=empty)["embedding"].shape == (0, 32)
    assert served.signatures["tokenize"](text=empty)["token_ids"].shape[0] == 0
    cosine = served.signatures["similarity"](text=empty, text_b=empty)["cosine"]
    assert cosine.shape == (0,)


# Raw bytes of any kind: empty, not UTF-8, past the 16-token cut, past 16 KiB.
texts = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=60).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.integers(1, 3000).map(lambda n: b"man " * n),
)


@pytest.mark.integration
@fuzz_settings(1000)
@given(st.lists(texts, **BATCH))
def test_no_input_makes_embed_similarity_or_tokenize_fail(case, batch):
    """Any bytes: unit-length embeddings, the cosine of two batches their
    dot product, and Hugging Face's ids for each valid UTF-8 row that fits
    in the 16 tokens (with invalid UTF-8 replaced, as served)."""
    served = case[3]
    text = tf.constant(batch, tf.string)
    vectors = served.signatures["embed"](text=text)["embedding"].numpy()
    assert vectors.shape == (len(batch), 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    cosine = served.signatures["similarity"](text=text, text_b=text[::-1])["cosine"]
    np.testing.assert_allclose(
        cosine, np.sum(vectors * vectors[::-1], axis=1), atol=1e-5
    )
    ids = served.signatures["tokenize"](text=text)["token_ids"].numpy()
    reference = hf_tokenizer()
    for row, raw in zip(ids, batch, strict=True):
        if len(raw) > 16384:
            continue
        expected = reference.encode(raw.decode("utf-8", "replace")).ids
        if len(expected) <= 16:
            assert row[row != 0].tolist() == expected, raw


@pytest.mark.integration
def test_loads_in_a_process_that_imports_only_tensorflow(case):
    path = case[4]
    script = f"""
import sys
sys.modules["keras"] = None  # any import of Keras fails
import tensorflow as tf
model = tf.saved_model.load({path!r})
out = model.signatures["embed"](text=tf.constant(["Crème brûlée", "a man"]))
assert out["embedding"].shape == (2, 32), out
leaked = [m for m in ("tfformer", "training", "export") if m in sys.modules]
print("LEAKED", leaked)
"""
    done = run_python(script)
    assert "LEAKED []" in done.stdout, done.stdout


def runtime(out, path):
    spec = importlib.util.spec_from_file_location(
        f"embed_{abs(hash(path))}", os.path.join(out, "embed.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, module.LiteRTEmbedder(path)


@pytest.mark.parametrize(
    "quantize", ["none", pytest.param("int8", marks=pytest.mark.integration)]
)
def test_tflite_embedder_and_its_runtime(case, quantize):
    root, run, loaded, _, _ = case
    out = str(root / f"device_{quantize}")
    path = export_tflite(run, out, quantize=quantize, progress=lambda *_: None)
    files = ["SHA256SUMS", "embed.py", "model_file.py", "text.json"]
    files += ["text_vocab.txt", "tokenizer.py"]
    assert sorted(os.listdir(out)) == sorted([os.path.basename(path), *files])
    with open(path, "rb") as f:
        names = {op.name for op in ops(read_model(f.read()))}
    assert "FlexDelegate" not in str(names) and not any("Flex" in n for n in names)
    module, embedder = runtime(out, path)
    reference = hf_tokenizer()
    expected = loaded.embed(TEXTS)
    got = np.array([embedder.embed(t) for t in TEXTS])
    for text in TEXTS[:5]:
        assert embedder.token_ids(text) == reference.encode(text).ids, text
    if quantize == "none":
        np.testing.assert_allclose(got, expected, atol=1e-4)
    else:
        cosine = np.sum(got * expected, axis=1) / np.linalg.norm(got, axis=1)
        assert cosine.min() >= 0.98, cosine
        assert not np.allclose(got, expected, atol=1e-4)  # it is quantized
    ranked = embedder.search(TEXTS[0], TEXTS[1:4])
    unit = got / np.linalg.norm(got, axis=1, keepdims=True)
    scores = {TEXTS[i]: float(unit[0] @ unit[i]) for i in range(1, 4)}
    assert [d for _, d in ranked] == sorted(scores, key=lambda d: -scores[d])
    np.testing.assert_allclose(
        [s for s, _ in ranked], [scores[d] for _, d in ranked], atol=1e-5
    )
    assert module.main([path, "a man", "the dog"]) == 0


def test_the_quality_gate_measures_cosine_to_the_float_model(case, tmp_path):
    """A converted embedder has no held-out text: int8 is written with a
    warning, int4 refused unless texts are given; with texts, the figures
    are the written model's cosine to the Keras model's embeddings and
    its nearest neighbours against Keras's."""
    pytest.importorskip("ai_edge_quantizer")
    from tfformer.export import quality

    _, run, loaded, _, _ = case
    said = []
    export_tflite(
        run, str(tmp_path / "unmeasured"), quantize="int8", progress=said.append
    )
    assert any("warning: int8 is unmeasured" in line for line in said)
    assert not (tmp_path / "unmeasured" / "quality.json").exists()
    with pytest.raises(ValueError, match=r"int4 cannot measure .* --quality-data FILE"):
        export_tflite(run, str(tmp_path / "refused"), quantize="int4", progress=print)
    assert not (tmp_path / "refused").exists()
    # One text per line; empty lines are skipped.
    lines = [t for t in TEXTS if t.strip()]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n\n")
    with pytest.raises(ValueError, match=r"loses .* cosine .*-quality-loss 0.01"):
        export_tflite(
            run, str(tmp_path / "refused"), quantize="int4", quality_data=str(texts)
        )
    out = str(tmp_path / "int4")
    # (This random encoder loses 0.03 in int4 blocks of 32: over the default.)
    path = export_tflite(
        run,
        out,
        quantize="int4",
        quality_data=str(texts),
        max_quality_loss=0.5,
        progress=lambda *_: None,
    )
    figures = quality.recorded(out, "model_int4.tflite")
    _, embedder = runtime(out, path)
    got = np.array([embedder.embed(t) for t in lines], np.float64)
    expected = np.asarray(loaded.embed(lines), np.float64)
    cosine = np.sum(got * expected, axis=1) / (
        np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert (
        figures["examples"] == len(lines) and figures["metric"] == "cosine to float32"
    )
    assert figures["quantized"] == pytest.approx(cosine.mean(), abs=1e-4)
    assert figures["cosine_min"] == pytest.approx(cosine.min(), abs=1e-4)
    assert figures["quantized"] < 1.0  # it is quantized

    def neighbours(v):
        unit = v / np.linalg.norm(v, axis=1, keepdims=True)
        similarity = unit @ unit.T
        np.fill_diagonal(similarity, -np.inf)
        return similarity.argmax(1)

    same = np.mean(neighbours(got) == neighbours(expected))
    assert figures["agreement"] == pytest.approx(same)
    # Written again unmeasured, the model keeps no older model's figures.
    export_tflite(run, out, quantize="int4", force=True, progress=lambda *_: None)
    assert quality.recorded(out, "model_int4.tflite") is None
