"""TFLite / LiteRT export: source ids in, generated ids out, the greedy
KV-cached decoding loop inside the model (one WHILE op), builtin ops only.

The output directory is what an app ships:
- `model.tflite` (or `model_<quantize>.tflite`): input `source_ids` int32
  `(1, source_length)`, output `token_ids` int32 `(1, max_length)` (start
  token, the translation, end token, then 0s);
- `source_vocab.txt`, `target_vocab.txt` (WordPiece runs);
- `text.json`: what on-device tokenization needs (lower-casing, the code-point
  class ranges, lengths, reserved ids);
- `tokenizer.py`: a dependency-free Python reference of the on-device
  tokenize / detokenize steps (`export/device_tokenizer.py`), to port.

Inputs are clamped in the graph: ids outside the source vocabulary become
[UNK] (1). The input shape is fixed; the reference tokenizer cuts sources to
`source_length` tokens and pads with 0. Any other shape is refused by the
interpreter with a ValueError, never a crash.

`full_int8` is int8 weights and activations *with float fallback*, not an
integer-only model (NPUs and the Edge TPU that need one cannot run it whole).
The matrix products (FULLY_CONNECTED, BATCH_MATMUL), softmax and most of the
layer-norm arithmetic run in int8, calibrated on real sources; TF 2.21's
quantizer leaves in float32, between QUANTIZE / DEQUANTIZE ops:
- the WHILE loop's carried state, the attention key/value caches and the
  last step's log-probabilities, and the DYNAMIC_UPDATE_SLICE writing the
  cache (loop-carried tensors are not quantized);
- layer norm's NEG;
- the step's sinusoidal position (CAST, SIN, COS, SELECT_V2) and a CAST of a
  loop flag;
- the greedy choice, TOPK_V2 over float log-probabilities.
Asking for integer-only ops (`TFLITE_BUILTINS_INT8` alone) converts to the
same bytes: the quantizer keeps in float what it cannot quantize. The
older quantizer (`experimental_new_quantizer=False`) refuses the graph instead:
"Quantization not yet supported for op: 'WHILE'" (and 'NEG', 'SELECT_V2',
'DYNAMIC_UPDATE_SLICE', 'TOPK_V2', 'SIN', 'COS', 'CAST', the bool ops).
`inference_input_type` does not apply: the model's input and output are int32
token ids already. An integer-only translator would take changes to the
traced graph itself (each op above), not a converter option.
"""

import json
import os
import shutil
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from export.files import write_atomic
from export.run import read_run
from export.text import (
    JOIN_RULES,
    RESERVED_TOKENS,
    SUFFIX,
    CoreBytes,
    CoreWordPiece,
    probe_character_classes,
)
from tfformer.decoding import Generator

QUANTIZATIONS = ("none", "float16", "int8", "full_int8")
# Private in TF 2.21; `disable_per_channel` checks that it is still there.
PER_CHANNEL_SWITCH = "_experimental_disable_per_channel"
REFERENCE = os.path.join(os.path.dirname(__file__), "device_tokenizer.py")


def tflite_file_name(quantize):
    return "model.tflite" if quantize == "none" else f"model_{quantize}.tflite"


def decoding_function(run, max_length=None):
    """`source_ids (1, S) int32 -> {"token_ids": (1, max_length) int32}`."""
    max_length = max_length or run.max_length
    generator = Generator(
        run.model, max_length=max_length, search="greedy", carry_constants=True
    )
    vocabulary = run.source_vocabulary_size

    def decode(source_ids):
        ids = tf.cast(source_ids, tf.int32)
        inside = tf.logical_and(ids >= 0, ids < vocabulary)
        ids = tf.where(inside, ids, tf.ones_like(ids))
        return {"token_ids": generator(ids)["token_ids"]}

    return decode


def representative_ids(sentences, tokenizer, source_length, limit=200):
    """Calibration inputs for full-int8 quantization: `(1, S)` int32 arrays."""
    sentences = [s for s in sentences if s.strip()][:limit]
    if not sentences:
        raise ValueError(
            "representative_sentences is empty; full_int8 calibrates on real "
            "source sentences (for example the training sources)."
        )
    ids = tokenizer.tokenize(tf.constant(sentences))[:, :source_length]
    ids = ids.to_tensor(shape=[None, source_length]).numpy().astype(np.int32)
    return [row[None, :] for row in ids]


def disable_per_channel(converter):
    """Asks `converter` for per-tensor int8 weight scales.

    The switch is a private attribute of the TFLite converter (TF 2.21). Setting
    an attribute Python does not know never fails, so a renamed switch would
    quietly bring back per-channel scales and the tied embedding's second copy:
    this checks that the converter has it first.

    Raises:
        RuntimeError: this TensorFlow's converter has no such attribute.
    """
    if not hasattr(converter, PER_CHANNEL_SWITCH):
        raise RuntimeError(
            f"quantize='int8' needs the TFLite converter's {PER_CHANNEL_SWITCH} "
            f"attribute (per-tensor weight scales, so a tied embedding is stored "
            f"once), and TensorFlow {tf.__version__}'s {type(converter).__name__} "
            f"has none. It was written for TensorFlow 2.21: install that, or "
            f"export with quantize='float16'."
        )
    setattr(converter, PER_CHANNEL_SWITCH, True)


