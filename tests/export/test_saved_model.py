"""SavedModel export: TF Serving layout, atomic versions, signatures, parity
with tfformer-translate and Keras, fresh-process loading, saved_model_cli,
and a fuzz test of the string signature."""

import json
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
from tfformer.decoding import Generator
from tfformer.export.saved_model import export_saved_model, next_version
from tfformer.export.tasks import translation as translation_exporter

from .conftest import SENTENCES


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("serving")
    path = export_saved_model(run_dir, str(out), progress=lambda *_: None)
    return str(out), path


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported[1])


def test_tf_serving_layout(exported, run_dir):
    out, path = exported
    assert path == os.path.join(out, "1")
    assert sorted(os.listdir(out)) == ["1"]  # no temporary directory left
    assert os.path.isfile(os.path.join(path, "saved_model.pb"))
    # Readable by a server running as another user (umask permitting).
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o777 & ~umask
    assert os.path.isdir(os.path.join(path, "variables"))
    assets = sorted(os.listdir(os.path.join(path, "assets")))
    assert assets == ["source_vocab.txt", "target_vocab.txt"]
    with open(os.path.join(path, "assets", "target_vocab.txt"), encoding="utf-8") as f:
        assert f.read() == open(os.path.join(run_dir, "target_vocab.txt")).read()
    with open(os.path.join(path, "assets.extra", "export.json")) as f:
        info = json.load(f)
    assert info["search"] == "beam" and info["beam_width"] == 4
    assert info["max_length"] == 32 and info["source_length"] == 32


def test_signatures(loaded):
    assert set(loaded.signatures) == {
        "serving_default",
        "translate_ids",
        "logits",
        "tokenize",
        "detokenize",
    }
    out = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))
    assert out["translation"].dtype == tf.string
    assert out["translation"].shape == (len(SENTENCES),)
    assert out["token_ids"].shape == (len(SENTENCES), 32)
    assert out["score"].shape == (len(SENTENCES),)


def test_translations_equal_tfformer_translate(run_dir, loaded):
    translator = tfformer.load(run_dir).translator(
        search="beam", beam_width=4, batch_size=8
    )
    expected = translator.translate(SENTENCES)
    out = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))
    assert [t.decode() for t in out["translation"].numpy()] == expected
    np.testing.assert_array_equal(
        out["token_ids"].numpy(), translator.translate_ids(SENTENCES)
    )


def test_logits_and_ids_equal_keras(run_dir, loaded):
    run = tfformer.load(run_dir)
    model, source = run.model, run.tokenizers["source"]
    rng = np.random.default_rng(0)
    vocabulary = model.backbone.encoder_embedding.vocabulary_size
    encoder = rng.integers(4, vocabulary, (3, 32)).astype("int32")
    encoder[1, 20:] = 0
    decoder = rng.integers(4, 50, (3, 7)).astype("int32")
    decoder[:, 0] = 2
    expected = model({"encoder_token_ids": encoder, "decoder_token_ids": decoder})
    got = loaded.signatures["logits"](
        encoder_token_ids=tf.constant(encoder), decoder_token_ids=tf.constant(decoder)
    )["logits"]
    np.testing.assert_allclose(got.numpy(), np.asarray(expected), atol=1e-5)
    beam = Generator(model, max_length=32, search="beam", beam_width=4)
    ids = loaded.signatures["translate_ids"](source_ids=tf.constant(encoder))
    np.testing.assert_array_equal(ids["token_ids"].numpy(), beam(encoder)["token_ids"])
    # Sources of any length are cut or padded to 32; ids outside the
    # vocabulary count as [UNK].
    long = np.concatenate([encoder, encoder], axis=1)
    cut = loaded.signatures["translate_ids"](source_ids=tf.constant(long))
    np.testing.assert_array_equal(cut["token_ids"].numpy(), ids["token_ids"].numpy())
    odd = encoder.copy()
    odd[:, 3] = 10**6
    unk = encoder.copy()
    unk[:, 3] = 1
    np.testing.assert_array_equal(
        loaded.signatures["translate_ids"](source_ids=tf.constant(odd))["token_ids"],
        loaded.signatures["translate_ids"](source_ids=tf.constant(unk))["token_ids"],
    )
    tokens = loaded.signatures["tokenize"](text=tf.constant(SENTENCES[:2]))
    expected_ids = source.tokenize(SENTENCES[:2]).to_tensor(shape=[None, 32])
    np.testing.assert_array_equal(tokens["token_ids"].numpy(), expected_ids.numpy())


def test_loads_in_a_process_that_imports_only_tensorflow(exported):
    script = f"""
import sys
sys.modules["keras"] = None  # any import of Keras fails
import tensorflow as tf
model = tf.saved_model.load({exported[1]!r})
out = model.signatures["serving_default"](text=tf.constant(["nine", ""]))
assert out["translation"].shape == (2,), out
leaked = [m for m in ("tfformer", "training", "export", "keras", "tensorflow_text")
          if sys.modules.get(m) is not None]
print("LEAKED", leaked)
"""
    done = run_python(script)
    assert "LEAKED []" in done.stdout, done.stdout


