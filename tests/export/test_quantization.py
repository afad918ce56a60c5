"""What each TFLite quantization stores, read from the flatbuffer (every
subgraph, the decoding loop's body included): int8 keeps one copy of the
tied embedding."""

import re

import numpy as np
import pytest
import tensorflow as tf

from export.run import read_run
from export.tflite import PER_CHANNEL_SWITCH, convert, export_tflite

from .flatbuffer import constant_buffers, read_model


def exported_model(run_dir, out, quantize, **kwargs):
    path = export_tflite(
        run_dir, str(out), quantize=quantize, progress=lambda *_: None, **kwargs
    )
    with open(path, "rb") as f:
        return read_model(f.read())


@pytest.fixture(scope="module")
def int8_model(run_dir, tmp_path_factory):
    return exported_model(run_dir, tmp_path_factory.mktemp("int8"), "int8")


def test_int8_stores_each_weight_matrix_once(run_dir, int8_model):
    model = read_run(run_dir).model
    tied = model.get_layer("decoder_embedding")
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

    def renamed_switch(saved_model_dir):
        # What a TensorFlow that renamed the private attribute looks like.
        converter = real(saved_model_dir)
        delattr(converter, PER_CHANNEL_SWITCH)
        return converter

    monkeypatch.setattr(tf.lite.TFLiteConverter, "from_saved_model", renamed_switch)
    message = rf"{PER_CHANNEL_SWITCH}.*TensorFlow {re.escape(tf.__version__)}"
    with pytest.raises(RuntimeError, match=message):
        convert(str(tmp_path), "int8")
