"""Export of image-classification runs: the SavedModel's `classify` on image
bytes against the Keras model, TensorFlow alone, fuzzed with 50 batches of 20
to 24 inputs (1,000 batches under TFFORMER_FUZZ=full);
the TFLite uint8-input classifier (float32 = Keras, quantized variants,
integer-only) and its reference runtime."""

import io
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
from tfformer.export.tflite import export_tflite
from tfformer.preprocessing.images import decode_pixels
from tfformer.training.config import load_config
from tfformer.training.trainer import train

from ..training.test_image_classification import (
    COLOURS,
    TINY_TRAINING,
    colour_images,
)
from ..training.test_image_data import huge_png

SIZE = 16


def trained_export(root, model_overrides):
    """(run dir, loaded run, SavedModel path, loaded SavedModel, test files)."""
    colour_images(root / "data", np.random.default_rng(3))
    config = load_config(
        overrides=[
            "task=image_classification",
            f"data.image_dir={root / 'data'}",
            f"data.image_size={SIZE}",
            *model_overrides,
            *TINY_TRAINING,
            f"train.output_dir={root / 'run'}",
        ]
    )
    train(config, progress=lambda *_: None)
    run_dir = str(root / "run")
    path = export_saved_model(run_dir, str(root / "serving"), progress=lambda *_: None)
    loaded = tfformer.load(run_dir)
    files = sorted(
        str(root / "data/test" / c / f)
        for c in COLOURS
        for f in os.listdir(root / "data/test" / c)
    )
    return run_dir, loaded, path, tf.saved_model.load(path), files


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A ViT run and its SavedModel (`trained_export`)."""
    return trained_export(
        tmp_path_factory.mktemp("image_export"),
        [
            "model.patch_size=4",
            "model.num_layers=2",
            "model.hidden_dim=32",
            "model.num_heads=2",
            "model.intermediate_dim=64",
        ],
    )


@pytest.fixture(scope="module")
def cct_case(tmp_path_factory):
    """A CCT run (convolution tokenizer, attention pooling) and its
    SavedModel."""
    return trained_export(
        tmp_path_factory.mktemp("cct_export"),
        [
            "model.preset=cct_4_3x2",
            "model.tokenizer_channels=8",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.intermediate_dim=16",
        ],
    )


def model_case(model):
    """The fixture of a parametrized test's model: "vit" or "cct"."""
    return {"vit": "case", "cct": "cct_case"}[model]


# One traced call per model: eager Keras calls took 40 ms each, 21 s of the
# fuzz test's 1,000 examples (its count under TFFORMER_FUZZ=full).
_INFERENCE = {}


def keras_probabilities(loaded, pixels):
    model = loaded.model
    if id(model) not in _INFERENCE:
        _INFERENCE.clear()
        _INFERENCE[id(model)] = tf.function(lambda x: model(x, training=False))
    logits = _INFERENCE[id(model)](tf.constant(np.asarray(pixels, np.float32)))
    return tf.nn.softmax(logits).numpy()


def file_pixels(files):
    return np.stack([decode_pixels(tf.io.read_file(f), SIZE).numpy() for f in files])


@pytest.mark.parametrize("model", ["vit", "cct"])
def test_classify_equals_keras_on_every_test_image(request, model):
    _, loaded, _, served, files = request.getfixturevalue(model_case(model))
    data = [open(f, "rb").read() for f in files]
    out = served.signatures["classify"](image_bytes=tf.constant(data))
    expected = keras_probabilities(loaded, file_pixels(files))
    np.testing.assert_allclose(out["probabilities"], expected, atol=1e-5)
    np.testing.assert_array_equal(out["label_id"], expected.argmax(-1))
    assert out["label"].numpy().astype(str).tolist() == [
        COLOURS[i] for i in expected.argmax(-1)
    ]
    assert out["label_names"].shape == (len(files), 3)
    # The class is the image's folder on all but a few images.
    truth = [COLOURS.index(f.split(os.sep)[-2]) for f in files]
    assert np.mean(expected.argmax(-1) == truth) > 0.9
    pixels = served.signatures["classify_pixels"](
        pixels=tf.constant(file_pixels(files))
    )
    np.testing.assert_allclose(pixels["probabilities"], expected, atol=1e-5)


