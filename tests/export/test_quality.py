"""The quality gate every quantized export passes (`tfformer.export.quality`):
the refusal rule on hand-computed figures; the held-out examples training
writes for it; the classifier's and translator's figures against their
Keras models on the same examples; int4 for them; bad held-out files named,
with nothing written."""

import json

import numpy as np
import pytest

import tfformer
from tfformer.export import quality
from tfformer.export.tflite import export_tflite
from tfformer.runs.directory import RunDirectory
from tfformer.training.tasks import get_task


class Stub:
    """An exporter whose quantized model scores `figures` on anything."""

    task = "stub"

    def __init__(self, metric, figures, samples=("x",)):
        self.quality_metric, self.figures, self.samples = metric, figures, samples
        self.device_dirs = []

    def quality_samples(self, run, path):
        del run, path
        return self.samples, "stub data"

    def device_files(self, run, out_dir):
        del run
        self.device_dirs.append(out_dir)

    def quality(self, run, float32_path, quantized_path, samples):
        del run, samples
        with open(float32_path, "rb") as a, open(quantized_path, "rb") as b:
            assert (a.read(), b.read()) == (b"float", b"quantized")
        return {"examples": 10, "agreement": 0.9, **self.figures}


def gate(tmp_path, metric, figures, **options):
    """A `QualityGate` of int8 on `Stub`'s figures, measured."""
    exporter = Stub(metric, figures)
    settings = {"block": "32", "max_loss": None, "force": False, "data": None}
    settings.update(options)
    checked = quality.QualityGate(exporter, None, "int8", **settings)
    assert checked.take(0, b"quantized", str(tmp_path), lambda: b"float") == (
        b"quantized"
    )
    checked.measure(None, {}, lambda *_: None)
    assert exporter.device_dirs == [str(tmp_path / "gate")]
    return checked


def test_the_gate_refuses_a_model_that_loses_more_than_its_threshold(tmp_path):
    # BLEU is higher-is-better: 30.0 -> 28.5 loses 1.5 points, over the
    # default 1.0.
    with pytest.raises(
        ValueError, match=r"int8 loses 1.50 BLEU points .*-quality-loss 1.0"
    ):
        gate(tmp_path, quality.BLEU, {"float32": 30.0, "quantized": 28.5})
    passed = gate(
        tmp_path, quality.BLEU, {"float32": 30.0, "quantized": 28.5}, max_loss=2.0
    )
    assert passed.figures["loss"] == 1.5 and passed.figures["within"] is True
    # Nats are lower-is-better: 1.30 -> 1.45 loses 0.15, over 0.1; a model
    # that gains passes with a negative loss.
    with pytest.raises(ValueError, match=r"loses 0.1500 nats per token"):
        gate(tmp_path, quality.NATS, {"float32": 1.30, "quantized": 1.45})
    better = gate(tmp_path, quality.NATS, {"float32": 1.30, "quantized": 1.25})
    assert better.figures["loss"] == pytest.approx(-0.05)
    # A model that collapsed to NaN is refused, not let through.
    with pytest.raises(ValueError, match=r"int8 loses nan nats per token"):
        gate(tmp_path, quality.NATS, {"float32": 1.30, "quantized": float("nan")})
    forced = gate(
        tmp_path, quality.ACCURACY, {"float32": 90.0, "quantized": 80.0}, force=True
    )
    assert forced.figures["loss"] == 10.0
    assert forced.figures["within"] is False and forced.figures["forced"] is True


def test_training_writes_its_test_split_for_the_gate(
    tiny_classifier_run, tiny_translator_run
):
    for run_dir, rows_of in (
        (
            tiny_classifier_run,
            lambda data, labels: [
                {"text": text, "label": labels[label]} for text, label in data["test"]
            ],
        ),
        (
            tiny_translator_run,
            lambda data, _: [{"source": s, "target": t} for s, t in data["test"]],
        ),
    ):
        run = RunDirectory(run_dir)
        config = tfformer.load(run_dir).config
        raw = get_task(run.task).raw_splits(config.data)
        labels = list(getattr(run.manifest, "labels", ()))
        with open(run.heldout_file(), encoding="utf-8") as f:
            written = [json.loads(line) for line in f]
        assert written == rows_of(raw, labels)[:500] and written