@pytest.mark.integration
def test_saved_model_cli_show_and_run(exported):
    cli = [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]
    shown = subprocess.run(
        [*cli, "show", "--dir", exported[1], "--all"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "signature_def['serving_default']" in shown.stdout
    assert "outputs['translation']" in shown.stdout
    ran = subprocess.run(
        [
            *cli,
            "run",
            "--dir",
            exported[1],
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--input_exprs",
            "text=[b'nine', b'twenty-one']",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "translation" in ran.stdout


def test_existing_version_is_refused_and_left_alone(run_dir, exported):
    out, path = exported
    before = os.path.getmtime(os.path.join(path, "saved_model.pb"))
    with pytest.raises(ValueError, match="exists already"):
        export_saved_model(run_dir, out, version=1, progress=lambda *_: None)
    assert os.path.getmtime(os.path.join(path, "saved_model.pb")) == before
    assert next_version(out) == 2


def test_a_failed_export_leaves_no_version(run_dir, tmp_path, monkeypatch):
    def crash(graph, path):  # writes half a model, then fails
        with open(os.path.join(path, "saved_model.pb"), "wb") as f:
            f.write(b"half")
        raise RuntimeError("disk full")

    monkeypatch.setattr(translation_exporter.TranslatorGraph, "write", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        export_saved_model(run_dir, str(tmp_path), progress=lambda *_: None)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"search": "sample"}, "search must be one of"),
        ({"version": 0}, "version must be a positive int"),
        ({"version": "2"}, "version must be a positive int"),
        ({"checkpoint": "last.keras"}, "checkpoint file must be one of"),
    ],
)
def test_bad_arguments_are_named(run_dir, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        export_saved_model(run_dir, str(tmp_path), progress=lambda *_: None, **kwargs)
    assert os.listdir(tmp_path) == []


def test_bad_run_directory(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        export_saved_model(str(tmp_path / "nope"), str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"run\.json is missing"):
        export_saved_model(str(tmp_path), str(tmp_path / "out"))


def test_invalid_utf8_becomes_the_replacement_character(loaded):
    tokenize = loaded.signatures["tokenize"]
    bad = tokenize(text=tf.constant([b"nine \xff\xfe hundred"]))["token_ids"]
    replaced = tokenize(text=tf.constant(["nine \ufffd\ufffd hundred"]))["token_ids"]
    dropped = tokenize(text=tf.constant([b"nine hundred"]))["token_ids"]
    np.testing.assert_array_equal(bad.numpy(), replaced.numpy())
    # The replacement characters are tokens, not silently dropped.
    assert np.count_nonzero(bad.numpy()) > np.count_nonzero(dropped.numpy())


def test_inputs_are_cut_at_16_kib_before_tokenizing(loaded):
    tokenize = loaded.signatures["tokenize"]
    limit = 16384
    fits = b" " * (limit - len(b"nine")) + b"nine"  # exactly 16 KiB
    cut = b" " * limit + b"nine"  # "nine" starts after 16 KiB
    ids = tokenize(text=tf.constant([fits, cut, b"nine"]))["token_ids"].numpy()
    np.testing.assert_array_equal(ids[0], ids[2])
    assert not ids[1].any()  # nothing left but spaces: all padding


# Raw bytes of any kind: empty, not UTF-8, long (cut to 32 tokens).
inputs = st.one_of(
    st.binary(max_size=64),
    st.text(max_size=64).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.integers(1, 3000).map(lambda n: b"nine hundred " * n),
)


def check_translates(loaded, batch):
    out = loaded.signatures["serving_default"](text=tf.constant(batch, tf.string))
    assert out["translation"].shape == (len(batch),)
    assert out["token_ids"].shape == (len(batch), 32)
    ids = out["token_ids"].numpy()
    assert np.all(ids[:, 0] == 2) if len(batch) else True
    assert np.all(np.isfinite(out["score"].numpy()))


def check_tokenizes(loaded, source, batch):
    """The served `tokenize` gives each row the run's tokenizer's ids (of
    the text with invalid UTF-8 replaced, as served), for rows that fit."""
    served = loaded.signatures["tokenize"](text=tf.constant(batch, tf.string))
    ids = served["token_ids"].numpy()
    assert ids.shape == (len(batch), 32)
    for row, raw in zip(ids, batch, strict=True):
        if len(raw) > 16384:
            continue
        expected = source.tokenize([raw.decode("utf-8", "replace")])[0].numpy()
        if len(expected) <= 32:
            assert row[: len(expected)].tolist() == expected.tolist(), raw
            assert not row[len(expected) :].any(), raw


@pytest.fixture(scope="module")
def source_tokenizer(run_dir):
    return tfformer.load(run_dir).tokenizers["source"]


def test_an_empty_batch_translates_and_tokenizes_to_nothing(loaded, source_tokenizer):
    check_translates(loaded, [])
    check_tokenizes(loaded, source_tokenizer, [])


@pytest.mark.integration
@fuzz_settings(1000)
@given(st.lists(inputs, **BATCH))
def test_no_input_string_makes_it_fail(loaded, source_tokenizer, batch):
    check_translates(loaded, batch)
    check_tokenizes(loaded, source_tokenizer, batch)


@pytest.mark.slow
@fuzz_settings(10000, reduce=False)  # the thorough run itself
@given(st.lists(inputs, max_size=4))
def test_no_input_string_makes_it_fail_10000(loaded, batch):
    check_translates(loaded, batch)
