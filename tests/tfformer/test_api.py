"""`tfformer.load`: one short example per family on the tiny runs of
`tests/data/legacy_runs/` (saved by an older tfformer). Each predictor's
outputs equal the model's own computation, done here by hand, and what
`tfformer-predict` prints."""

import json
import os

import keras
import numpy as np
import pytest

if keras.backend.backend() != "tensorflow":
    # Runs are opened by the training code, which needs TensorFlow.
    pytest.skip("tfformer.load needs the TensorFlow backend", allow_module_level=True)

import tfformer
from tfformer.decoding import Generator
from tfformer.models import (
    CausalLM,
    ImageClassifier,
    MaskedLM,
    SentenceEmbedder,
    Seq2SeqLM,
    TextClassifier,
)
from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import predict as predict_cli

RUNS = os.path.join(os.path.dirname(__file__), "..", "data", "legacy_runs")


def run(name):
    return os.path.join(RUNS, name)


def printed(capsys, *argv):
    """What `tfformer-predict` prints for `argv`."""
    capsys.readouterr()
    code = predict_cli.main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def softmax(logits):
    logits = np.asarray(logits, "float64")
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_a_directory_that_is_no_run_is_named(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        tfformer.load(str(tmp_path / "absent"))
    with pytest.raises(ValueError, match=r"run\.json is missing"):
        tfformer.load(str(tmp_path))
    with pytest.raises(ValueError, match="checkpoint file must be one of"):
        tfformer.load(run("causal_lm_run"), "latest.h5")


# -- translation ---------------------------------------------------------------


def test_translate_is_the_generators_search_and_what_predict_prints(capsys):
    translator = tfformer.load(run("translation_run"))
    assert isinstance(translator.model, Seq2SeqLM)
    assert translator.backbone is translator.model.backbone
    assert sorted(translator.tokenizers) == ["source", "target"]
    assert translator.manifest.max_length == translator.config.data.max_length == 16
    sentences = ["twenty-one", "five hundred", "nine"]
    source, target = translator.tokenizers["source"], translator.tokenizers["target"]
    ids = source.tokenize(sentences).to_tensor(shape=[3, 16]).numpy()
    for search, flags in (("greedy", ["--search", "greedy"]), ("beam", [])):
        generator = Generator(
            translator.model,
            max_length=16,
            search=search,
            start_id=target.start_id,
            end_id=target.end_id,
            pad_id=target.pad_id,
        )
        out = np.asarray(generator(ids)["token_ids"])
        expected = [t.decode() for t in target.detokenize(out).numpy()]
        assert translator.translate(sentences, search=search) == expected
        assert translator.predict(sentences, search=search) == expected
        shown = printed(
            capsys, "--checkpoint", run("translation_run"), *flags, *sentences
        )
        assert shown == "".join(f"{t}\n" for t in expected)


def test_translation_scores_are_those_of_its_translations():
    from tfformer.training.evaluation.translation import (
        exact_match,
        score_translations,
    )
    from tfformer.training.tasks.translation import TASK

    translator = tfformer.load(run("translation_run"))
    scores = translator.evaluate(search="greedy", limit=6, progress=lambda _: None)
    pairs = TASK.raw_splits(translator.config.data)["test"][:6]
    hypotheses = translator.translate([s for s, _ in pairs], search="greedy")
    references = [t for _, t in pairs]
    assert scores["sentences"] == 6
    assert scores["exact_match"] == exact_match(
        hypotheses, references, translator.tokenizers["target"]
    )
    assert (
        scores["chrf_cased"] == score_translations(hypotheses, references)["chrf_cased"]
    )
    assert [e["translation"] for e in scores["examples"]] == hypotheses[:5]


# -- causal language model -----------------------------------------------------


def byte_text(ids, prompt_length):
    """The byte tokenizer's text of `ids`: cut at the first end token (id 3)
    after the prompt, reserved ids (< 4) dropped, bytes shifted by 4."""
    ids = [int(i) for i in ids]
    if 3 in ids[prompt_length:]:
        ids = ids[: ids.index(3, prompt_length)]
    return bytes(i - 4 for i in ids if i >= 4).decode("utf-8", "replace")


@pytest.mark.parametrize(
    "settings, flags",
    [
        ({}, []),
        pytest.param(
            {"search": "sample", "seed": 3, "top_k": 5},
            ["--search", "sample", "--seed", "3", "--top-k", "5"],
            marks=pytest.mark.integration,
        ),
        pytest.param(
            {"search": "beam", "beam_width": 2},
            ["--search", "beam", "--beam-width", "2"],
            marks=pytest.mark.integration,
        ),
    ],
    ids=["greedy", "sample", "beam"],
)
def test_generate_is_the_generators_search_and_what_predict_prints(
    capsys, settings, flags
):
    writer = tfformer.load(run("causal_lm_run"))  # bytes, a 16-token context
    assert isinstance(writer.model, CausalLM)
    prompt = "to be"
    ids = [b + 4 for b in prompt.encode()]
    generator = Generator(
        writer.model, max_length=len(ids) + 6, start_id=2, end_id=3, **settings
    )
    out = np.asarray(generator(np.array([ids], "int32"))["token_ids"])[0]
    expected = byte_text(out, len(ids))
    assert writer.generate([prompt], max_new_tokens=6, **settings) == [expected]
    assert "".join(writer.stream(prompt, max_new_tokens=6, **settings)) == expected
    argv = ["--checkpoint", run("causal_lm_run"), "--max-new-tokens", "6", *flags]
    assert printed(capsys, *argv, prompt) == expected + "\n"


def test_score_sums_the_log_probabilities_of_every_window(tmp_path):
    writer = tfformer.load(run("causal_lm_run"))
    text = "to be or not to be, that is the q"  # 33 bytes: two 16-token windows
    ids = np.array([b + 4 for b in text.encode()], "int32")
    expected = 0.0
    for start in (0, 16):
        window = ids[start : start + 17]
        logits = np.asarray(writer.model({"token_ids": window[None, :-1]}))[0]
        log_p = np.log(softmax(logits))
        expected += log_p[np.arange(16), window[1:]].sum()
    scores = writer.score([text, "x", text[:20]])
    assert scores["num_tokens"].tolist() == [32, 0, 19]
    np.testing.assert_allclose(scores["log_likelihood"][:2], [expected, 0.0], rtol=1e-5)
    # The second window of a shorter text: only its real tokens count.
    logits = np.asarray(writer.model({"token_ids": ids[None, 16:19]}))[0]
    tail = np.log(softmax(logits))[np.arange(3), ids[17:20]].sum()
    head = writer.score([text[:17]])["log_likelihood"][0]
    np.testing.assert_allclose(scores["log_likelihood"][2], head + tail, rtol=1e-5)
    # tfformer-evaluate cuts a text the same way (here into whole windows).
    path = tmp_path / "text.txt"
    path.write_text(text)
    result = writer.evaluate(text_path=str(path), progress=lambda _: None)
    assert (result["tokens"], result["window"]) == (32, 16)
    assert result["nats_per_token"] == pytest.approx(-expected / 32, abs=1e-4)


# -- text classification --------------------------------------------------------


def test_classify_is_the_softmax_of_the_model_and_what_predict_prints(capsys, tmp_path):
    classifier = tfformer.load(run("text_classification_run"))
    assert isinstance(classifier.model, TextClassifier)
    texts = ["a good film", "bad dull number 12", "fine"]
    tokenizer = classifier.tokenizers["text"]
    ids = np.zeros((3, 12), "int32")  # [START] tokens [END], padded to 12
    for row, tokens in enumerate(tokenizer.tokenize(texts).to_list()):
        ids[row, : len(tokens) + 2] = [tokenizer.start_id, *tokens, tokenizer.end_id]
    logits = classifier.model({"token_ids": ids, "segment_ids": np.zeros_like(ids)})
    expected = softmax(logits)
    labels, probabilities = classifier.classify(texts)
    np.testing.assert_allclose(probabilities, expected, atol=1e-6)
    names = list(classifier.manifest.labels)
    assert labels == [names[i] for i in expected.argmax(-1)]
    lines = [
        f"{label}\t{p.max():.4f}\t{text}"
        for label, p, text in zip(labels, expected, texts, strict=True)
    ]
    shown = printed(capsys, "--checkpoint", run("text_classification_run"), *texts)
    assert shown == "".join(f"{line}\n" for line in lines)
    assert [r["label"] for r in classifier.predict(texts)] == labels
    # Scored on labelled lines: the share whose label is the argmax.
    truth = [names[0], names[0], names[1]]
    tsv = tmp_path / "labelled.tsv"
    tsv.write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, truth, strict=True)))
    scores = classifier.evaluate(
        tsv_path=str(tsv), confusion_plot=str(tmp_path / "matrix.png")
    )
    assert scores["accuracy"] == pytest.approx(
        np.mean([a == b for a, b in zip(labels, truth, strict=True)])
    )