def classifier_accuracy(run_dir, rows):
    loaded = tfformer.load(run_dir)
    labels = list(loaded.labels)
    p = loaded.probabilities([row["text"] for row in rows])
    truth = [labels.index(row["label"]) for row in rows]
    return 100 * float(np.mean(np.argmax(p, -1) == truth)), np.argmax(p, -1)


@pytest.mark.parametrize("quantize", ["int8", "int4"])
def test_a_classifiers_figures_are_its_keras_models(
    tiny_classifier_run, tmp_path, quantize
):
    """Accuracy on the run's held-out examples: float32's is the Keras
    model's; the quantized model's is the written file's (read by the
    reference runtime); int4 holds INT4 weights."""
    if quantize == "int4":
        pytest.importorskip("ai_edge_quantizer")
    from tfformer.export.int4 import int4_tensors
    from tfformer.export.runtimes.classify import LiteRTClassifier

    out = tmp_path / "device"
    said = []
    path = export_tflite(
        tiny_classifier_run, str(out), quantize=quantize, progress=said.append
    )
    figures = quality.recorded(str(out), f"model_{quantize}.tflite")
    with open(RunDirectory(tiny_classifier_run).heldout_file(), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    expected, keras_classes = classifier_accuracy(tiny_classifier_run, rows)
    assert figures["metric"] == "accuracy" and figures["examples"] == len(rows)
    assert figures["float32"] == pytest.approx(expected, abs=1e-3)
    written = LiteRTClassifier(path)
    classes = [int(np.argmax(written.classify(row["text"])[1])) for row in rows]
    labels = written.labels
    truth = [labels.index(row["label"]) for row in rows]
    assert figures["quantized"] == pytest.approx(
        100 * np.mean(np.array(classes) == truth), abs=1e-3
    )
    assert figures["agreement"] == pytest.approx(
        np.mean(classes == keras_classes), abs=1e-3
    )
    assert figures["max_loss"] == 1.0 and any("same class" in line for line in said)
    with open(path, "rb") as f:
        assert (int4_tensors(f.read()) > 0) == (quantize == "int4")


def test_a_translators_figures_are_its_keras_models(tiny_translator_run, tmp_path):
    """Lowercased BLEU of greedy translations of the held-out sources:
    float32's equals the Keras model's (greedy); the quantized model's is
    the written file's; int4 translates through the WHILE loop too. (The
    tiny run's BLEU is 0: the next test checks the BLEU itself.)"""
    pytest.importorskip("ai_edge_quantizer")
    import sacrebleu

    from tfformer.export.runtimes.translate import Translator

    with open(RunDirectory(tiny_translator_run).heldout_file(), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    sources = [row["source"] for row in rows]
    references = [row["target"] for row in rows]
    keras = tfformer.load(tiny_translator_run).translate(sources, search="greedy")
    bleu = sacrebleu.metrics.BLEU(lowercase=True)
    for quantize in ("int8", "int4"):
        out = tmp_path / quantize
        path = export_tflite(
            tiny_translator_run, str(out), quantize=quantize, progress=lambda *_: None
        )
        figures = quality.recorded(str(out), f"model_{quantize}.tflite")
        assert figures["metric"] == "BLEU" and figures["examples"] == len(rows)
        assert figures["float32"] == pytest.approx(
            bleu.corpus_score(keras, [references]).score, abs=1e-3
        )
        written = Translator(path).translate(sources)
        assert figures["quantized"] == pytest.approx(
            bleu.corpus_score(written, [references]).score, abs=1e-3
        )
        same = np.mean([a == b for a, b in zip(written, keras, strict=True)])
        assert figures["agreement"] == pytest.approx(same, abs=1e-3)


def test_a_file_of_held_out_examples_is_read_as_tsv_or_json_lines(
    tiny_classifier_run, tmp_path
):
    """The user's file replaces the run's: TSV rows with label names or ids,
    or JSON lines."""
    tsv = tmp_path / "held_out.tsv"
    tsv.write_text("a good film\tpositive\na bad film\t0\n")
    jsonl = tmp_path / "held_out.jsonl"
    jsonl.write_text(
        '{"text": "a good film", "label": "positive"}\n\n'
        '{"text": "a bad film", "label": 0}\n'
    )
    labels = list(RunDirectory(tiny_classifier_run).manifest.labels)
    assert labels == ["negative", "positive"]
    for path in (tsv, jsonl):
        out = tmp_path / f"out_{path.suffix[1:]}"
        export_tflite(
            tiny_classifier_run,
            str(out),
            quantize="int8",
            quality_data=str(path),
            progress=lambda *_: None,
        )
        figures = quality.recorded(str(out), "model_int8.tflite")
        assert figures["data"] == str(path) and figures["examples"] == 2
        rows = [{"text": "a good film", "label": "positive"}]
        rows.append({"text": "a bad film", "label": "negative"})
        expected, _ = classifier_accuracy(tiny_classifier_run, rows)
        assert figures["float32"] == pytest.approx(expected)


@pytest.mark.parametrize(
    "content, message",
    [
        ("only one column\n", r"line 1 must hold 2 tab-separated columns"),
        ("a film\tneutral\n", r"label 'neutral' is not one of the run's"),
        ("a film\t7\n", r"label id 7 is outside \[0, 2\)"),
        ("\n\n", r"holds no examples"),
    ],
)
def test_a_bad_file_of_held_out_examples_is_named_and_nothing_written(
    tiny_classifier_run, tmp_path, content, message
):
    path = tmp_path / "held_out.tsv"
    path.write_text(content)
    out = tmp_path / "device"
    with pytest.raises(ValueError, match=message):
        export_tflite(
            tiny_classifier_run,
            str(out),
            quantize="int8",
            quality_data=str(path),
            progress=lambda *_: None,
        )
    assert not out.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (
            '{"source": "one"}\n',
            r"line 1 must be a JSON object with 'source', 'target'",
        ),
        ("not json\n", r"line 1 is not JSON"),
    ],
)
def test_a_bad_json_lines_file_is_named(
    tiny_translator_run, tmp_path, content, message
):
    path = tmp_path / "held_out.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        export_tflite(
            tiny_translator_run,
            str(tmp_path / "device"),
            quantize="float16",
            quality_data=str(path),
            progress=lambda *_: None,
        )
    assert not (tmp_path / "device").exists()


