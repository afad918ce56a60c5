"""TFLite export: builtin ops only with the decoding WHILE loop inside, run
with the ai_edge_litert Interpreter; parity with Keras and the SavedModel;
clamping; the quantized variants and the command line."""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

import tfformer
from tfformer.decoding import Generator
from tfformer.export import cli
from tfformer.export.runtimes.tokenizer import DeviceTokenizer
from tfformer.export.runtimes.translate import Translator
from tfformer.export.saved_model import export_saved_model
from tfformer.export.tasks.translation import EXPORTER
from tfformer.export.tflite import convert, export_tflite
from tfformer.runs.directory import RunDirectory

from .conftest import SENTENCES
from .shipped import assert_one_line_error, copy_export, run_shipped


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("device")
    return export_tflite(run_dir, str(out), progress=lambda *_: None)


def op_names(path):
    interpreter = Interpreter(model_path=path)
    return {op["op_name"] for op in interpreter._get_ops_details()}


def test_builtin_ops_only_with_the_loop_inside(exported):
    ops = op_names(exported)
    assert "WHILE" in ops
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(exported).st_mode & 0o777 == 0o666 & ~umask
    assert not [op for op in ops if "Flex" in op or op.startswith("Custom")], ops
    directory = os.path.dirname(exported)
    assert sorted(os.listdir(directory)) == [
        "SHA256SUMS",
        "model.tflite",
        "model_file.py",
        "source_vocab.txt",
        "target_vocab.txt",
        "text.json",
        "tokenizer.py",
        "translate.py",
    ]


def test_greedy_tokens_equal_keras_and_saved_model(run_dir, exported, tmp_path):
    tokenizer = DeviceTokenizer(os.path.dirname(exported))
    litert = Translator(exported)
    run = EXPORTER.read(run_dir)
    greedy = Generator(run.model, max_length=32, search="greedy")
    serving = tf.saved_model.load(
        export_saved_model(
            run_dir, str(tmp_path), search="greedy", progress=lambda *_: None
        )
    )
    sources = np.array([tokenizer.tokenize(s) for s in SENTENCES], "int32")
    keras_ids = np.asarray(greedy(sources)["token_ids"])
    served = serving.signatures["translate_ids"](source_ids=tf.constant(sources))
    np.testing.assert_array_equal(served["token_ids"].numpy(), keras_ids)
    for row, expected in zip(sources, keras_ids, strict=True):
        np.testing.assert_array_equal(litert.translate_ids(row), expected)
    # The device reference detokenizes as the SavedModel does.
    texts = serving.signatures["detokenize"](token_ids=tf.constant(keras_ids))["text"]
    assert [tokenizer.detokenize(r) for r in keras_ids] == [
        t.decode() for t in texts.numpy()
    ]


@pytest.mark.integration
def test_logits_equal_keras_and_saved_model(run_dir, tmp_path):
    run = EXPORTER.read(run_dir)
    rng = np.random.default_rng(0)
    source_vocabulary = run.model.backbone.encoder_vocabulary_size
    encoder = rng.integers(4, source_vocabulary, (1, 32)).astype("int32")
    encoder[0, 12:] = 0
    decoder = rng.integers(4, run.vocabulary_size, (1, 9)).astype("int32")
    expected = np.asarray(
        run.model({"encoder_token_ids": encoder, "decoder_token_ids": decoder})
    )
    archive = keras.export.ExportArchive()
    archive.track(run.model)
    archive.add_endpoint(
        "serving_default",
        lambda e, d: {
            "logits": run.model({"encoder_token_ids": e, "decoder_token_ids": d})
        },
        [
            tf.TensorSpec([1, 32], tf.int32, name="encoder_token_ids"),
            tf.TensorSpec([1, 9], tf.int32, name="decoder_token_ids"),
        ],
    )
    archive.write_out(str(tmp_path / "logits"), verbose=False)
    path = tmp_path / "logits.tflite"
    path.write_bytes(convert(str(tmp_path / "logits"), "none"))
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    got = runner(encoder_token_ids=encoder, decoder_token_ids=decoder)["logits"]
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_out_of_range_ids_are_clamped_and_bad_shapes_refused(exported):
    litert = Translator(exported)
    source = np.zeros(32, "int32")
    source[:3] = [10**6, -5, 1]
    unk = np.zeros(32, "int32")
    unk[:3] = 1
    np.testing.assert_array_equal(
        litert.translate_ids(source), litert.translate_ids(unk)
    )
    with pytest.raises(ValueError, match=r"source_ids must have 32 ids"):
        litert.translate_ids(np.ones(40, "int32"))
    # The raw interpreter refuses a wrong shape with an exception, and
    # still works afterwards.
    with pytest.raises((ValueError, RuntimeError)):
        litert.runner(source_ids=np.ones((1, 40), "int32"))
    fresh = Translator(exported)
    np.testing.assert_array_equal(fresh.translate_ids(unk), litert.translate_ids(unk))
    with pytest.raises(FileNotFoundError, match="no model at"):
        Translator("/nonexistent/model.tflite")