@pytest.mark.integration
def test_loads_in_a_process_that_imports_only_tensorflow(case):
    _, _, path, _, files = case
    script = f"""
import sys
sys.modules["keras"] = None  # any import of Keras fails
import tensorflow as tf
model = tf.saved_model.load({path!r})
data = open({files[0]!r}, "rb").read()
out = model.signatures["classify"](image_bytes=tf.constant([data, data]))
assert out["probabilities"].shape == (2, 3), out
leaked = [m for m in ("tfformer", "training", "export") if m in sys.modules]
print("LEAKED", leaked)
"""
    done = run_python(script)
    assert "LEAKED []" in done.stdout, done.stdout


def test_non_images_are_refused_naming_their_index(case):
    served = case[3]
    good = open(case[4][0], "rb").read()
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"image_bytes\[1\] is not a JPEG, PNG"
    ):
        served.signatures["classify"](image_bytes=tf.constant([good, b"hello"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"declares.*more than"):
        served.signatures["classify"](
            image_bytes=tf.constant([huge_png(60_000, 60_000)])
        )
    # An empty request is an empty answer.
    out = served.signatures["classify"](image_bytes=tf.constant([], tf.string))
    assert out["probabilities"].shape == (0, 3) and out["label"].shape == (0,)


def encoded(pixels, kind):
    pixels = np.asarray(pixels, np.uint8)
    if kind == "jpeg":
        return tf.io.encode_jpeg(
            pixels[..., :3] if pixels.shape[-1] == 4 else pixels
        ).numpy()
    if kind == "png":
        return tf.io.encode_png(pixels).numpy()
    from PIL import Image

    buffer = io.BytesIO()
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[pixels.shape[-1]]
    image = Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode)
    image.save(buffer, format={"gif": "GIF", "bmp": "BMP"}[kind])
    return buffer.getvalue()


@st.composite
def image_inputs(draw):
    """Valid images of any size, channel count and format; truncated or
    corrupted ones; and random bytes."""
    kind = draw(st.sampled_from(["jpeg", "png", "gif", "bmp", "noise"]))
    if kind == "noise":
        return draw(st.binary(max_size=200))
    height, width = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    channels = draw(st.sampled_from([1, 3, 4]))
    seed = draw(st.integers(0, 2**32 - 1))
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, channels))
    if kind == "gif" and channels == 4:
        channels, pixels = 3, pixels[..., :3]
    data = encoded(pixels, kind)
    damage = draw(st.sampled_from(["none", "none", "truncate", "flip"]))
    if damage == "truncate":
        data = data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    elif damage == "flip":
        position = draw(st.integers(0, len(data) - 1))
        data = data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]
    return data


def test_an_empty_batch_classifies_to_nothing(case):
    _, loaded, _, served, _ = case
    out = served.signatures["classify"](image_bytes=tf.constant([], tf.string))
    assert out["probabilities"].shape == (0, len(loaded.labels))


@pytest.mark.integration
@fuzz_settings(1000)
@given(st.lists(image_inputs(), **BATCH))
def test_no_input_crashes_classify(case, batch):
    """Any bytes, 20 to 24 to a call: probabilities equal to Keras's on the
    decoded images, or an InvalidArgumentError exactly when one of them is
    not an image training decodes; never a crash. The decodable ones of a
    refused batch are then classified on their own."""
    _, loaded, _, served, _ = case
    pixels = []
    for data in batch:
        try:
            pixels.append(decode_pixels(tf.constant(data), SIZE).numpy())
        except tf.errors.InvalidArgumentError:
            pixels.append(None)
    good = [data for data, p in zip(batch, pixels, strict=True) if p is not None]
    if len(good) < len(batch):
        with pytest.raises(tf.errors.InvalidArgumentError):
            served.signatures["classify"](image_bytes=tf.constant(batch))
    if good:
        # An InvalidArgumentError here: the server refused an image that
        # training decodes.
        out = served.signatures["classify"](image_bytes=tf.constant(good))
        decoded = np.stack([p for p in pixels if p is not None])
        np.testing.assert_allclose(
            out["probabilities"], keras_probabilities(loaded, decoded), atol=1e-5
        )


