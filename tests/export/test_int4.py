"""`--quantize int4` of a text generator (Google's ai-edge-quantizer) and its
quality gate: the gate's float32 figure is the Keras model's nats per token
on the same held-out windows; a model that loses more than the threshold is
refused and nothing is written; the figures are recorded; the int4 model is
smaller and decodes in the reference runtime; bad options are named."""

import json
import os

import numpy as np
import pytest

from tfformer.export.tasks.causal_lm import quality
from tfformer.export.tflite import export_tflite

pytest.importorskip("ai_edge_quantizer")


def keras_nats(run_dir, ids, window):
    """Nats per token of the run's Keras model on `ids` in windows of
    `window` tokens (the next token of each, teacher-forced)."""
    from tfformer.export.tasks.causal_lm import EXPORTER

    model = EXPORTER.read(run_dir).model
    nll, count = 0.0, 0
    for start in range(0, len(ids) - 1, window):
        piece = ids[start : start + window + 1]
        logits = np.asarray(model({"token_ids": np.array([piece[:-1]])}))[0]
        logits = logits.astype("float64")
        shifted = logits - logits.max(-1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        nll -= log_p[np.arange(len(piece) - 1), piece[1:]].sum()
        count += len(piece) - 1
    return nll / count


@pytest.fixture(scope="module")
def gated(tiny_gpt_run, tmp_path_factory):
    """The tiny GPT exported as int4 without a threshold: (out, progress)."""
    out = tmp_path_factory.mktemp("int4") / "device"
    said = []
    export_tflite(
        tiny_gpt_run,
        str(out),
        quantize="int4",
        max_quality_loss=10.0,
        progress=said.append,
    )
    return out, said


def test_the_gates_float32_figure_is_the_keras_models(tiny_gpt_run, gated):
    """The figures in quality.json: float32's nats per token on the run's
    held-out tail equal the Keras model's on the same windows (the gate
    reads the TFLite model one `decode` at a time), and the int4 model's are
    its own."""
    from tfformer.runs.directory import RunDirectory

    out, said = gated
    figures = json.loads((out / "quality.json").read_text())["model_int4.tflite"]
    assert figures["block"] == "32" and figures["data"].startswith("the held-out tail")
    assert figures["metric"] == "nats per token" and figures["max_loss"] == 10.0
    text, _ = quality.heldout_text(RunDirectory(tiny_gpt_run))
    ids = [b + 4 for b in text.encode("utf-8")][: quality.QUALITY_TOKENS + 1]
    assert figures["examples"] == len(ids) - 1
    expected = keras_nats(tiny_gpt_run, ids, 31)  # the context (32) less one
    assert figures["float32"] == pytest.approx(expected, abs=2e-3)
    assert figures["loss"] == pytest.approx(
        figures["quantized"] - figures["float32"], abs=2e-4
    )
    assert figures["within"] is True
    assert 0.0 < figures["agreement"] <= 1.0
    assert any("top-1 agreement" in line for line in said)


def test_the_int4_models_are_smaller_and_decode(gated, tiny_gpt_run):
    from ai_edge_litert.interpreter import Interpreter

    from tfformer.export.runtimes.generate import LiteRTGenerator

    out, _ = gated
    float_dir = out.parent / "float32"
    export_tflite(tiny_gpt_run, str(float_dir), progress=lambda *_: None)
    for name in ("model", "model_loop"):
        small = os.path.getsize(out / f"{name}_int4.tflite")
        assert small < os.path.getsize(float_dir / f"{name}.tflite")
        # Its matrices are 4-bit (the interpreter shows them as int8), with a
        # float16 scale per 32 weights.
        details = Interpreter(model_path=str(out / f"{name}_int4.tflite"))
        kinds = {d["dtype"].__name__ for d in details.get_tensor_details()}
        assert {"int8", "float16"} <= kinds
    tokens, _ = LiteRTGenerator(str(out / "model_int4.tflite")).generate(
        [b + 4 for b in b"to be"], 8, greedy=True
    )
    assert len(tokens) == 8


def test_a_model_that_loses_more_than_allowed_is_not_written(tiny_gpt_run, tmp_path):
    out = tmp_path / "device"
    with pytest.raises(ValueError, match=r"loses .* more than --max-quality-loss 0"):
        export_tflite(
            tiny_gpt_run,
            str(out),
            quantize="int4",
            max_quality_loss=0.0,
            progress=lambda *_: None,
        )
    assert not out.exists()
    export_tflite(
        tiny_gpt_run,
        str(out),
        quantize="int4",
        max_quality_loss=0.0,
        force=True,
        progress=lambda *_: None,
    )
    assert (out / "model_int4.tflite").exists()
    figures = json.loads((out / "quality.json").read_text())["model_int4.tflite"]
    assert figures["within"] is False and figures["forced"] is True


class Converted:
    """A run directory whose config names no held-out text."""

    path = "runs/converted"

    def read_config(self):
        return {"data": {"text_path": None}}


def test_without_held_out_text_the_gate_says_it_cannot_measure(tmp_path):
    text, why = quality.heldout_text(Converted())
    assert text is None and "pass --quality-data FILE" in why
    path = tmp_path / "held_out.txt"
    path.write_text("e\u0301 text")
    assert quality.heldout_text(Converted(), str(path)) == ("e\u0301 text", str(path))
    with pytest.raises(ValueError, match=r"--quality-data .* is unreadable"):
        quality.heldout_text(Converted(), str(tmp_path / "absent.txt"))


@pytest.mark.parametrize(
    "run, options, message",
    [
        ("tiny_gpt_run", {"int4_block": "48"}, r"--int4-block must be one of .*'48'"),
        ("tiny_gpt_run", {"int4_block": "256"}, r"--int4-block 256: .*not divisible"),
        ("tiny_gpt_run", {"max_quality_loss": -1}, "--max-quality-loss must be"),
    ],
)
def test_bad_int4_requests_are_named(request, tmp_path, run, options, message):
    out = tmp_path / "device"
    with pytest.raises(ValueError, match=message):
        export_tflite(
            request.getfixturevalue(run),
            str(out),
            quantize="int4",
            progress=lambda *_: None,
            **options,
        )
    assert not out.exists()


def test_the_gates_options_are_refused_where_there_is_no_gate(
    tiny_gpt_run, tiny_classifier_run, tmp_path, capsys
):
    from tfformer.export import cli

    out = str(tmp_path / "o")
    for run, extra, message in (
        (tiny_gpt_run, ["--force"], "apply to a quantized export"),
        (tiny_classifier_run, ["--quality-data", "x"], "apply to a quantized export"),
        (tiny_gpt_run, ["--max-quality-loss", "1"], "Received: --quantize 'none'"),
        (
            tiny_gpt_run,
            ["--int4-block", "64"],
            "--int4-block applies to --quantize int4",
        ),
    ):
        argv = ["--checkpoint", run, "--out", out, "--format", "tflite", *extra]
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_every_quantized_generator_is_measured(tiny_gpt_run, tmp_path):
    """A dynamic-int8 export is measured too (its figures recorded beside
    it, with the default threshold) and refused above a threshold."""
    out = tmp_path / "device"
    said = []
    export_tflite(tiny_gpt_run, str(out), quantize="int8", progress=said.append)
    figures = json.loads((out / "quality.json").read_text())["model_int8.tflite"]
    assert figures["quantize"] == "int8" and "block" not in figures
    assert figures["max_loss"] == 0.1 and figures["within"] is True
    assert figures["examples"] > 0 and any("int8:" in line for line in said)
    with pytest.raises(ValueError, match=r"int8 loses .* --max-quality-loss 0"):
        export_tflite(
            tiny_gpt_run,
            str(tmp_path / "refused"),
            quantize="int8",
            max_quality_loss=0.0,
            progress=lambda *_: None,
        )
    assert not (tmp_path / "refused").exists()


@pytest.mark.integration
def test_an_int4_bundle_runs_in_litert_lm_as_its_tflite_model(tiny_gpt_run, tmp_path):
    """`--format litertlm --quantize int4`: the gate measures the bundled
    model (its figures under the bundle's name) and LiteRT-LM decodes what
    the reference runtime decodes on the same int4 model (the export's own
    check, and here once more)."""
    pytest.importorskip("litert_lm")
    from tfformer.export import litertlm

    out = tmp_path / "bundle"
    said = []
    path = litertlm.export_litertlm(
        tiny_gpt_run,
        str(out),
        quantize="int4",
        max_quality_loss=10.0,
        progress=said.append,
    )
    assert path.endswith("model_int4.litertlm")
    figures = json.loads((out / "quality.json").read_text())["model_int4.litertlm"]
    assert figures["block"] == "32" and figures["examples"] > 0
    assert any("top-1 agreement" in line for line in said)
    got = litertlm.litert_lm_greedy(path, "to be", 8)
    assert got


def test_an_int4_model_stores_each_weight_once(tiny_gpt_run, tmp_path, monkeypatch):
    """ai-edge-quantizer stores the float embedding once per signature
    (GATHER reads it as float in each, the tied output layer as int4);
    `share_identical_buffers` makes every copy read one buffer, and the
    model computes what it did."""
    import hashlib

    from tfformer.export import int4
    from tfformer.export.flatbuffer import read_model
    from tfformer.export.runtimes.generate import LiteRTGenerator

    def copies(path):
        with open(path, "rb") as f:
            model = read_model(f.read())
        seen = {}
        for buffer in model.buffers:
            if buffer.data is not None and len(buffer.data) > 64:
                key = hashlib.sha256(bytes(buffer.data)).digest()
                seen[key] = seen.get(key, 0) + 1
        return sum(n - 1 for n in seen.values())

    paths = {}
    for shared in (True, False):
        if not shared:
            monkeypatch.setattr(int4, "share_identical_buffers", lambda f: f)
        paths[shared] = export_tflite(
            tiny_gpt_run,
            str(tmp_path / str(shared)),
            quantize="int4",
            prefill_lengths=[8, 32],
            max_quality_loss=10.0,
            progress=lambda *_: None,
        )
    assert copies(paths[False]) > 0 and copies(paths[True]) == 0
    assert os.path.getsize(paths[True]) < os.path.getsize(paths[False])
    prompt = [b + 4 for b in b"to be or"]
    outputs = []
    for path in paths.values():
        generator = LiteRTGenerator(path)
        cache = generator.prefill(prompt, generator.new_cache())
        logits, _ = generator.decode(prompt[-1], len(prompt), cache)
        outputs.append(np.asarray(logits))
    np.testing.assert_array_equal(*outputs)