def test_text_settings_describe_the_run(exported, run_dir):
    with open(os.path.join(os.path.dirname(exported), "text.json")) as f:
        settings = json.load(f)
    assert settings["source_length"] == 32 and settings["max_length"] == 32
    assert settings["reserved_tokens"] == ["[PAD]", "[UNK]", "[START]", "[END]"]
    assert settings["character_classes"]["starts"][0] == 0


QUANTIZE_SCRIPT = """
import os, sys, json
import numpy as np
from tfformer.export import cli
from tfformer.export.runtimes.translate import Translator
from tfformer.export.runtimes.tokenizer import DeviceTokenizer
run_dir, out, data = sys.argv[1:4]
sentences = open(data, encoding="utf-8").read().splitlines()[:6]
sizes, outputs = {}, {}
for q in ("none", "float16", "int8", "full_int8"):
    args = ["--checkpoint", run_dir, "--format", "tflite", "--quantize", q]
    args += ["--out", out]
    if q == "full_int8":
        args += ["--representative-data", data]
    assert cli.main(args) == 0, q
    path = os.path.join(out, "model.tflite" if q == "none" else f"model_{q}.tflite")
    tokenizer = DeviceTokenizer(out)
    litert = Translator(path)
    ids = [litert.translate_ids(tokenizer.tokenize(s)).tolist() for s in sentences]
    assert all(len(i) == 32 and i[0] == 2 for i in ids), ids
    sizes[q] = os.path.getsize(path)
    outputs[q] = ids
print("RESULTS", json.dumps({"sizes": sizes, "outputs": outputs}))
"""


@pytest.mark.integration
def test_quantized_variants_from_the_command_line(run_dir, tmp_path):
    # A subprocess: TFLiteConverter.convert() leaks memory on TF 2.21
    # (tensorflow/tensorflow#122598), and this converts four times.
    data = tmp_path / "sources.txt"
    data.write_text("\n".join(SENTENCES * 5) + "\n", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            QUANTIZE_SCRIPT,
            run_dir,
            str(tmp_path / "out"),
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.split("RESULTS", 1)[1])
    sizes, outputs = results["sizes"], results["outputs"]
    assert sizes["float16"] < sizes["none"]
    assert sizes["int8"] < sizes["float16"]
    assert sizes["full_int8"] < sizes["none"]
    # Agreement with the float model over the generated tokens only: the
    # positions where either model has not yet ended (trailing padding would
    # count as agreement). float16 rounds weights only, so it must give the
    # same tokens. int8 and full int8 change the logits of this barely
    # trained model, whose top choices are near ties: they get a measured
    # floor. (Before masked attention scores got a data-sized floor, full int8
    # agreed on almost none.)
    reference = np.array(outputs["none"])
    floors = {"float16": 1.0, "int8": 0.9, "full_int8": 0.8}
    for variant, floor in floors.items():
        got = np.array(outputs[variant])
        generated = (reference[:, 1:] != 0) | (got[:, 1:] != 0)
        agreement = np.mean((got[:, 1:] == reference[:, 1:])[generated])
        print(variant, agreement)
        assert agreement >= floor, (variant, agreement)


