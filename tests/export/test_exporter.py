"""The exporter protocol (`tfformer.export.exporter`): the base class's
defaults, the one reader of a run directory, the registry, and
`TFLiteSource`'s settings reaching the converter (read back from the
converted model)."""

import argparse
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from tfformer.export import cli, tflite
from tfformer.export.exporter import Exporter, ExportRun, TFLiteSource
from tfformer.export.tasks import EXPORTABLE_TASKS, get_exporter
from tfformer.export.tasks.translation import TranslationExporter, TranslationRun
from tfformer.runs.directory import RunDirectory


class Bare(Exporter):
    """An exporter that fills in nothing."""

    task = "bare"


def test_the_defaults_add_nothing_and_write_nothing(tmp_path):
    bare = Bare()
    parser = cli.parser()
    flags = [a.option_strings for a in parser._actions]
    bare.add_arguments(parser)
    assert [a.option_strings for a in parser._actions] == flags
    args = argparse.Namespace(quantize="none")
    assert bare.saved_model_options(args) == {}
    assert bare.tflite_options(args) == {}
    assert bare.check_saved_model_options(search="any") is None
    for quantize in ("none", "float16", "int8"):
        assert bare.check_tflite_options(quantize) is None
    bare.device_files(None, str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    for method, args in (
        (bare.task_run, (None, None, {})),
        (bare.saved_model, (None, str(tmp_path))),
        (bare.tflite_sources, (None, str(tmp_path), "none")),
    ):
        with pytest.raises(
            NotImplementedError, match=f"Bare must define {method.__name__}"
        ):
            method(*args)


def test_model_names_the_checkpoint_as_in_the_other_commands(capsys):
    base = ["--checkpoint", "r", "--format", "tflite", "--out", "o"]
    assert cli.parser().parse_args(base).checkpoint_file == "model.keras"
    for flag in ("--model", "--checkpoint-file"):  # the older name still works
        args = cli.parser().parse_args([*base, flag, "best.keras"])
        assert args.checkpoint_file == "best.keras"
    with pytest.raises(SystemExit) as refused:
        cli.parser().parse_args([*base, "--model", "last.keras"])
    assert refused.value.code == 2
    assert "invalid choice: 'last.keras'" in capsys.readouterr().err


@pytest.mark.parametrize("quantize", ["full_int8", "integer_only"])
def test_no_calibration_refuses_the_calibrated_quantizations_by_name(quantize):
    bare = Bare()
    assert not bare.calibrates
    message = (
        f"quantize='{quantize}' calibrates .* the bare exporter has no calibration"
    )
    with pytest.raises(ValueError, match=message):
        bare.check_tflite_options(quantize)
    with pytest.raises(ValueError, match=message):
        bare.calibration(None, ["text"], quantize)


def test_every_task_has_a_registered_exporter_with_a_frozen_run():
    for task in EXPORTABLE_TASKS:
        exporter = get_exporter(task)
        assert isinstance(exporter, Exporter) and exporter.task == task
        assert issubclass(exporter.run_type, ExportRun)
        assert exporter.run_type.__dataclass_params__.frozen, task
        assert exporter.calibrates, task  # every task calibrates today
    with pytest.raises(ValueError, match="no exporter for task 'masked_lm'"):
        get_exporter("masked_lm")


def test_read_checks_the_task_and_the_tokenizers(run_dir):
    run = RunDirectory(run_dir)
    with pytest.raises(ValueError, match="holds a 'translation' run, not a causal_lm"):
        get_exporter("causal_lm").read(run_dir)

    class BytesOnly(TranslationExporter):
        tokenizer_kinds = ("byte",)

    with pytest.raises(
        ValueError, match=r"needs a byte source tokenizer\. Received: 'wordpiece'"
    ):
        BytesOnly().read(run)
    read = get_exporter("translation").read(run)
    assert isinstance(read, TranslationRun)
    # The typed manifest's settings and the model's sizes.
    assert read.directory == run_dir
    assert read.source_length == read.max_length == run.manifest.max_length == 32
    assert read.source == run.tokenizer("source")
    assert read.target == run.tokenizer("target")
    assert read.vocabulary_size == read.model.backbone.decoder_vocabulary_size
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.max_length = 8


def test_a_tflite_source_is_a_frozen_checked_value():
    source = TFLiteSource("model", "/staging/model")
    assert (source.signature_keys, source.input_type) == (None, None)
    assert source.per_channel_weights is False
    listed = TFLiteSource("model", "/s", signature_keys=["decode", "prefill"])
    assert listed.signature_keys == ("decode", "prefill")
    with pytest.raises(dataclasses.FrozenInstanceError):
        source.name = "other"
    with pytest.raises(ValueError, match="name must be a non-empty str"):
        TFLiteSource("", "/s")
    with pytest.raises(ValueError, match="Received: signature_keys='decode'"):
        TFLiteSource("model", "/s", signature_keys="decode")


class NoCalibration(TranslationExporter):
    """The translator's exporter, less its calibration."""

    calibration = Exporter.calibration


def test_a_task_without_calibration_refuses_before_reading(
    run_dir, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(tflite, "get_exporter", lambda task: NoCalibration())
    out = tmp_path / "out"
    for sentences in (None, ["nine"]):
        with pytest.raises(ValueError, match="quantize='full_int8' calibrates"):
            tflite.export_tflite(
                run_dir,
                str(out),
                quantize="full_int8",
                representative_sentences=sentences,
            )
    data = tmp_path / "data.txt"
    data.write_text("nine\n", encoding="utf-8")
    args = ["--checkpoint", run_dir, "--format", "tflite", "--out", str(out)]
    assert (
        cli.main(
            [*args, "--quantize", "integer_only", "--representative-data", str(data)]
        )
        == 2
    )
    assert "quantize='integer_only' calibrates" in capsys.readouterr().err
    assert not out.exists()


# -- TFLiteSource's settings, read back from the converted model -----------------

# Dynamic int8 quantizes weights of 1,024 elements or more: 32 x 64.
DENSE = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64)])


