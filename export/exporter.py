"""The exporter protocol: what `tfformer-export`, `export_saved_model` and
`export_tflite` ask of a task.

An exporter is one subclass of `Exporter` per task, registered by task name
in `tfformer.export.tasks`. It declares its task and the frozen dataclass of
what its export needs from a run (an `ExportRun`), and fills in what
differs from the defaults here:

    export_saved_model(run_dir, out, **options)
        check_saved_model_options(**options)
        read(run, checkpoint)                      -> ExportRun
        saved_model(run, staging, **options)       -> settings for export.json

    export_tflite(run_dir, out, quantize, **options)
        check_tflite_options(quantize, **options)
        read(run, checkpoint)                      -> ExportRun
        calibration(run, inputs, **options)        (calibrated quantizations)
        tflite_sources(run, staging, quantize, **options) -> [TFLiteSource]
        device_files(run, out, **options)          (beside the .tflite)
        quality_samples(run, path), quality(run, float32, quantized, samples)
                                                   (the quality gate)

    tfformer-export: add_arguments(parser), saved_model_options(args),
        tflite_options(args) turn the task's flags into those options.

The defaults: no extra arguments, no options, no calibration (a calibrated
quantization is refused, naming it) and no device files. `read` is the one
reader of a run directory for every task: it checks the task and the
tokenizers and loads the model, and the exporter's `task_run` picks the
fields it needs from the typed manifest.
"""

import dataclasses
from typing import ClassVar

import keras

from tfformer.errors import InputError
from tfformer.runs.directory import RunDirectory

# The quantizations calibrated on representative inputs (`export_tflite`).
CALIBRATED = ("full_int8", "integer_only")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportRun:
    """What every export reads from a run directory; each task's dataclass
    adds its settings (lengths, labels, tokenizers).

    Attributes:
        directory: the run directory's path.
        model: its task model (a `tfformer.models.TaskModel`), loaded.
    """

    directory: str
    model: keras.Model


@dataclasses.dataclass(frozen=True)
class TFLiteSource:
    """One `.tflite` model to convert: a SavedModel written under the
    staging directory, and how to convert it.

    Attributes:
        name: the file name's stem ("model" gives `model.tflite`,
            `model_int8.tflite`, ...).
        saved_model_dir: the SavedModel the converter reads.
        signature_keys: the signatures to convert (None: `serving_default`).
        input_type: a calibrated model's input type (the converter's
            `inference_input_type`, e.g. `tf.uint8` for camera pixels).
        per_channel_weights: dynamic int8 keeps per-channel weight scales
            (else per-tensor, so that a tied embedding is stored once).
    """

    name: str
    saved_model_dir: str
    signature_keys: tuple | None = None
    input_type: object = None
    per_channel_weights: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise InputError(
                f"name must be a non-empty str. Received: name={self.name!r}"
            )
        keys = self.signature_keys
        if keys is not None:
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise InputError(
                    "signature_keys must be a sequence of str or None. Received: "
                    f"signature_keys={keys!r}"
                )
            # Frozen: a list given is kept as a tuple.
            object.__setattr__(self, "signature_keys", tuple(keys))


