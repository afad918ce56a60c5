"""TFLite / LiteRT export for any task with an exporter: builtin ops only,
float32 or quantized.

The task's exporter (`tfformer.export.tasks`) writes the SavedModel the
converter reads and the files an app ships beside the model; this module
converts, quantizes and writes the `.tflite` atomically (a failed conversion
leaves no partial model).

For the translator, `full_int8` is int8 weights and activations *with float
fallback*, not an integer-only model (NPUs and the Edge TPU that need one
cannot run it whole).
The matrix products (FULLY_CONNECTED, BATCH_MATMUL), softmax and most of the
layer-norm arithmetic run in int8, calibrated on real sources; TF 2.21's
quantizer leaves in float32, between QUANTIZE / DEQUANTIZE ops:
- the WHILE loop's carried state, the attention key/value caches and the
  last step's log-probabilities, and the DYNAMIC_UPDATE_SLICE writing the
  cache (loop-carried tensors are not quantized);
- the step's sinusoidal position (CAST, SIN, COS, SELECT_V2) and a CAST of a
  loop flag.
(The greedy choice was a TOPK_V2 on dequantized float log-probabilities;
since it became two reductions (`tfformer.decoding.sampling.greedy_choice`)
it runs in int8 on the same int8 log-softmax, ties to the lowest id.)
(Layer norm's NEG was on this list until tfformer's `LayerNormalization`
subtracted the mean instead. A model saved before keeps it in the norms of
its functional graph, such as the embedding and final norms, which load as
Keras's layer; the norms inside its blocks are rebuilt as tfformer's.)
Asking for integer-only ops (`TFLITE_BUILTINS_INT8` alone) converts to the
same bytes: the quantizer keeps in float what it cannot quantize, so
`quantize="integer_only"` reads the converted model and refuses it, naming
those ops. The text classifier converts integer-only (int32 ids in, int8
probabilities out, every op int8/int32). The
older quantizer (`experimental_new_quantizer=False`) refuses the graph instead:
"Quantization not yet supported for op: 'WHILE'" (and 'NEG', 'SELECT_V2',
'DYNAMIC_UPDATE_SLICE', 'TOPK_V2', 'SIN', 'COS', 'CAST', the bool ops; the
graph then still had TOPK_V2).
`inference_input_type` does not apply: the model's input and output are int32
token ids already. An integer-only translator would take changes to the
traced graph itself (each op above), not a converter option.
"""

import os
import tempfile
import time

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.export import runtimes
from tfformer.export.exporter import CALIBRATED
from tfformer.export.flatbuffer import float_ops
from tfformer.export.quality import QualityGate, forget
from tfformer.export.tasks import get_exporter
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import atomic_write_bytes

QUANTIZATIONS = ("none", "float16", "int8", "full_int8", "integer_only", "int4")
# Private in TF 2.21; `disable_per_channel` checks that it is still there.
PER_CHANNEL_SWITCH = "_experimental_disable_per_channel"


def tflite_file_name(quantize, name="model"):
    return f"{name}.tflite" if quantize == "none" else f"{name}_{quantize}.tflite"


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


def convert(
    saved_model_dir,
    quantize,
    calibration=None,
    signature_keys=None,
    input_type=None,
    per_channel_weights=False,
):
    """TFLite flatbuffer bytes of the SavedModel's `signature_keys` (default:
    its serving signature). `calibration`: full-int8 samples, each a list of
    inputs, or `(signature_key, {name: input})` with several signatures.
    `input_type`: the quantized model's input type (`inference_input_type`,
    e.g. tf.uint8 for camera pixels); calibrated quantizations only.
    `per_channel_weights`: dynamic int8 keeps the converter's per-channel
    weight scales (else per-tensor, for the text models' tied embedding)."""
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir,
        signature_keys=None if signature_keys is None else list(signature_keys),
    )
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
        # A model without a tied embedding (the ViT) keeps per-channel.
        if not per_channel_weights:
            disable_per_channel(converter)
    elif quantize in CALIBRATED:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        keys = set(signature_keys or ["serving_default"])
        # Samples of several models' signatures: each model takes its own.
        samples = [x for x in calibration if not isinstance(x, tuple) or x[0] in keys]
        converter.representative_dataset = lambda: (
            x if isinstance(x, tuple) else [x] for x in samples
        )
        # TFLITE_BUILTINS_INT8 alone gives the same bytes with TF 2.21 (the
        # module docstring says which ops stay float); listing TFLITE_BUILTINS
        # says that float fallback is part of the contract.
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
            tf.lite.OpsSet.TFLITE_BUILTINS,
        ]
        if quantize == "integer_only":
            # Int8 ops only, and an int8 output (the app dequantizes it with
            # the output's scale and zero point); integer inputs (token ids)
            # stay as they are. The converter keeps in float what it cannot
            # quantize without saying so: `check_integer_only` reads the result.
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            converter.inference_output_type = tf.int8
        if input_type is not None:
            converter.inference_input_type = input_type
    elif input_type is not None:
        raise InputError(
            f"input_type applies to {CALIBRATED}. Received: quantize={quantize!r}"
        )
    flatbuffer = converter.convert()
    if quantize == "integer_only":
        check_integer_only(flatbuffer)
    return flatbuffer