class DenseExporter(Exporter):
    """One dense layer, exported with the given `TFLiteSource` settings."""

    task = "translation"  # reads the tiny run, exports its own model

    def __init__(self, **settings):
        self.settings = settings

    def task_run(self, run, model, tokenizers):
        return ExportRun(directory=run.path, model=DENSE)

    def tflite_sources(self, run, staging, quantize):
        archive = keras.export.ExportArchive()
        archive.track(run.model)
        archive.add_endpoint(
            "serving_default",
            lambda x: {"y": run.model(x)},
            [tf.TensorSpec([1, 32], tf.float32, name="x")],
        )
        archive.write_out(f"{staging}/dense", verbose=False)
        return [TFLiteSource("dense", f"{staging}/dense", **self.settings)]

    def calibration(self, run, inputs, quantize):
        rng = np.random.default_rng(0)
        return [rng.uniform(0, 255, (1, 32)).astype(np.float32) for _ in inputs]


def export_dense(run_dir, out, monkeypatch, quantize, **settings):
    """The converted dense model's interpreter."""
    monkeypatch.setattr(tflite, "get_exporter", lambda task: DenseExporter(**settings))
    path = tflite.export_tflite(
        run_dir,
        str(out),
        quantize=quantize,
        representative_sentences=["a"] * 4,
        progress=lambda *_: None,
    )
    assert path == f"{out}/dense_{quantize}.tflite"
    return Interpreter(model_path=path)


@pytest.mark.parametrize("per_channel, scales", [(False, 1), (True, 64)])
def test_per_channel_weights_reach_the_converter(
    run_dir, tmp_path, monkeypatch, per_channel, scales
):
    interpreter = export_dense(
        run_dir, tmp_path, monkeypatch, "int8", per_channel_weights=per_channel
    )
    (kernel,) = [t for t in interpreter.get_tensor_details() if t["dtype"] == np.int8]
    assert tuple(kernel["shape"]) == (64, 32)
    # One scale for the tensor, or one per output channel.
    assert len(kernel["quantization_parameters"]["scales"]) == scales


@pytest.mark.parametrize(
    "input_type, dtype", [(None, np.float32), (tf.uint8, np.uint8)]
)
def test_the_input_type_reaches_the_converter(
    run_dir, tmp_path, monkeypatch, input_type, dtype
):
    interpreter = export_dense(
        run_dir, tmp_path, monkeypatch, "full_int8", input_type=input_type
    )
    (x,) = interpreter.get_input_details()
    assert x["dtype"] == dtype