# -- TFLite --------------------------------------------------------------------


def runtime(out, path):
    sys.path.insert(0, out)
    try:
        import classify_image  # the shipped classify_image.py

        return classify_image.ImageClassifier(path)
    finally:
        sys.path.remove(out)


@pytest.mark.parametrize("model", ["vit", "cct"])
def test_tflite_float32_equals_keras_on_every_test_image(request, model, tmp_path):
    run_dir, loaded, _, _, files = request.getfixturevalue(model_case(model))
    out = str(tmp_path / "device")
    path = export_tflite(run_dir, out, progress=lambda *_: None)
    assert sorted(os.listdir(out)) == [
        "SHA256SUMS",
        "classify_image.py",
        "image.json",
        "model.tflite",
        "model_file.py",
    ]
    with open(path, "rb") as f:
        model = read_model(f.read())
    assert signature_types(model) == (("UINT8",), ("FLOAT32",))
    classifier = runtime(out, path)
    pixels = file_pixels(files)
    expected = keras_probabilities(loaded, pixels)
    got = np.stack([classifier.probabilities(p) for p in pixels])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    np.testing.assert_array_equal(got.argmax(-1), expected.argmax(-1))
    done = subprocess.run(
        [sys.executable, os.path.join(out, "classify_image.py"), path, files[0]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = done.stdout.strip().split("\t")
    assert line[0] == files[0] and len(line) == 4
    assert line[1].split()[0] == COLOURS[int(expected[0].argmax())]


@pytest.mark.integration
@pytest.mark.parametrize("model", ["vit", "cct"])
def test_quantized_variants_and_integer_only(request, model, tmp_path):
    run_dir, loaded, _, _, files = request.getfixturevalue(model_case(model))
    pixels = file_pixels(files)
    expected = keras_probabilities(loaded, pixels).argmax(-1)
    calibration = files[::3]
    for quantize in ("float16", "int8", "full_int8", "integer_only"):
        out = str(tmp_path / quantize)
        path = export_tflite(
            run_dir,
            out,
            quantize=quantize,
            representative_sentences=calibration,
            progress=lambda *_: None,
        )
        classifier = runtime(out, path)
        got = np.array([classifier.probabilities(p).argmax() for p in pixels])
        agree = float(np.mean(got == expected))
        least = {"float16": 1.0, "int8": 0.95, "full_int8": 0.9, "integer_only": 0.9}
        assert agree >= least[quantize], (quantize, agree)
        if quantize in ("full_int8", "integer_only"):
            # Camera pixels go in as they are: scale 1, zero point 0.
            details = classifier.runner.get_input_details()["pixels"]
            assert details["quantization"] == (1.0, 0), quantize
        if quantize == "integer_only":
            with open(path, "rb") as f:
                model = read_model(f.read())
            floats = [
                op
                for op in ops(model)
                if set(op.inputs + op.outputs) & set(FLOAT_TYPES)
            ]
            assert not floats, floats
            assert signature_types(model) == (("UINT8",), ("INT8",))
    with pytest.raises(ValueError, match="no such image file"):
        export_tflite(
            run_dir,
            str(tmp_path / "bad"),
            quantize="full_int8",
            representative_sentences=["/nowhere.jpg"],
            progress=lambda *_: None,
        )
    assert not os.path.exists(tmp_path / "bad")


@pytest.mark.parametrize("kind", ["png", "jpeg"])
def test_pillow_pixels_are_within_a_few_levels_of_trainings(tmp_path, kind):
    """`classify_image.py` decodes and resizes with Pillow, training and the
    SavedModel with TensorFlow: a PNG at the model's size is the same, a
    resized one within 1 level; a JPEG within a few (measured: at most 4,
    about 1 on average)."""
    from tfformer.export.runtimes.classify_image import read_pixels

    rng = np.random.default_rng(5)
    differences = []
    for size in (SIZE, 10, 23, 40):
        pixels = rng.integers(0, 110, (size, size, 3))
        pixels[..., 1] += 130
        path = tmp_path / f"{size}.{kind}"
        path.write_bytes(encoded(pixels, kind))
        trained = decode_pixels(tf.io.read_file(str(path)), SIZE).numpy()
        pillow = read_pixels(str(path), SIZE)
        assert pillow.shape == trained.shape == (SIZE, SIZE, 3)
        difference = np.abs(pillow.astype(int) - trained.astype(int))
        if kind == "png" and size == SIZE:
            assert not difference.any()  # decoded alike, nothing resized
        differences.append(difference)
    differences = np.stack(differences)
    if kind == "png":
        assert differences.max() <= 1
    else:
        assert differences.max() <= 6 and differences.mean() <= 1.5


def test_the_quality_gate_measures_accuracy_on_the_held_out_images(case, tmp_path):
    """Training keeps the test images for the gate (`heldout.npz`): they are
    the test folder's pixels. float32's accuracy there is the Keras model's;
    the int8 model's is the written file's. A TSV of image files and labels
    replaces them."""
    from tfformer.export import quality

    run_dir, loaded, _, _, files = case
    with np.load(os.path.join(run_dir, "heldout.npz")) as held:
        pixels, labels = held["pixels"], held["labels"]
    truth = [COLOURS.index(f.split(os.sep)[-2]) for f in files]
    decoded = file_pixels(files)
    assert len(pixels) == len(files) and sorted(labels.tolist()) == sorted(truth)
    # The same images (in the split's order).
    rows = {p.tobytes(): t for p, t in zip(decoded, truth, strict=True)}
    assert [rows[p.tobytes()] for p in pixels] == labels.tolist()
    out = str(tmp_path / "int8")
    path = export_tflite(run_dir, out, quantize="int8", progress=lambda *_: None)
    figures = quality.recorded(out, "model_int8.tflite")
    keras = keras_probabilities(loaded, pixels).argmax(-1)
    assert figures["metric"] == "accuracy" and figures["examples"] == len(files)
    assert figures["float32"] == pytest.approx(100 * np.mean(keras == labels))
    classifier = runtime(out, path)
    written = np.array([classifier.probabilities(p).argmax() for p in pixels])
    assert figures["quantized"] == pytest.approx(100 * np.mean(written == labels))
    assert figures["agreement"] == pytest.approx(np.mean(written == keras))
    listed = tmp_path / "images.tsv"
    listed.write_text(
        "".join(f"{f}\t{COLOURS[t]}\n" for f, t in zip(files[:6], truth, strict=False))
    )
    out = str(tmp_path / "listed")
    export_tflite(
        run_dir, out, quantize="float16", quality_data=str(listed), progress=print
    )
    figures = quality.recorded(out, "model_float16.tflite")
    keras = keras_probabilities(loaded, decoded[:6]).argmax(-1)
    # int4 (ai-edge-quantizer) quantizes the ViT too, measured the same way.
    pytest.importorskip("ai_edge_quantizer")
    from tfformer.export.int4 import int4_tensors

    path = export_tflite(
        run_dir,
        str(tmp_path / "int4"),
        quantize="int4",
        max_quality_loss=100.0,
        progress=lambda *_: None,
    )
    with open(path, "rb") as f:
        assert int4_tensors(f.read()) > 0
    int4_figures = quality.recorded(str(tmp_path / "int4"), "model_int4.tflite")
    written = runtime(str(tmp_path / "int4"), path)
    classes = np.array([written.probabilities(p).argmax() for p in pixels])
    assert int4_figures["quantized"] == pytest.approx(100 * np.mean(classes == labels))
    floats = tmp_path / "floats.npz"
    np.savez(floats, pixels=pixels.astype("float32") / 255, labels=labels)
    with pytest.raises(ValueError, match=r"--quality-data .* must be uint8"):
        export_tflite(
            run_dir, str(tmp_path / "no"), quantize="int8", quality_data=str(floats)
        )
    assert not (tmp_path / "no").exists()
    assert figures["examples"] == 6
    assert figures["float32"] == pytest.approx(100 * np.mean(keras == truth[:6]))