class Exporter:
    """A task's exporter: the protocol with its defaults.

    Subclasses set `task` and `run_type` and implement `task_run`,
    `saved_model` and `tflite_sources`; the other methods have defaults.
    """

    # The run directories' task name ("translation").
    task: ClassVar[str] = None
    # The frozen `ExportRun` subclass `read` returns.
    run_type: ClassVar[type] = ExportRun
    # The tokenizer kinds the export handles (None: any the run may have).
    tokenizer_kinds: ClassVar[tuple | None] = None
    # What the quality gate measures a quantized model by
    # (`tfformer.export.quality.Metric`); None: its quantized models are
    # written unmeasured.
    quality_metric: ClassVar[object] = None

    # -- the command line --------------------------------------------------------

    def add_arguments(self, parser):
        """Adds the task's flags to `tfformer-export`'s parser (default: none)."""
        del parser

    def saved_model_options(self, args):
        """`export_saved_model`'s options from the parsed flags (default: none)."""
        del args
        return {}

    def tflite_options(self, args):
        """`export_tflite`'s options from the parsed flags (default: none)."""
        del args
        return {}

    # -- checks before anything is read ------------------------------------------

    def check_saved_model_options(self, **options):
        """Raises ValueError naming a bad option, before the model is loaded
        (default: every option is checked where it is used)."""
        del options

    def check_tflite_options(self, quantize, **options):
        """Raises ValueError naming a bad option, before the model is loaded.
        Default: refuses a calibrated quantization when the task has no
        `calibration`."""
        del options
        if quantize in CALIBRATED and not self.calibrates:
            raise self.no_calibration(quantize)

    # -- the run -----------------------------------------------------------------

    def read(self, run, checkpoint="model.keras"):
        """The `run_type` of a finished run of this task.

        Args:
            run: a `RunDirectory` or its path.
            checkpoint: "model.keras" or "best.keras".

        Raises:
            ValueError: not a run directory, another task's run, a missing
                or unsupported tokenizer or a missing checkpoint (named).
        """
        if not isinstance(run, RunDirectory):
            run = RunDirectory(run)
        if run.task != self.task:
            raise InputError(
                f"{run.path} holds a {run.task!r} run, not a {self.task} run."
            )
        tokenizers = {role: run.tokenizer(role) for role in run.manifest.roles}
        for role, spec in tokenizers.items():
            if self.tokenizer_kinds is not None and spec.kind not in (
                self.tokenizer_kinds
            ):
                raise InputError(
                    f"{run.path}: exporting a {self.task} run needs a "
                    f"{' or '.join(self.tokenizer_kinds)} {role} tokenizer. "
                    f"Received: {spec.kind!r}"
                )
        return self.task_run(run, run.load_model(checkpoint), tokenizers)

    def task_run(self, run, model, tokenizers):
        """The `run_type` of `run` (whose task and tokenizers `read` checked).

        Args:
            run: the `RunDirectory`; `run.manifest` is the task's typed
                manifest.
            model: the loaded task model.
            tokenizers: `{role: TokenizerSpec}` of every role of the task.
        """
        raise NotImplementedError(f"{type(self).__name__} must define task_run")

    # -- SavedModel --------------------------------------------------------------

    def saved_model(self, run, path, **options):
        """Writes the serving SavedModel at `path` (no atomicity: the caller
        writes a staging directory); returns the settings `export.json`
        records."""
        raise NotImplementedError(f"{type(self).__name__} must define saved_model")

    # -- LiteRT ------------------------------------------------------------------

    def tflite_sources(self, run, staging, quantize, **options):
        """Writes the SavedModels the converter reads under `staging` (the
        graph may depend on `quantize`); returns a list of `TFLiteSource`,
        the first the main model."""
        raise NotImplementedError(f"{type(self).__name__} must define tflite_sources")

    @property
    def calibrates(self):
        """Whether the task calibrates full-int8 models (it defines
        `calibration`)."""
        return type(self).calibration is not Exporter.calibration

    def calibration(self, run, inputs, quantize, **options):
        """Calibration samples for a calibrated `quantize` from raw inputs
        (one per line of `--representative-data`): each a list of the
        model's inputs, or `(signature_key, {name: input})`.
        Default: refused, naming the quantization."""
        del run, inputs, options
        raise self.no_calibration(quantize)

    def no_calibration(self, quantize):
        return InputError(
            f"quantize={quantize!r} calibrates on representative inputs, and "
            f"the {self.task} exporter has no calibration. Export with "
            "quantize='int8' (dynamic range) or 'float16' instead."
        )

    def device_files(self, run, out_dir, **options):
        """Writes what an app ships beside the `.tflite` (settings, vocabulary,
        the portable runtime) into `out_dir` (default: nothing)."""
        del run, out_dir, options

    # -- the quality gate (`tfformer.export.quality`) ----------------------------

    def quality_samples(self, run, path):
        """(held-out samples, where they come from) to measure a quantized
        model on: the file `path` (None: the run's own held-out examples),
        or (None, why there are none). Raises ValueError naming `path` when
        it is unreadable or malformed."""
        del run, path
        return None, f"the {self.task} exporter has no held-out data"

    def quality(self, run, float32_path, quantized_path, samples):
        """The gate's figures of the model at `quantized_path` against the
        one at `float32_path` (each beside the device files), read through
        the task's reference runtime: {"float32", "quantized": the metric of
        each, "agreement": the share of samples where both answer alike,
        "examples": how many were measured}, plus the task's own."""
        raise NotImplementedError(f"{type(self).__name__} must define quality")
