"""The causal LM (byte tokenizer) and the BERT classifier through `train`,
`tfformer-predict` and `tfformer-evaluate`."""

import json
import math
import shutil

import numpy as np
import pytest

from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import predict as predict_cli
from tfformer.training.config import load_config
from tfformer.training.tasks.text_classification import classification_scores
from tfformer.training.trainer import train

from .tiny import TINY_MODEL

SMALL = [
    *TINY_MODEL,
    "train.batch_size=8",
    "train.steps_per_epoch=6",
    "train.epochs=2",
    "train.warmup_steps=5",
    "train.verbose=0",
    "train.label_smoothing=0.0",
]


def byte_lm_config(tmp_path, *extra):
    """A byte-level causal LM on a repeated line, windows of 32."""
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question.\n" * 80)
    return load_config(
        overrides=[
            *SMALL,
            "task=causal_lm",
            f"data.text_path={text}",
            "data.tokenizer=byte",
            "data.max_length=32",
            "model.preset=gpt_tiny",
            f"train.output_dir={tmp_path / 'run'}",
            *extra,
        ]
    )


@pytest.mark.integration
def test_causal_lm_on_bytes_learns_a_repeated_text(tmp_path, capsys):
    config = byte_lm_config(tmp_path, "train.epochs=3")
    result = train(config, progress=lambda *_: None)
    assert (tmp_path / "run" / "text_tokenizer.json").is_file()
    # Random guessing over 260 byte ids costs ln(260) = 5.56 nats.
    epochs = result.metrics
    assert epochs["val_loss"] < np.log(260) - 1.0
    assert result.data.tokenizers["text"].vocabulary_size == 260

    run = str(tmp_path / "run")
    capsys.readouterr()
    # Greedy continuation of the repeated line: the model learned it.
    code = predict_cli.main(
        ["--checkpoint", run, "--max-new-tokens", "6", "to be or not to"]
    )
    assert code == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("to be or not to") and len(line) > len("to be or not to")
    # Seeded sampling repeats itself.
    argv = ["--checkpoint", run, "--search", "sample", "--seed", "3", "--top-k", "5"]
    predict_cli.main([*argv, "--max-new-tokens", "8", "that is"])
    first = capsys.readouterr().out
    predict_cli.main([*argv, "--max-new-tokens", "8", "that is"])
    assert capsys.readouterr().out == first
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "32", "x"]) == 2
    assert "--max-new-tokens must be in [0, 31]" in capsys.readouterr().err

    output = tmp_path / "eval.json"
    assert evaluate_cli.main(["--checkpoint", run, "--output", str(output)]) == 0
    scores = json.loads(output.read_text())
    # Test loss per token in nats, and the same in bits per byte: a byte
    # tokenizer has one token per byte.
    assert scores["nats_per_token"] == pytest.approx(
        result.metrics["test_loss"], abs=1e-3
    )
    assert scores["bits_per_byte"] == pytest.approx(
        scores["nats_per_token"] / math.log(2), rel=1e-3
    )
    # --split validation scores the other half of the tail: the loss Keras
    # reported on it after the last epoch.
    argv = ["--checkpoint", run, "--split", "validation", "--output", str(output)]
    assert evaluate_cli.main(argv) == 0
    scores = json.loads(output.read_text())
    assert scores["split"] == "validation"
    assert scores["nats_per_token"] == pytest.approx(
        result.metrics["val_loss"], abs=1e-3
    )