def check_integer_only(flatbuffer):
    """Raises ValueError naming the ops that read or write a float tensor.

    TF 2.21's converter, asked for integer-only int8 ops, still keeps in float
    the ops its quantizer does not handle (between QUANTIZE and DEQUANTIZE).
    Such a model would not run whole on an integer-only accelerator, so it
    is refused instead of written under the integer-only name.
    """
    floats = float_ops(flatbuffer)
    if floats:
        listed = ", ".join(f"{name} x{count}" for name, count in sorted(floats.items()))
        raise InputError(
            "quantize='integer_only': TensorFlow "
            f"{tf.__version__}'s quantizer left these ops in float: {listed}. "
            "This model's graph cannot run integer-only; export it with "
            "quantize='full_int8' (int8 with float fallback) instead."
        )


def export_tflite(
    run_dir,
    out_dir,
    *,
    quantize="none",
    checkpoint="model.keras",
    representative_sentences=None,
    progress=print,
    int4_block="32",
    max_quality_loss=None,
    force=False,
    quality_data=None,
    **options,
):
    """Converts a training run to `<out_dir>/model*.tflite` plus its files.

    Args:
        run_dir: a `tfformer-train` run directory of an exportable task.
        out_dir: where the model and its files go (created if needed).
        quantize: "none" (float32), "float16", "int8" (dynamic range),
            "full_int8" (int8 weights and activations with float fallback,
            calibrated on `representative_sentences`; not integer-only, see
            the module docstring) or "integer_only" (int8 ops only and an
            int8 output, calibrated the same way; refused with the float ops
            named when the graph keeps any: the text classifier converts,
            the translator and the text generator do not).
        representative_sentences: raw inputs, needed by "full_int8" and
            "integer_only".
        int4_block: "int4": weights per int4 scale ("32", "64", "128",
            "256" or "channel"); see `tfformer.export.int4`.
        max_quality_loss, force, quality_data: the quality gate every
            quantized model passes (`tfformer.export.quality`): the most it
            may lose against float32 in the task's unit (None: the task's
            default), write it even when it loses more or cannot be
            measured, and the held-out file to measure on (default: the
            run's held-out examples).
        **options: the task exporter's settings (translation: `max_length`,
            the decoder length; defaults to the training max_length).

    The exporter (`tfformer.export.exporter.Exporter`) writes the
    SavedModels to convert and lists them as `TFLiteSource`s; the graph may
    differ by quantization (the image classifier takes uint8 pixels through
    a cast in float models, through the converter's quantized input in
    calibrated ones).

    Returns:
        The path of the (first) `.tflite` file. A task may write more than one
        (the text generator: `model*.tflite` with `prefill`/`decode` and
        `model_loop*.tflite`). Every model is converted before any is written,
        each to a temporary name and renamed, so a failed conversion leaves
        no partial model.
    """
    if quantize not in QUANTIZATIONS:
        raise InputError(
            f"quantize must be one of {QUANTIZATIONS}. Received: quantize={quantize!r}"
        )
    run = RunDirectory(run_dir)
    exporter = get_exporter(run.task)
    exporter.check_tflite_options(quantize, **options)
    if quantize in CALIBRATED and representative_sentences is None:
        raise InputError(
            f"quantize={quantize!r} needs representative_sentences "
            "(--representative-data FILE: raw inputs, one per line: source "
            "sentences, text, or image file paths)."
        )
    gated = QualityGate.of(
        exporter, run, quantize, int4_block, max_quality_loss, force, quality_data
    )
    task_run = exporter.read(run, checkpoint)
    calibration = None
    if quantize in CALIBRATED:
        calibration = exporter.calibration(
            task_run, list(representative_sentences), quantize, **options
        )
    began = time.perf_counter()
    progress(f"Converting {run.path} to TFLite ({quantize})...")
    models = []
    with tempfile.TemporaryDirectory() as staging:
        sources = exporter.tflite_sources(task_run, staging, quantize, **options)
        for index, source in enumerate(sources):
            flatbuffer = convert(
                source.saved_model_dir,
                "none" if quantize == "int4" else quantize,
                calibration,
                source.signature_keys,
                input_type=source.input_type,
                per_channel_weights=source.per_channel_weights,
            )
            if gated:
                flatbuffer = gated.take(
                    index,
                    flatbuffer,
                    staging,
                    lambda: float32_model(exporter, task_run, staging, options),
                )
            models.append((source.name, flatbuffer))
        if gated:
            gated.measure(task_run, options, progress)
    os.makedirs(out_dir, exist_ok=True)
    names = [tflite_file_name(quantize, name) for name, _ in models]
    runtimes.forget_digests(out_dir, names)
    forget(out_dir, names)  # figures of an earlier model of these names
    paths = [os.path.join(out_dir, name) for name in names]
    for path, (_, flatbuffer) in zip(paths, models, strict=True):
        atomic_write_bytes(path, flatbuffer)
    exporter.device_files(task_run, out_dir, **options)
    runtimes.record_digests(out_dir, paths)
    if gated:
        gated.record(out_dir, names[0])
    for path, (_, flatbuffer) in zip(paths, models, strict=True):
        progress(f"Wrote {path} ({len(flatbuffer) / 1e6:.2f} MB).")
    progress(f"Converted in {time.perf_counter() - began:.1f} s.")
    return paths[0]


def float32_model(exporter, task_run, staging, options):
    """The main model of the run in float32 (the gate's baseline: a
    calibrated image model's graph differs from the float one)."""
    folder = os.path.join(staging, "float32")
    source = exporter.tflite_sources(task_run, folder, "none", **options)[0]
    return convert(source.saved_model_dir, "none", None, source.signature_keys)