def test_command_line_errors_are_named(run_dir, tmp_path, capsys):
    def fails(args, message):
        assert cli.main(args) == 2
        assert message in capsys.readouterr().err

    base = ["--checkpoint", run_dir, "--out", str(tmp_path / "o")]
    fails([*base, "--format", "onnx"], "--format must be one of")
    fails(
        [*base, "--format", "tflite", "--quantize", "int3"], "quantize must be one of"
    )
    fails(
        [*base, "--format", "saved_model", "--quantize", "int8"],
        "--quantize applies to --format tflite",
    )
    fails(
        [*base, "--format", "tflite", "--quantize", "full_int8"],
        "needs representative_sentences",
    )
    fails(
        ["--checkpoint", str(tmp_path / "missing"), "--out", "x", "--format", "tflite"],
        "not a directory",
    )
    assert not (tmp_path / "o").exists()


# -- translate.py, the runtime shipped with the model ---------------------------


@pytest.fixture(scope="module")
def scrambled(run_dir, tmp_path_factory):
    """The tiny run with noise (twice each matrix's spread) on its matrices,
    and its TFLite export. Trained for 30 steps, the run translates every
    sentence to "" (it writes [END] first); scrambled, it writes words,
    "##" pieces and repeats, so that the runtimes compare real text."""
    root = tmp_path_factory.mktemp("scrambled")
    run = shutil.copytree(run_dir, root / "run")
    model = RunDirectory(str(run)).load_model()
    rng = np.random.default_rng(1)
    for weight in model.weights:
        value = weight.numpy()
        if value.ndim >= 2:
            noise = rng.normal(0, 2 * value.std(), value.shape)
            weight.assign(value + noise.astype(value.dtype))
    model.save(str(run / "model.keras"))
    path = export_tflite(str(run), str(root / "device"), progress=lambda *_: None)
    return str(run), path


def test_translate_py_translates_as_keras_greedy_does(scrambled):
    run, path = scrambled
    expected = tfformer.load(run).translator(search="greedy").translate(SENTENCES)
    assert len({t for t in expected if t}) >= 3, expected  # real text to compare
    runtime = Translator(path)
    assert runtime.translate(SENTENCES) == expected
    # UTF-8 bytes read as their text; an empty list gives none.
    assert runtime.translate([s.encode() for s in SENTENCES[:2]]) == expected[:2]
    assert runtime.translate([]) == []
    with pytest.raises(TypeError, match="texts must be a list of sentences"):
        runtime.translate("nine")


def test_translate_py_runs_alone_as_a_command(scrambled, tmp_path):
    _, path = scrambled
    app = copy_export(os.path.dirname(path), tmp_path / "app")
    done = run_shipped(app, "translate.py", "model.tflite", *SENTENCES)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:-1] == Translator(path).translate(SENTENCES)


@pytest.mark.parametrize(
    "missing", ["model.tflite", "text.json", "tokenizer.py", "source_vocab.txt"]
)
def test_translate_py_names_a_missing_file_in_one_line(exported, tmp_path, missing):
    app = copy_export(os.path.dirname(exported), tmp_path / "app", [missing])
    done = run_shipped(app, "translate.py", "model.tflite", "nine")
    assert_one_line_error(done, "translate.py: error", missing)


def test_a_damaged_copy_of_the_model_is_refused_in_one_line(exported, tmp_path):
    """SHA256SUMS holds the model's digest as GNU `sha256sum` computes it
    (`sha256sum -c` passes on the export), and translate.py refuses a copy
    cut short or with one changed byte before LiteRT reads it (LiteRT runs
    most such models: a flatbuffer has no checksum of its own)."""
    directory = os.path.dirname(exported)
    checked = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=directory, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout == "model.tflite: OK\n"
    data = open(exported, "rb").read()
    for name, damaged in (
        ("cut", data[: len(data) // 2]),
        ("flipped", data[:4000] + bytes([data[4000] ^ 0x01]) + data[4001:]),
    ):
        app = copy_export(directory, tmp_path / name)
        with open(os.path.join(app, "model.tflite"), "wb") as f:
            f.write(damaged)
        done = run_shipped(app, "translate.py", "model.tflite", "nine")
        assert_one_line_error(done, "translate.py: error", "model.tflite is damaged")