# -- masked language model -------------------------------------------------------


def test_fill_mask_ranks_the_model_probabilities_and_is_what_predict_prints(capsys):
    encoder = tfformer.load(run("masked_lm_run"))
    assert isinstance(encoder.model, MaskedLM)
    tokenizer = encoder.tokenizers["text"]
    vocabulary = tokenizer.vocabulary
    text = "a 1 [MASK] b [MASK]"
    mask = vocabulary.index("[MASK]")
    a, one, b = (tokenizer.tokenize([w])[0].numpy().tolist() for w in "a1b")
    ids = [tokenizer.start_id, *a, *one, mask, *b, mask, tokenizer.end_id]
    positions = [i for i, t in enumerate(ids) if t == mask]
    logits = encoder.model(
        {
            "token_ids": np.array([ids], "int32"),
            "segment_ids": np.zeros((1, len(ids)), "int32"),
            "mask_positions": np.array([positions], "int32"),
        }
    )
    p = softmax(logits)[0]
    (filled,) = encoder.fill_mask([text], top_k=3)
    assert len(filled) == 2
    for candidates, row in zip(filled, p, strict=True):
        best = np.argsort(-row)[:3]
        assert [token for token, _ in candidates] == [vocabulary[i] for i in best]
        np.testing.assert_allclose([q for _, q in candidates], row[best], atol=1e-6)
    lines = [text] + [
        f"  [MASK] {n}: " + ", ".join(f"{t} {q:.3f}" for t, q in candidates)
        for n, candidates in enumerate(filled, start=1)
    ]
    shown = printed(capsys, "--checkpoint", run("masked_lm_run"), "--top-k", "3", text)
    assert shown == "\n".join(lines) + "\n"
    with pytest.raises(ValueError, match=r"needs at least one \[MASK\]"):
        encoder.fill_mask(["no mask"])