def convert(saved_model_dir, quantize, calibration=None):
    """TFLite flatbuffer bytes of the SavedModel's serving signature."""
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        # Per-tensor weight scales. Per-channel ones give the output
        # projection its own int8 copy of a tied embedding (the GATHER keeps
        # per-tensor), 2.7 MB of 29 MB on Multi30k; per-tensor lets both use
        # one buffer: 26% of float32 instead of 30%, with equal BLEU there.
        disable_per_channel(converter)
    elif quantize == "full_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([x] for x in calibration)
        # TFLITE_BUILTINS_INT8 alone gives the same bytes with TF 2.21 (the
        # module docstring says which ops stay float); listing TFLITE_BUILTINS
        # says that float fallback is part of the contract.
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
            tf.lite.OpsSet.TFLITE_BUILTINS,
        ]
    return converter.convert()


def text_settings(run, max_length, character_classes):
    settings = {
        "tokenizer": run.tokenizer,
        "lower_case": run.lower_case,
        "source_length": run.source_length,
        "max_length": max_length,
        "reserved_tokens": list(RESERVED_TOKENS),
        "suffix": SUFFIX,
        "max_bytes_per_word": 100,
        "join_rules": [list(rule) for rule in JOIN_RULES],
    }
    if run.tokenizer == "wordpiece":
        starts, classes = character_classes
        settings["character_classes"] = {
            "classes": ["word", "space", "punctuation", "dropped"],
            "starts": [int(s) for s in starts],
            "class": [int(c) for c in classes],
        }
    return settings


def export_tflite(
    run_dir,
    out_dir,
    *,
    quantize="none",
    checkpoint="model.keras",
    max_length=None,
    representative_sentences=None,
    progress=print,
):
    """Converts a training run to `<out_dir>/model*.tflite` plus its text files.

    Args:
        run_dir: a `tfformer-train` output directory of a translator.
        out_dir: where the model and its files go (created if needed).
        quantize: "none" (float32), "float16", "int8" (dynamic range) or
            "full_int8" (int8 weights and activations with float fallback,
            calibrated on `representative_sentences`; not integer-only, see
            the module docstring).
        max_length: decoder length; defaults to the training max_length.
        representative_sentences: source sentences, needed by "full_int8".

    Returns:
        The path of the `.tflite` file. It is written to a temporary name and
        renamed, so a failed conversion leaves no partial model.
    """
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"quantize must be one of {QUANTIZATIONS}. Received: quantize={quantize!r}"
        )
    if quantize == "full_int8" and representative_sentences is None:
        raise ValueError(
            "quantize='full_int8' needs representative_sentences "
            "(--representative-data FILE: source sentences, one per line)."
        )
    run = read_run(run_dir, checkpoint)
    max_length = max_length or run.max_length
    classes = probe_character_classes() if run.tokenizer == "wordpiece" else None
    calibration = None
    if quantize == "full_int8":
        tokenizer = (
            CoreWordPiece(
                run.source_vocabulary,
                lower_case=run.lower_case,
                character_classes=classes,
            )
            if run.tokenizer == "wordpiece"
            else CoreBytes()
        )
        calibration = representative_ids(
            list(representative_sentences), tokenizer, run.source_length
        )
    began = time.perf_counter()
    progress(f"Converting {run.directory} to TFLite ({quantize})...")
    with tempfile.TemporaryDirectory() as staging:
        saved = os.path.join(staging, "saved_model")
        archive = keras.export.ExportArchive()
        archive.track(run.model)
        archive.add_endpoint(
            "serving_default",
            decoding_function(run, max_length),
            [tf.TensorSpec([1, run.source_length], tf.int32, name="source_ids")],
        )
        archive.write_out(saved, verbose=False)
        flatbuffer = convert(saved, quantize, calibration)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, tflite_file_name(quantize))
    write_atomic(path, flatbuffer)
    for source in run.files():
        shutil.copyfile(source, os.path.join(out_dir, os.path.basename(source)))
    write_atomic(
        os.path.join(out_dir, "text.json"),
        json.dumps(text_settings(run, max_length, classes), indent=1).encode(),
    )
    shutil.copyfile(REFERENCE, os.path.join(out_dir, "tokenizer.py"))
    progress(
        f"Wrote {path} ({len(flatbuffer) / 1e6:.2f} MB) in "
        f"{time.perf_counter() - began:.1f} s."
    )
    return path


class LiteRTTranslator:
    """Runs an exported `.tflite` with the `ai_edge_litert` Interpreter (the
    runtime devices use), one sentence at a time.

    Args:
        path: the `.tflite` file; `text.json` and the vocabularies are read
            from its directory.
    """

    def __init__(self, path, num_threads=None):
        from ai_edge_litert.interpreter import Interpreter

        if not os.path.isfile(path):
            raise ValueError(f"TFLite model not found. Received: path={path!r}")
        self.interpreter = Interpreter(model_path=path, num_threads=num_threads)
        self.runner = self.interpreter.get_signature_runner()
        self.directory = os.path.dirname(os.path.abspath(path))
        self.source_length = int(
            self.runner.get_input_details()["source_ids"]["shape"][1]
        )

    def translate_ids(self, source_ids):
        """`(S,)` or `(1, S)` int32 source ids -> `(max_length,)` int32 ids."""
        ids = np.asarray(source_ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"source_ids must be integers. Received: {ids.dtype}")
        ids = ids.astype(np.int32).reshape(1, -1)
        if ids.shape[1] != self.source_length:
            raise ValueError(
                f"source_ids must have {self.source_length} ids (cut and pad "
                f"with 0, as DeviceTokenizer.tokenize does). Received: "
                f"{ids.shape[1]}"
            )
        return self.runner(source_ids=ids)["token_ids"][0]
