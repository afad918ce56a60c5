"""The causal LM (byte tokenizer) and the BERT classifier through `train`,
`tfformer-predict` and `tfformer-evaluate`."""

import json
import math

import numpy as np
import pytest

from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import predict as predict_cli
from tfformer.training.config import load_config
from tfformer.training.fit.trainer import train
from tfformer.training.tasks.text_classification import classification_scores

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


def test_causal_lm_on_bytes_learns_a_repeated_text(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("to be or not to be, that is the question.\n" * 80)
    config = load_config(
        overrides=[
            *SMALL,
            "task=causal_lm",
            f"data.text_path={text}",
            "data.tokenizer=byte",
            "data.max_length=32",
            "model.preset=gpt_tiny",
            "train.epochs=3",
            f"train.output_dir={tmp_path / 'run'}",
        ]
    )
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


def test_bert_classifier_on_labelled_sentences(tmp_path, capsys):
    negative = tmp_path / "neg.txt"
    positive = tmp_path / "pos.txt"
    rng = np.random.default_rng(0)
    bad = ["awful", "dull", "boring", "bad"]
    good = ["great", "fine", "superb", "good"]
    filler = ["the", "film", "was", "really", "quite", "a", "plot"]
    negative.write_text(
        "\n".join(
            " ".join([*rng.choice(filler, 4).tolist(), rng.choice(bad)])
            for _ in range(150)
        )
    )
    positive.write_text(
        "\n".join(
            " ".join([*rng.choice(filler, 4).tolist(), rng.choice(good)])
            for _ in range(150)
        )
    )
    config = load_config(
        overrides=[
            *SMALL,
            "task=text_classification",
            f"data.class_paths={negative},{positive}",
            "data.class_names=negative,positive",
            "data.vocabulary_size=60",
            "data.max_length=16",
            "model.preset=bert_tiny",
            "train.epochs=5",
            "train.steps_per_epoch=8",
            "train.warmup_steps=10",
            "train.learning_rate_scale=0.3",
            f"train.output_dir={tmp_path / 'run'}",
        ]
    )
    result = train(config, progress=lambda *_: None)
    assert (tmp_path / "run" / "text_vocab.txt").is_file()
    assert result.data.num_classes == 2
    # The class is one word at the end of the sentence: learnable in 40 steps
    # (this setting reached 1.0 with seeds 0, 1 and 2).
    assert result.metrics["val_accuracy"] > 0.8

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
    assert scores["accuracy"] == pytest.approx(
        result.metrics["test_accuracy"], abs=1e-6
    )


def test_classification_scores_by_hand():
    # truth 0 0 1 1 2, predicted 0 1 1 1 0: class 0 P=1/2 R=1/2, class 1
    # P=2/3 R=1, class 2 P=0 R=0.
    scores = classification_scores([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], ["a", "b", "c"])
    assert scores["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 0]]
    assert scores["accuracy"] == pytest.approx(3 / 5)
    assert scores["f1"] == pytest.approx({"a": 0.5, "b": 0.8, "c": 0.0})
    assert scores["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3)