def test_bert_classifier_on_labelled_sentences(tiny_classifier_run, tmp_path, capsys):
    """The session's tiny classifier (`train_tiny_classifier`) learned its
    sentences' last word; `tfformer-predict` and `tfformer-evaluate` on a
    copy of it (evaluate draws its confusion matrix into the run)."""
    shutil.copytree(tiny_classifier_run, tmp_path / "run")
    assert (tmp_path / "run" / "text_vocab.txt").is_file()
    with open(tmp_path / "run" / "metrics.json") as f:
        metrics = json.load(f)["results"]
    assert metrics["global_step"] == 48
    assert metrics["val_accuracy"] > 0.8

    run = str(tmp_path / "run")
    capsys.readouterr()
    sentences = ["the film was really awful", "the plot was quite superb"]
    assert predict_cli.main(["--checkpoint", run, *sentences]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [label for label, _, _ in lines] == ["negative", "positive"]
    assert all(0.5 < float(p) <= 1.0 for _, p, _ in lines)
    assert [text for _, _, text in lines] == sentences

    assert evaluate_cli.main(["--checkpoint", run]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["labels"] == ["negative", "positive"]
    assert scores["examples"] == sum(map(sum, scores["confusion_matrix"]))
    assert scores["accuracy"] == pytest.approx(metrics["test_accuracy"], abs=1e-6)
    # The matrix drawn as a PNG in the run directory (or where asked).
    with open(scores["confusion_plot"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert scores["confusion_plot"] == f"{run}/confusion_matrix.png"
    plot = tmp_path / "matrix.png"
    assert evaluate_cli.main(["--checkpoint", run, "--confusion-plot", str(plot)]) == 0
    assert json.loads(capsys.readouterr().out)["confusion_plot"] == str(plot)
    assert plot.stat().st_size > 1000


def test_classification_scores_by_hand():
    # truth 0 0 1 1 2, predicted 0 1 1 1 0: class 0 P=1/2 R=1/2, class 1
    # P=2/3 R=1, class 2 P=0 R=0.
    scores = classification_scores([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], ["a", "b", "c"])
    assert scores["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 0]]
    assert scores["accuracy"] == pytest.approx(3 / 5)
    assert scores["f1"] == pytest.approx({"a": 0.5, "b": 0.8, "c": 0.0})
    assert scores["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)


def test_pairs_are_encoded_longest_first_with_segments():
    from tfformer.training.tasks.text_classification import encode_texts

    class Words:  # a tokenizer: one id per word, 10 + its length
        start_id, end_id = 2, 3

        def tokenize(self, texts):
            import tensorflow as tf

            return tf.ragged.constant([[10 + len(w) for w in t.split()] for t in texts])

    # 4 + 2 tokens cut to 5 (8 minus [START] and two [END]s): the longer a
    # loses its last token.
    rows, segments = encode_texts(Words(), [("a bb ccc dddd", "ee f")], 8)
    assert rows == [[2, 11, 12, 13, 3, 12, 11, 3]]
    assert segments == [[0, 0, 0, 0, 0, 1, 1, 1]]
    # 3 + 3 cut to 5: on the tie b loses first.
    rows, _ = encode_texts(Words(), [("a bb ccc", "dddd ee f")], 8)
    assert rows == [[2, 11, 12, 13, 3, 14, 12, 3]]
    rows, segments = encode_texts(Words(), [("a bb ccc dddd eeeee", "f")], 8)
    assert rows == [[2, 11, 12, 13, 14, 3, 11, 3]]
    assert segments == [[0, 0, 0, 0, 0, 0, 1, 1]]
    rows, segments = encode_texts(Words(), ["a bb ccc dddd eeeee ffffff gg"], 6)
    assert rows == [[2, 11, 12, 13, 14, 3]] and segments == [[0] * 6]


@pytest.mark.integration
def test_a_classifier_of_sentence_pairs_from_a_tsv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    filler = ["the", "film", "was", "really", "quite", "a", "plot"]
    lines = []
    for _ in range(300):
        label = rng.integers(2)
        cue = rng.choice(["great", "superb"] if label else ["awful", "dull"])
        first = " ".join(rng.choice(filler, 3))
        second = " ".join([*rng.choice(filler, 3).tolist(), cue])
        lines.append(f"{first}\t{second}\t{['no', 'yes'][label]}")
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("\n".join(lines) + "\n")
    config = load_config(
        overrides=[
            *SMALL,
            "task=text_classification",
            f"data.tsv_path={tsv}",
            "data.vocabulary_size=60",
            "data.max_length=16",
            "train.epochs=5",
            "train.steps_per_epoch=8",
            "train.warmup_steps=10",
            "train.learning_rate_scale=0.3",
            f"train.output_dir={tmp_path / 'run'}",
        ],
    )
    result = train(config, progress=lambda *_: None)
    assert result.data.labels == ("no", "yes")
    batch = next(iter(result.data.examples["train"].features["segment_ids"]))
    assert batch.numpy().tolist() == [0] * 5 + [1] * 5  # [START] 3 [END] | 4 [END]
    assert result.metrics["val_accuracy"] > 0.8
    run = str(tmp_path / "run")
    capsys.readouterr()
    assert predict_cli.main(["--checkpoint", run, "a plot\tthe film was superb"]) == 0
    assert capsys.readouterr().out.startswith("yes\t")
    assert predict_cli.main(["--checkpoint", run, "no tab here"]) == 2
    assert "give each input as 'text_a<TAB>text_b'" in capsys.readouterr().err


def test_a_tsv_header_without_a_tsv_is_refused(tmp_path):
    neg, pos = tmp_path / "neg", tmp_path / "pos"
    neg.write_text("bad\n")
    pos.write_text("good\n")
    with pytest.raises(ValueError, match=r"data\.tsv_header applies to data\.tsv_path"):
        load_config(
            overrides=[
                "task=text_classification",
                f"data.class_paths={neg},{pos}",
                "data.tsv_header=true",
            ]
        )


def test_causal_lm_token_budget_uses_its_windows_not_data_buckets(tmp_path):
    """The causal LM trains on windows of data.max_length whatever
    data.bucket_lengths says: train.batch_tokens=128 gives 128 // 32 = 4
    windows per batch, so 2 steps see 2 x 4 x 32 = 256 real tokens (8-window
    batches would give 512)."""
    config = byte_lm_config(
        tmp_path,
        "data.bucket_lengths=[16,32]",
        "train.batch_tokens=128",
        "train.steps_per_epoch=2",
        "train.epochs=1",
    )
    train(config, progress=lambda *_: None)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"][0]["real_tokens"] == 256
