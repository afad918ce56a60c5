"""Translator, tfformer-evaluate, tfformer-translate and attention maps on a
tiny trained run."""

import io
import json
import os

import numpy as np
import pytest

import tfformer
from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import translate as translate_cli
from tfformer.training.config import config_from_dict
from tfformer.training.evaluation.attention_maps import cross_attention_weights
from tfformer.training.evaluation.translation import score_translations
from tfformer.training.tasks.base import PreparedData
from tfformer.training.tasks.translation import TASK


@pytest.fixture(scope="module")
def run_dir(tiny_translator_run):
    return tiny_translator_run


def test_greedy_translator_agrees_with_the_training_exact_match(run_dir):
    translator = tfformer.load(run_dir).translator(search="greedy", batch_size=8)
    loaded = tfformer.load(run_dir)
    model = loaded.model
    pairs = [
        ("twenty-one", "einundzwanzig"),
        ("five hundred", "fünfhundert"),
        ("nine", "neun"),
    ]
    translations = translator.translate([s for s, _ in pairs])
    assert len(translations) == 3 and all(isinstance(t, str) for t in translations)
    config = config_from_dict(loaded.directory.read_json("config.json"))
    data = PreparedData(loaded.tokenizers, {}, {"test": pairs}, (32,))
    shown = TASK.final_evaluation(config, model, data, progress=lambda *_: None)
    # The end-of-training pass (batches of 64) translates exactly as the
    # translator (batches of 8) does, and its exact match is the share of
    # those translations equal to the reference (these references are
    # unchanged by the tokenizer's round trip: single lower-case words).
    assert [p for _, _, p in shown["test_examples"]] == translations
    expected = sum(t == r for t, (_, r) in zip(translations, pairs, strict=True)) / 3
    assert shown["test_exact_match"] == expected
    assert translator.translate([]) == []
    with pytest.raises(TypeError, match="list of strings"):
        translator.translate("one string")


def test_beam_translator_returns_one_translation_per_sentence(run_dir):
    translator = tfformer.load(run_dir).translator(
        search="beam", beam_width=3, batch_size=4
    )
    out = translator.translate(["one", "two hundred", "three thousand", "four", "five"])
    assert len(out) == 5
    assert translator.stats["sentences"] == 5


def test_bad_run_directories_are_named(tmp_path, run_dir):
    with pytest.raises(ValueError, match="not a directory"):
        tfformer.load(str(tmp_path / "nope"))
    half = tmp_path / "half"
    half.mkdir()
    (half / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"run\.json is missing"):
        tfformer.load(str(half))
    for name in ("run.json", "source_vocab.txt", "target_vocab.txt"):
        (half / name).write_bytes(open(os.path.join(run_dir, name), "rb").read())
    with pytest.raises(ValueError, match=r"model\.keras is missing"):
        tfformer.load(str(half))
    with pytest.raises(ValueError, match="checkpoint file must be one of"):
        tfformer.load(run_dir, "latest.h5")


def test_scores_are_sacrebleu_cased_and_lowercased():
    references = ["A man rides a horse.", "Two dogs play in the snow."]
    assert score_translations(references, references)["bleu_cased"] == 100.0
    lowered = [r.lower() for r in references]
    scores = score_translations(lowered, references)
    assert scores["bleu_cased"] < 100.0
    assert scores["bleu_lowercased"] == 100.0
    assert scores["chrf_lowercased"] == 100.0
    assert "case:lc" in scores["bleu_lowercased_signature"]
    assert "tok:13a" in scores["bleu_cased_signature"]
    with pytest.raises(ValueError, match="1 hypotheses for 2 references"):
        score_translations(["x"], references)