# -- sentence embedding ----------------------------------------------------------


def test_embed_is_the_models_embedding_and_what_predict_prints(capsys):
    embedder = tfformer.load(run("sentence_embedding_converted"))
    assert isinstance(embedder.model, SentenceEmbedder)
    assert embedder.config.model.pooling == embedder.manifest.pooling == "mean"
    texts = ["a man is eating food.", "the dog"]
    tokenizer = embedder.tokenizers["text"]
    rows = [
        [tokenizer.start_id, *tokens, tokenizer.end_id]
        for tokens in tokenizer.tokenize(texts).to_list()
    ]
    ids = np.zeros((2, max(map(len, rows))), "int32")
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    outputs = embedder.model({"token_ids": ids, "segment_ids": np.zeros_like(ids)})
    expected = np.asarray(outputs["embedding"])
    vectors = embedder.embed(texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    cosine = expected[0] @ expected[1]
    cosine /= np.linalg.norm(expected[0]) * np.linalg.norm(expected[1])
    np.testing.assert_allclose(
        embedder.similarity(texts[:1], texts[1:]), [cosine], atol=1e-6
    )
    path = run("sentence_embedding_converted")
    shown = printed(capsys, "--checkpoint", path, *texts)
    lines = [json.loads(x) for x in shown.splitlines()]
    assert [x["text"] for x in lines] == texts
    np.testing.assert_allclose([x["embedding"] for x in lines], expected, atol=1e-6)
    shown = printed(capsys, "--checkpoint", path, "--similarity", "\t".join(texts))
    assert shown == f"{cosine:.4f}\t{texts[0]}\t{texts[1]}\n"


# -- image classification ---------------------------------------------------------


def test_classify_images_is_the_softmax_of_the_model_and_what_predict_prints(
    capsys, tmp_path
):
    import tensorflow as tf

    classifier = tfformer.load(run("vit_converted"))
    assert isinstance(classifier.model, ImageClassifier)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 8, 8, 3), np.uint8)
    expected = softmax(classifier.model(pixels.astype("float32")))
    labels, probabilities = classifier.classify(pixels)
    np.testing.assert_allclose(probabilities, expected, atol=1e-6)
    names = ["cat", "dog", "bird"]
    assert labels == [names[i] for i in expected.argmax(-1)]
    # Files decode to the same pixels (PNG is lossless); a larger image is
    # resized as in training.
    big = np.kron(pixels[1], np.ones((3, 3, 1), np.uint8))  # 24 x 24
    paths = [str(tmp_path / "small.png"), str(tmp_path / "big.png")]
    for path, image in zip(paths, (pixels[0], big), strict=True):
        tf.io.write_file(path, tf.io.encode_png(image))
    _, from_files = classifier.classify(paths)
    np.testing.assert_allclose(from_files[0], expected[0], atol=1e-6)
    _, resized = classifier.classify([big])
    np.testing.assert_allclose(from_files[1], resized[0], atol=1e-6)
    best = np.argsort(-from_files, axis=-1, kind="stable")[:, :2]
    lines = [
        f"{path}\t{names[i]} {p[i]:.4f}\t{names[j]} {p[j]:.4f}"
        for path, (i, j), p in zip(paths, best, from_files, strict=True)
    ]
    shown = printed(capsys, "--checkpoint", run("vit_converted"), "--top", "2", *paths)
    assert shown == "".join(f"{line}\n" for line in lines)


def test_evaluate_names_the_option_a_command_user_typed(capsys):
    capsys.readouterr()
    assert evaluate_cli.main(["--checkpoint", run("sentence_embedding_converted")]) == 2
    assert "give --pairs TSV" in capsys.readouterr().err
    embedder = tfformer.load(run("sentence_embedding_converted"))
    with pytest.raises(ValueError, match="give pairs_path=TSV"):
        embedder.evaluate()
