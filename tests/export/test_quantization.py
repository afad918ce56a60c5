"""What each TFLite quantization stores and computes, read from the flatbuffer
(every subgraph, the decoding loop's body included): int8 keeps one copy of
the tied embedding, full_int8 computes the matrix products in int8 and falls
back to float exactly where `export/tflite.py` says it does."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tfformer.export import cli
from tfformer.export.flatbuffer import (
    constant_buffers,
    ops,
    read_model,
    signature_types,
)
from tfformer.export.tasks.translation import EXPORTER
from tfformer.export.tflite import (
    PER_CHANNEL_SWITCH,
    QUANTIZATIONS,
    convert,
    export_tflite,
)

from .conftest import SENTENCES

# The ops of a full_int8 translator that read or write a float32 tensor, as
# the `export/tflite.py` docstring lists them. If a TensorFlow upgrade
# quantizes more of them, update the docstring with this set.
FULL_INT8_FLOAT_OPS = {
    "WHILE",  # the key/value caches and log-probabilities it carries
    "DYNAMIC_UPDATE_SLICE",  # the cache write
    "CAST",  # the step's position; a loop flag
    "SIN",
    "COS",
    "SELECT_V2",
    "QUANTIZE",  # the boundaries of the float islands
    "DEQUANTIZE",
}


def exported_model(run_dir, out, quantize, **kwargs):
    path = export_tflite(
        run_dir, str(out), quantize=quantize, progress=lambda *_: None, **kwargs
    )
    with open(path, "rb") as f:
        return read_model(f.read())


@pytest.fixture(scope="module")
def int8_model(run_dir, tmp_path_factory):
    return exported_model(run_dir, tmp_path_factory.mktemp("int8"), "int8")


@pytest.fixture(scope="module")
def full_int8_model(run_dir, tmp_path_factory):
    return exported_model(
        run_dir,
        tmp_path_factory.mktemp("full_int8"),
        "full_int8",
        representative_sentences=SENTENCES * 5,
    )


def test_int8_stores_each_weight_matrix_once(run_dir, int8_model):
    model = EXPORTER.read(run_dir).model
    tied = model.backbone.decoder_embedding
    assert tied.tie_weights  # the output projection reads this embedding
    embedding_shape = tuple(tied.token_embeddings.shape)
    stored = constant_buffers(int8_model, "INT8").values()
    # The GATHER and the output projection share one int8 buffer (per-channel
    # scales would give the projection a second copy, transposed or not).
    copies = [shape for shape, _ in stored if sorted(shape) == sorted(embedding_shape)]
    assert copies == [embedding_shape], copies
    # Every kernel and embedding of the Keras model is stored once, in int8
    # (kernels transposed: compare element counts).
    matrices = [int(np.prod(w.shape)) for w in model.weights if len(w.shape) == 2]
    assert sorted(size for _, size in stored) == sorted(matrices)


def test_missing_per_channel_switch_raises_naming_the_version(tmp_path, monkeypatch):
    module = tf.Module()
    module.double = tf.function(
        lambda x: {"y": 2.0 * x}, input_signature=[tf.TensorSpec([1, 4], tf.float32)]
    )
    tf.saved_model.save(module, str(tmp_path), signatures=module.double)
    real = tf.lite.TFLiteConverter.from_saved_model

    def renamed_switch(saved_model_dir, signature_keys=None):
        # What a TensorFlow that renamed the private attribute looks like.
        converter = real(saved_model_dir, signature_keys=signature_keys)
        delattr(converter, PER_CHANNEL_SWITCH)
        return converter

    monkeypatch.setattr(tf.lite.TFLiteConverter, "from_saved_model", renamed_switch)
    message = rf"{PER_CHANNEL_SWITCH}.*TensorFlow {re.escape(tf.__version__)}"
    with pytest.raises(RuntimeError, match=message):
        convert(str(tmp_path), "int8")


def test_full_int8_is_int8_matmuls_with_the_documented_float_fallback(
    full_int8_model,
):
    listed = ops(full_int8_model)
    # int32 token ids in and out: no float tensor crosses the signature.
    assert signature_types(full_int8_model) == (("INT32",), ("INT32",))
    # "int8 weights and activations": every matrix product, in the loop body
    # too, reads and writes int8 (int32 only as the bias).
    matmuls = [op for op in listed if op.name in ("FULLY_CONNECTED", "BATCH_MATMUL")]
    assert {op.subgraph for op in matmuls} == {"main", "while_body"}
    for op in matmuls:
        assert op.inputs[:2] == ("INT8", "INT8") and op.outputs == ("INT8",), op
        assert set(op.inputs[2:]) <= {"INT32"}, op
    # "with float fallback", not integer-only: float32 tensors appear in
    # exactly the ops the module docstring names.
    floats = {op.name for op in listed if "FLOAT32" in op.inputs + op.outputs}
    assert floats == FULL_INT8_FLOAT_OPS


def test_command_line_offers_every_quantization():
    help_text = " ".join(cli.parser().format_help().split())
    for quantize in QUANTIZATIONS:
        assert quantize in help_text
    assert "full_int8 (int8 weights and activations with float fallback" in help_text
    assert "integer_only (int8 ops only, int8 output" in help_text


@pytest.mark.integration
def test_integer_only_refuses_the_translator_naming_its_float_ops(run_dir, tmp_path):
    """The translator's decoding loop keeps float ops (the docstring's list):
    asked for an integer-only model, the export names them and writes
    nothing, instead of shipping float ops under the integer-only name."""
    out = tmp_path / "integer_only"
    with pytest.raises(ValueError, match=r"left these ops in float: .*WHILE x1"):
        export_tflite(
            run_dir,
            str(out),
            quantize="integer_only",
            representative_sentences=SENTENCES * 5,
            progress=lambda *_: None,
        )
    assert not out.exists()