def test_evaluate_command_writes_results_and_an_attention_plot(
    run_dir, tmp_path, capsys
):
    output = tmp_path / "eval.json"
    plot = tmp_path / "attention.png"
    code = evaluate_cli.main(
        [
            "--checkpoint",
            run_dir,
            "--search",
            "greedy",
            "--limit",
            "8",
            "--output",
            str(output),
            "--attention-plot",
            str(plot),
        ]
    )
    assert code == 0
    results = json.loads(output.read_text())
    for key in (
        "bleu_cased",
        "bleu_lowercased",
        "chrf_cased",
        "chrf_lowercased",
        "bleu_cased_signature",
        "sentences_per_second",
        "tokens_per_second",
    ):
        assert key in results
    assert results["sentences"] == 8
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert evaluate_cli.main(["--checkpoint", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_translate_command_reads_arguments_or_stdin(run_dir, capsys, monkeypatch):
    assert (
        translate_cli.main(
            ["--checkpoint", run_dir, "--search", "greedy", "one", "two"]
        )
        == 0
    )
    from_args = capsys.readouterr().out.splitlines()
    assert len(from_args) == 2
    monkeypatch.setattr("sys.stdin", io.StringIO("one\ntwo\n"))
    assert translate_cli.main(["--checkpoint", run_dir, "--search", "greedy"]) == 0
    assert capsys.readouterr().out.splitlines() == from_args


def test_cross_attention_weights_are_distributions_over_the_source(run_dir):
    loaded = tfformer.load(run_dir)
    model, source, target = (
        loaded.model,
        loaded.tokenizers["source"],
        loaded.tokenizers["target"],
    )
    source_ids = source.tokenize(["twenty-one thousand"])[0].numpy()
    maps = cross_attention_weights(model, source_ids, [target.start_id, 5, 6])
    assert len(maps) == 1  # one decoder layer
    assert maps[0].shape == (2, 3, len(source_ids))
    np.testing.assert_allclose(maps[0].sum(-1), 1.0, rtol=1e-5)
    assert os.path.isdir(run_dir)


def test_translate_refuses_a_run_of_another_task(tmp_path, capsys):
    (tmp_path / "run.json").write_text(
        '{"format_version": 1, "task": "causal_lm", '
        '"tokenizers": {"text": {"kind": "byte"}}, "settings": {"max_length": 8}}'
    )
    assert translate_cli.main(["--checkpoint", str(tmp_path), "x"]) == 2
    assert "holds a 'causal_lm' run; use tfformer-predict" in capsys.readouterr().err


def test_a_truncated_or_bit_flipped_model_file_is_named_in_one_line(
    run_dir, tmp_path, capsys
):
    """model.keras cut short (no zip), and with a byte of its weights
    flipped (the archive's CRC check): one line naming the file, exit 2 from
    the command, nothing written."""
    import shutil

    with open(os.path.join(run_dir, "model.keras"), "rb") as f:
        original = f.read()
    flipped = bytearray(original)
    flipped[len(original) // 2] ^= 0x40  # inside the weights member
    # A sound archive whose config names a class no Keras knows (a model of
    # another library or version): Keras's TypeError, as one line.
    import io
    import zipfile

    foreign = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(original)) as source,
        zipfile.ZipFile(foreign, "w") as target,
    ):
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                data = data.replace(b'"Seq2SeqLM"', b'"Nope"')
                data = data.replace(b'"tfformer>Seq2SeqLM"', b'"tfformer>Nope"')
                assert b'"tfformer>Nope"' in data
            target.writestr(item, data)
    for name, content, problem in (
        ("truncated", original[: len(original) // 3], "is not a Keras model file"),
        ("flipped", bytes(flipped), "is damaged"),
        ("foreign", foreign.getvalue(), "is not a model this tfformer can rebuild"),
    ):
        copy = tmp_path / name
        shutil.copytree(run_dir, copy)
        (copy / "model.keras").write_bytes(content)
        before = sorted(os.listdir(copy))
        with pytest.raises(ValueError, match=problem) as refused:
            tfformer.load(str(copy))
        assert str(copy / "model.keras") in str(refused.value)
        assert translate_cli.main(["--checkpoint", str(copy), "nine"]) == 2
        err = capsys.readouterr().err
        assert problem in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert sorted(os.listdir(copy)) == before
