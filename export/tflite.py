"""TFLite / LiteRT export for any task with an exporter: builtin ops only,
float32 or quantized.

The task's exporter (`tfformer.export.tasks`) writes the SavedModel the
converter reads and the files an app ships beside the model; this module
converts, quantizes and writes the `.tflite` atomically (a failed conversion
leaves no partial model).
"""

import os
import tempfile
import time

import tensorflow as tf

from tfformer.export.tasks import get_exporter
from tfformer.rundir.files import atomic_write_bytes
from tfformer.rundir.run import RunDirectory

QUANTIZATIONS = ("none", "float16", "int8", "full_int8")


def tflite_file_name(quantize):
    return "model.tflite" if quantize == "none" else f"model_{quantize}.tflite"


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
        converter._experimental_disable_per_channel = True
    elif quantize == "full_int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([x] for x in calibration)
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
            tf.lite.OpsSet.TFLITE_BUILTINS,
        ]
    return converter.convert()


def export_tflite(
    run_dir,
    out_dir,
    *,
    quantize="none",
    checkpoint="model.keras",
    representative_sentences=None,
    progress=print,
    **options,
):
    """Converts a training run to `<out_dir>/model*.tflite` plus its files.

    Args:
        run_dir: a `tfformer-train` run directory of an exportable task.
        out_dir: where the model and its files go (created if needed).
        quantize: "none" (float32), "float16", "int8" (dynamic range) or
            "full_int8" (weights and activations, calibrated on
            `representative_sentences`).
        representative_sentences: raw inputs, needed by "full_int8".
        **options: the task exporter's settings (translation: `max_length`,
            the decoder length; defaults to the training max_length).

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
    run = RunDirectory(run_dir)
    exporter = get_exporter(run.task)
    task_run = exporter.read(run, checkpoint)
    calibration = None
    if quantize == "full_int8":
        calibration = exporter.calibration(task_run, representative_sentences)
    began = time.perf_counter()
    progress(f"Converting {run.path} to TFLite ({quantize})...")
    with tempfile.TemporaryDirectory() as staging:
        saved = os.path.join(staging, "saved_model")
        exporter.tflite_source(task_run, saved, **options)
        flatbuffer = convert(saved, quantize, calibration)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, tflite_file_name(quantize))
    atomic_write_bytes(path, flatbuffer)
    exporter.device_files(task_run, out_dir, **options)
    progress(
        f"Wrote {path} ({len(flatbuffer) / 1e6:.2f} MB) in "
        f"{time.perf_counter() - began:.1f} s."
    )
    return path
