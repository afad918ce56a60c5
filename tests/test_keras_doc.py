"""docs/keras.md runs as written, on tiny stand-ins: a tiny BERT
checkpoint converted as all-MiniLM-L6-v2 is (the real converter), the
tiny causal-LM run, and small files in the data's formats. Only the
`RUN`, `DATA` and `TEXT` lines are replaced; the page's commands run
through `tfformer-export`'s `main`, and what each step wrote is read back
and compared with the model that wrote it."""

import gzip
import json
import os
import shlex

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfformer
from tests.test_docs import ROOT, read, split_fences
from tests.training.tiny import train_tiny_gpt

PAGE = os.path.join(ROOT, "docs", "keras.md")


def page_blocks():
    blocks = split_fences(read(PAGE))[1]
    python = [body for info, body in blocks if info == "python"]
    bash = [body for info, body in blocks if info == "bash"]
    return python, bash


def replaced(code, **values):
    for name, value in values.items():
        lines = [line for line in code.split("\n") if line.startswith(f"{name} = ")]
        assert len(lines) == 1, name
        code = code.replace(lines[0], f"{name} = {value!r}")
    return code


def run_commands(block):
    from tfformer.export.cli import main

    for line in block.strip().split("\n"):
        argv = shlex.split(line)
        assert argv[0] == "tfformer-export", line
        assert main(argv[1:]) == 0, line


def tiny_minilm(root):
    """A tiny BERT checkpoint in sentence-transformers' layout (context 64),
    converted by `tfformer.training.convert` as the real one is."""
    from tests.training.convert.huggingface.test_bert import (
        bert_tensors,
        write_checkpoint,
    )
    from tfformer.training.convert import convert

    source = write_checkpoint(
        root / "hf",
        np.random.default_rng(0),
        tensors=bert_tensors(np.random.default_rng(0), positions=64),
        config={"max_position_embeddings": 64},
        sentence_transformers={"pooling": "mean", "normalize": True},
    )
    with open(source / "sentence_bert_config.json", "w") as f:
        json.dump({"max_seq_length": 64, "do_lower_case": False}, f)
    return convert(str(source), str(root / "minilm"), progress=lambda *_: None)


def test_the_minilm_walk_through(tmp_path, monkeypatch):
    python, bash = page_blocks()
    run = tiny_minilm(tmp_path)
    data = tmp_path / "rt-polarity."
    # Words of the tiny vocabulary, a sentence per class.
    for name, line in (
        ("neg", "a man is eating food ."),
        ("pos", "the dog is riding ."),
    ):
        with gzip.open(f"{data}{name}.gz", "wt", encoding="utf-8") as f:
            f.write(f"{line}\n" * 40)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(replaced(python[0], RUN=run, DATA=str(data)), namespace)
    classifier, scores = namespace["classifier"], namespace["scores"]
    # The page's evaluate is the saved run's predictor, scored by hand.
    test = namespace["test"]
    loaded = tfformer.load("runs/polarity_minilm_keras")
    assert loaded.labels == ["negative", "positive"]
    predicted = loaded.classify([t for t, _ in test])[0]
    accuracy = np.mean([p == y for p, (_, y) in zip(predicted, test, strict=True)])
    assert len(test) == 8 and scores["accuracy"] == pytest.approx(accuracy)
    texts = ["a man is eating food", "the dog is riding a horse", "bread"]
    probabilities = classifier.classify(texts)[1]
    np.testing.assert_allclose(loaded.classify(texts)[1], probabilities, atol=1e-6)
    restored = keras.saving.load_model("polarity_minilm.keras")
    np.testing.assert_allclose(restored.classify(texts)[1], probabilities, atol=1e-6)
    run_commands(bash[0])
    (version,) = (tmp_path / "serving" / "polarity_keras").iterdir()
    served = tf.saved_model.load(str(version))
    got = served.signatures["classify"](text=tf.constant(texts))["probabilities"]
    np.testing.assert_allclose(got, probabilities, atol=1e-5)
    device = tmp_path / "device" / "polarity_keras"
    assert any(p.suffix == ".tflite" for p in device.iterdir())


def test_the_gpt_walk_through(tmp_path, monkeypatch):
    python, bash = page_blocks()
    line = "ROMEO: what light through yonder window breaks?\n"
    text = tmp_path / "input.txt.gz"
    with gzip.open(text, "wt", encoding="utf-8") as f:
        f.write(line * 200)
    # The 10-minute GPT's stand-in: a tiny GPT on bytes, context 128.
    (tmp_path / "gpt").mkdir()
    run = train_tiny_gpt(tmp_path / "gpt", line * 400, context=128, epochs=1)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(replaced(python[1], RUN=run, TEXT=str(text)), namespace)
    continued = namespace["writer"].generate(["ROMEO:"], max_new_tokens=8)
    loaded = tfformer.load("runs/shakespeare_keras")
    assert loaded.generate(["ROMEO:"], max_new_tokens=8) == continued
    run_commands(bash[1])
    (version,) = (tmp_path / "serving" / "shakespeare_keras").iterdir()
    served = tf.saved_model.load(str(version)).signatures["generate"](
        prompt=tf.constant(["ROMEO:"]),
        max_new_tokens=tf.constant([8]),
        temperature=tf.ones([1]),
        top_k=tf.ones([1], tf.int32),
        top_p=tf.ones([1]),
        seed=tf.zeros([1], tf.int32),
    )
    assert "ROMEO:" + served["text"].numpy()[0].decode() == continued[0]
    device = tmp_path / "device" / "shakespeare_keras"
    assert any(p.suffix == ".tflite" for p in device.iterdir())