def test_a_translators_bleu_is_lowercased_against_the_references(monkeypatch):
    """The tiny run translates to nothing (BLEU 0 either way), so the
    translator's figures are checked here on set translations: float32's
    differ from the references in case only (lowercased BLEU 100), the
    quantized model's in one word of each sentence."""
    import sacrebleu

    from tfformer.export.runtimes import translate
    from tfformer.export.tasks.translation import EXPORTER

    references = ["a cat sits on the red mat .", "two dogs run in the green park ."]
    outputs = {
        "float32.tflite": [
            "A Cat sits on the red mat .",
            "Two dogs run in the green park .",
        ],
        "int8.tflite": [
            "a dog sits on the red mat .",
            "two dogs run in the green park .",
        ],
    }

    class Fixed:
        def __init__(self, path):
            self.path = path

        def translate(self, sources):
            assert sources == ["eine Katze", "zwei Hunde"]
            return outputs[self.path]

    monkeypatch.setattr(translate, "Translator", Fixed)
    pairs = list(zip(["eine Katze", "zwei Hunde"], references, strict=True))
    figures = EXPORTER.quality(None, "float32.tflite", "int8.tflite", pairs)
    assert figures["float32"] == 100.0
    expected = sacrebleu.corpus_bleu(outputs["int8.tflite"], [references]).score
    assert 0 < expected < 100 and figures["quantized"] == pytest.approx(
        expected, abs=1e-4
    )
    # Neither sentence is translated alike (case counts there).
    assert figures["agreement"] == 0.0 and figures["examples"] == 2
