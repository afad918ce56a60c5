"""`tfformer-convert` on small random BERT checkpoints in the Hugging Face
layout (tensor names and shapes as `transformers` saves them; sentence
embedders and `BertForSequenceClassification`), checked against keras-hub
reading the same directory, and against Hugging Face's own tokenizer (the
`tokenizers` package) for the token ids."""

import json
import os
import shutil

import keras
import numpy as np
import pytest

import tfformer
from tests.testing import transformer_blocks, tree_digest
from tests.training.convert.huggingface.testing import assert_refused, changed, quiet
from tests.training.tiny import NO_XLA
from tfformer.training.commands import predict as predict_cli
from tfformer.training.convert import convert
from tfformer.training.tasks import get_task

safetensors_numpy = pytest.importorskip("safetensors.numpy")
tokenizers = pytest.importorskip("tokenizers")

SPECIAL = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    "!", ",", ".", "?", "'", "-", "a", "the", "man", "is", "eat", "##ing", "food",
    "piece", "of", "bread", "horse", "riding", "dog", "##s", "cafe", "e", "x",
    "的", "##x", "ri", "##d", "##e", "t", "##h",
]  # fmt: skip
VOCAB = SPECIAL + WORDS
SIZES = {"hidden": 16, "heads": 2, "layers": 2, "inner": 24, "positions": 20}
SENTENCES = [
    "A man is eating food.",
    "The dogs ride!",
    "Café, the horse-riding man's bread?",
    "的x  a\tman\u200b\x00 eats",
    "",
]


def bert_tensors(rng, *, vocab_size=None, prefix="", pooler=True, **sizes):
    s = {**SIZES, **sizes}
    d, inner = s["hidden"], s["inner"]
    vocab_size = vocab_size or len(VOCAB)

    def normal(*shape, scale=0.3):
        return (scale * rng.normal(size=shape)).astype("float32")

    t = {
        "embeddings.word_embeddings.weight": normal(vocab_size, d),
        "embeddings.position_embeddings.weight": normal(s["positions"], d),
        "embeddings.token_type_embeddings.weight": normal(2, d),
        "embeddings.LayerNorm.weight": 1 + normal(d, scale=0.1),
        "embeddings.LayerNorm.bias": normal(d, scale=0.1),
        "embeddings.position_ids": np.arange(s["positions"])[None].astype("int64"),
    }
    for i in range(s["layers"]):
        layer = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            t[f"{layer}.attention.self.{part}.weight"] = normal(d, d)
            t[f"{layer}.attention.self.{part}.bias"] = normal(d)
        t[f"{layer}.attention.output.dense.weight"] = normal(d, d)
        t[f"{layer}.attention.output.dense.bias"] = normal(d)
        t[f"{layer}.intermediate.dense.weight"] = normal(inner, d)
        t[f"{layer}.intermediate.dense.bias"] = normal(inner)
        t[f"{layer}.output.dense.weight"] = normal(d, inner)
        t[f"{layer}.output.dense.bias"] = normal(d)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            t[f"{layer}.{norm}.weight"] = 1 + normal(d, scale=0.1)
            t[f"{layer}.{norm}.bias"] = normal(d, scale=0.1)
    if pooler:
        t["pooler.dense.weight"] = normal(d, d)
        t["pooler.dense.bias"] = normal(d)
    return {prefix + k: v for k, v in t.items()}


def hf_tokenizer(vocab=VOCAB, lowercase=True):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tok = Tokenizer(
        models.WordPiece(
            vocab={t: i for i, t in enumerate(vocab)},
            unk_token="[UNK]",
            max_input_chars_per_word=100,
        )
    )
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=None,
        lowercase=lowercase,
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tok


def write_checkpoint(
    path,
    rng,
    *,
    tensors=None,
    config=None,
    vocab_txt=False,
    sentence_transformers=None,
):
    """A BertModel checkpoint as `save_pretrained` writes it (plus, with
    `sentence_transformers={"pooling": mode, "normalize": bool}`, the
    sentence-transformers module files)."""
    os.makedirs(path, exist_ok=True)
    s = SIZES
    cfg = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": len(VOCAB),
        "hidden_size": s["hidden"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "intermediate_size": s["inner"],
        "max_position_embeddings": s["positions"],
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "position_embedding_type": "absolute",
        "pad_token_id": 0,
        **(config or {}),
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    safetensors_numpy.save_file(
        tensors if tensors is not None else bert_tensors(rng),
        os.path.join(path, "model.safetensors"),
        metadata={"format": "pt"},
    )
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}, f)
    if vocab_txt:
        with open(os.path.join(path, "vocab.txt"), "w") as f:
            f.write("".join(t + "\n" for t in VOCAB))
    else:
        hf_tokenizer().save(os.path.join(path, "tokenizer.json"))
    if sentence_transformers:
        mode = sentence_transformers["pooling"]
        kinds = [("", "Transformer"), ("1_Pooling", "Pooling")]
        if sentence_transformers["normalize"]:
            kinds.append(("2_Normalize", "Normalize"))
        modules = [
            {
                "idx": i,
                "name": str(i),
                "path": folder,
                "type": f"sentence_transformers.models.{kind}",
            }
            for i, (folder, kind) in enumerate(kinds)
        ]
        with open(os.path.join(path, "modules.json"), "w") as f:
            json.dump(modules, f)
        os.makedirs(os.path.join(path, "1_Pooling"), exist_ok=True)
        with open(os.path.join(path, "1_Pooling", "config.json"), "w") as f:
            json.dump(
                {
                    "word_embedding_dimension": cfg["hidden_size"],
                    "pooling_mode_cls_token": mode == "cls",
                    "pooling_mode_mean_tokens": mode == "mean",
                    "pooling_mode_max_tokens": mode == "max",
                    "pooling_mode_mean_sqrt_len_tokens": False,
                },
                f,
            )
        with open(os.path.join(path, "sentence_bert_config.json"), "w") as f:
            json.dump({"max_seq_length": 16, "do_lower_case": False}, f)
    return path


def keras_hub_backbone(path, monkeypatch):
    """keras-hub's BertBackbone from the same directory. keras-hub builds
    BERT with tanh-approximated GELU; Hugging Face's "gelu" is the exact
    erf form, so the reference is given that (the only change)."""
    keras_hub = pytest.importorskip("keras_hub")
    from keras_hub.src.models.bert import bert_backbone

    monkeypatch.setattr(
        bert_backbone,
        "gelu_approximate",
        lambda x: keras.activations.gelu(x, approximate=False),
    )
    return keras_hub.models.BertBackbone.from_preset(str(path))


def encoder_outputs(model):
    """(sequence output, pooled output) of a converted run's model."""
    return lambda inputs: (
        model(inputs)["sequence_output"],
        model(inputs)["pooled_output"],
    )


def batch(tokenizer, texts, length):
    from tfformer.training.tasks.text_classification import encode_texts

    rows, segments = encode_texts(tokenizer, texts, length)
    ids = np.zeros((len(rows), length), "int32")
    seg = np.zeros_like(ids)
    for i, (r, s) in enumerate(zip(rows, segments, strict=True)):
        ids[i, : len(r)], seg[i, : len(s)] = r, s
    return ids, seg


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert")
    source = write_checkpoint(
        root / "hf",
        np.random.default_rng(0),
        sentence_transformers={"pooling": "mean", "normalize": True},
    )
    run = convert(str(source), str(root / "run"), progress=quiet)
    return source, run


def test_token_ids_equal_hugging_face_tokenizers(converted):
    _, run = converted
    loaded = tfformer.load(run)
    tokenizer = loaded.tokenizers["text"]
    ids, _ = batch(tokenizer, SENTENCES, 16)
    reference = hf_tokenizer()
    for row, text in zip(ids, SENTENCES, strict=True):
        expected = reference.encode(text).ids
        assert row[row != 0].tolist() == expected, text
    # The vocabulary's own specials: [CLS] is id 4 and [SEP] 5 here.
    assert ids[0, 0] == 4 and 5 in ids[0]
    # Pairs follow BERT's template, segment ids included.
    from tfformer.training.tasks.text_classification import encode_texts

    rows, segments = encode_texts(tokenizer, [("a man", "the dog")], 16)
    pair = reference.encode("a man", "the dog")
    assert rows[0] == pair.ids and segments[0] == pair.type_ids


@pytest.mark.parametrize("vocab_txt", [False, True])
def test_hidden_states_and_pooler_equal_keras_hub(tmp_path, monkeypatch, vocab_txt):
    source = write_checkpoint(
        tmp_path / "hf", np.random.default_rng(1), vocab_txt=vocab_txt
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    loaded = tfformer.load(run)
    ids, segments = batch(loaded.tokenizers["text"], SENTENCES[:4], 12)
    segments[1, 4:] = 1  # a second segment somewhere
    ours = encoder_outputs(loaded.model)({"token_ids": ids, "segment_ids": segments})
    theirs = keras_hub_backbone(source, monkeypatch)(
        {"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0}
    )
    real = ids != 0
    assert real.sum(1).tolist() != [12] * 4  # a ragged batch
    np.testing.assert_allclose(
        np.asarray(ours[0])[real],
        np.asarray(theirs["sequence_output"])[real],
        atol=1e-5,
    )
    np.testing.assert_allclose(ours[1], theirs["pooled_output"], atol=1e-5)


@pytest.mark.parametrize(
    "pooling, normalize", [("mean", True), ("cls", False), ("max", True)]
)
def test_embeddings_follow_the_sentence_transformers_modules(
    tmp_path, monkeypatch, pooling, normalize
):
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(2),
        sentence_transformers={"pooling": pooling, "normalize": normalize},
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    loaded = tfformer.load(run)
    assert loaded.directory.manifest.settings() == {
        "max_length": 16,
        "pooling": pooling,
        "normalize": normalize,
    }
    texts = SENTENCES[:4]
    ours = loaded.embed(texts)
    ids, segments = batch(loaded.tokenizers["text"], texts, 16)
    hidden = np.asarray(
        keras_hub_backbone(source, monkeypatch)(
            {"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0}
        )["sequence_output"]
    )
    real = ids != 0
    if pooling == "mean":
        expected = (hidden * real[..., None]).sum(1) / real.sum(1, keepdims=True)
    elif pooling == "cls":
        expected = hidden[:, 0]
    else:
        expected = np.where(real[..., None], hidden, -np.inf).max(1)
    if normalize:
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_predict_prints_embeddings_and_similarities(converted, capsys):
    _, run = converted
    vectors = tfformer.load(run).embed(["a man", "the dog"])
    assert predict_cli.main(["--checkpoint", run, "a man", "the dog"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["text"] for x in lines] == ["a man", "the dog"]
    np.testing.assert_allclose([x["embedding"] for x in lines], vectors, atol=1e-6)
    assert (
        predict_cli.main(["--checkpoint", run, "--similarity", "a man\tthe dog"]) == 0
    )
    score, a, b = capsys.readouterr().out.strip().split("\t")
    assert (a, b) == ("a man", "the dog")
    assert float(score) == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-4)
    assert predict_cli.main(["--checkpoint", run, "--similarity", "no tab"]) == 2
    assert "text_a<TAB>text_b" in capsys.readouterr().err


def test_a_converted_run_is_never_a_training_output_directory(converted, tmp_path):
    """The converted run as both `model.init_from` and `train.output_dir`
    (which used to replace it with the classifier), or as the output of a
    run that starts from a copy of it: refused, every file kept."""
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    _, run = converted
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    before = tree_digest(run)
    for name, lines in (("pos", "a man is eating food\n"), ("neg", "the dog\n")):
        (tmp_path / name).write_text(lines * 20)
    for init_from, refusal in (
        (run, "model.init_from=.* is inside train.output_dir"),
        (str(copy), "holds another run .task: 'sentence_embedding' there"),
    ):
        config = load_config(
            overrides=[
                "task=text_classification",
                f"data.class_paths={tmp_path / 'pos'},{tmp_path / 'neg'}",
                "data.lower_case=true",
                f"model.init_from={init_from}",
                f"train.output_dir={run}",
            ]
        )
        with pytest.raises(ValueError, match=refusal):
            train(config, progress=quiet)
        assert tree_digest(run) == before


@pytest.mark.integration
def test_a_classifier_fine_tunes_from_the_converted_run(converted, tmp_path):
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    _, run = converted
    for name, lines in (("pos", "a man is eating food\n"), ("neg", "the dog\n")):
        (tmp_path / name).write_text(lines * 20)
    config = load_config(
        overrides=[
            "task=text_classification",
            f"data.class_paths={tmp_path / 'pos'},{tmp_path / 'neg'}",
            "data.lower_case=true",
            "data.max_length=16",
            f"model.init_from={run}",
            "model.dropout=0.2",
            "train.epochs=1",
            "train.steps_per_epoch=2",
            "train.batch_size=4",
            "train.verbose=0",
            NO_XLA,
            f"train.output_dir={tmp_path / 'classifier'}",
        ]
    )
    task = get_task("text_classification")
    data = task.prepare(config, task.raw_splits(config.data), None)
    model = task.build_model(config, data)
    # The config's dropout, BERT's placement: no FFN hidden dropout (the
    # converted run records 0.0) unless model.activation_dropout is set.
    blocks = transformer_blocks(model)
    assert {(block.dropout, block.ffn.dropout) for block in blocks} == {(0.2, 0.0)}
    config.model.activation_dropout = 0.05
    again = task.build_model(config, data)
    blocks = transformer_blocks(again)
    assert {(block.dropout, block.ffn.dropout) for block in blocks} == {(0.2, 0.05)}
    config.model.activation_dropout = None
    loaded = tfformer.load(run)
    assert loaded.config.model.activation_dropout == 0.0  # the run's config too
    mine, theirs = model.backbone, loaded.model.backbone
    for part in ("token_embedding", "pooler"):
        for a, b in zip(
            getattr(mine, part).get_weights(),
            getattr(theirs, part).get_weights(),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(
        mine.encoder_blocks[1].get_weights(),
        theirs.encoder_blocks[1].get_weights(),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    train(config, progress=quiet)
    manifest = json.loads((tmp_path / "classifier" / "run.json").read_text())
    assert manifest["tokenizers"]["text"]["special_tokens"]["start"] == "[CLS]"
    loaded = tfformer.load(str(tmp_path / "classifier"))
    assert loaded.tokenizers["text"].start_id == 4


# -- bad input ---------------------------------------------------------------


# -- BertForSequenceClassification: a classifier run -------------------------------


CLASSIFIER_CONFIG = {
    "architectures": ["BertForSequenceClassification"],
    "id2label": {"0": "NEGATIVE", "1": "NEUTRAL", "2": "POSITIVE"},
    "label2id": {"NEGATIVE": 0, "NEUTRAL": 1, "POSITIVE": 2},
}


def classifier_checkpoint(path, rng, config=None, drop=()):
    """A `BertForSequenceClassification` checkpoint ("bert." prefix, a
    `classifier` head of 3 labels) and its head's (weight, bias)."""
    tensors = bert_tensors(rng, prefix="bert.")
    tensors["classifier.weight"] = (0.5 * rng.normal(size=(3, 16))).astype("float32")
    tensors["classifier.bias"] = (0.1 * rng.normal(size=(3,))).astype("float32")
    head = tensors["classifier.weight"], tensors["classifier.bias"]
    for name in drop:
        del tensors[name]
    source = write_checkpoint(
        path, rng, tensors=tensors, config={**CLASSIFIER_CONFIG, **(config or {})}
    )
    return source, head


def test_a_sequence_classifier_converts_to_a_classifier_run(
    tmp_path, monkeypatch, capsys
):
    """Logits = keras-hub's pooled output times the head (Hugging Face's
    `BertForSequenceClassification` at inference); `tfformer-predict`
    prints the label and softmax probability; `tfformer-evaluate --tsv`
    scores labelled lines."""
    from tfformer.training.commands import evaluate as evaluate_cli

    source, (weight, bias) = classifier_checkpoint(
        tmp_path / "hf", np.random.default_rng(8)
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    loaded = tfformer.load(run)
    assert loaded.directory.manifest.labels == ("NEGATIVE", "NEUTRAL", "POSITIVE")
    ids, segments = batch(loaded.tokenizers["text"], SENTENCES[:4], 12)
    ours = np.asarray(loaded.model({"token_ids": ids, "segment_ids": segments}))
    pooled = keras_hub_backbone(source, monkeypatch)(
        {"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0}
    )["pooled_output"]
    expected = np.asarray(pooled) @ weight.T + bias
    np.testing.assert_allclose(ours, expected, atol=1e-5)

    texts = SENTENCES[:3]
    assert predict_cli.main(["--checkpoint", run, *texts]) == 0
    lines = capsys.readouterr().out.splitlines()
    ids, segments = batch(loaded.tokenizers["text"], texts, 20)
    logits = np.asarray(
        loaded.model({"token_ids": ids, "segment_ids": segments}), "float64"
    )
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    names = ["NEGATIVE", "NEUTRAL", "POSITIVE"]
    printed = [line.split("\t") for line in lines]
    assert [(name, text) for name, _, text in printed] == [
        (names[k], t) for k, t in zip(p.argmax(-1), texts, strict=True)
    ]
    np.testing.assert_allclose(
        [float(prob) for _, prob, _ in printed], p.max(-1), atol=1.5e-4
    )
    # Scored on labelled lines: the predicted labels are right by design
    # for the first two, wrong for the third.
    truth = [names[k] for k in p.argmax(-1)]
    truth[2] = names[(p[2].argmax() + 1) % 3]
    tsv = tmp_path / "labelled.tsv"
    tsv.write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, truth, strict=True)))
    out = tmp_path / "scores.json"
    argv = ["--checkpoint", run, "--tsv", str(tsv), "--output", str(out)]
    assert evaluate_cli.main([*argv, "--confusion-plot", str(tmp_path / "c.png")]) == 0
    assert json.loads(out.read_text())["accuracy"] == pytest.approx(2 / 3)
    capsys.readouterr()
    tsv.write_text("A man is eating food.\tHAPPY\n")
    assert evaluate_cli.main(["--checkpoint", run, "--tsv", str(tsv)]) == 2
    assert "--tsv:" in capsys.readouterr().err
    assert evaluate_cli.main(["--checkpoint", run]) == 2  # no test split
    assert "data.class_paths needs a file per class" in capsys.readouterr().err


@pytest.mark.parametrize(
    "config, drop, message",
    [
        ({"problem_type": "multi_label_classification"}, (), "problem_type must be"),
        ({"id2label": {"0": "only"}}, (), "two or more distinct labels"),
        ({"id2label": {"0": "a", "2": "b"}}, (), "id2label must map the ids"),
        ({}, ("bert.pooler.dense.weight",), "no tensor 'bert.pooler.dense.weight'"),
        ({}, ("classifier.bias",), "no tensor 'classifier.bias'"),
    ],
)
def test_bad_sequence_classifiers_are_refused(tmp_path, config, drop, message):
    source, _ = classifier_checkpoint(
        tmp_path / "hf", np.random.default_rng(9), config, drop
    )
    assert_refused(tmp_path, source, message)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"drop": "encoder.layer.1.output.dense.weight"},
            "no tensor 'encoder.layer.1.output.dense.weight'",
        ),
        (
            {"config": {"intermediate_size": 32}},
            r"'encoder.layer.0.intermediate.dense.weight' has shape \[24, 16\]; "
            r"the config implies \[32, 16\]",
        ),
        (
            {"config": {"position_embedding_type": "relative_key"}},
            "position_embedding_type must be 'absolute'.*'relative_key'",
        ),
        ({"config": {"hidden_act": "swish"}}, "hidden_act must be one of .*'swish'"),
        ({"config": {"vocab_size": 99}}, "vocab_size is 99 but the tokenizer has"),
        # A number was a TypeError; a string matched by substring.
        (
            {"config": {"architectures": 3}},
            "architectures must be a list of class names. Received: 3",
        ),
        (
            {"config": {"architectures": "BertForSequenceClassification"}},
            "architectures must be a list of class names",
        ),
        (
            {"extra": "encoder.layer.0.attention.self.distance_embedding.weight"},
            "does not use .*distance_embedding",
        ),
    ],
)
def test_bad_checkpoints_are_refused_naming_the_key(tmp_path, change, message):
    rng = np.random.default_rng(3)
    tensors = changed(bert_tensors(rng), change, np.zeros((4, 2), "float32"))
    source = write_checkpoint(
        tmp_path / "hf", rng, tensors=tensors, config=change.get("config")
    )
    assert_refused(tmp_path, source, message)


def test_evaluate_correlates_cosine_with_the_scores(converted, tmp_path, capsys):
    from scipy import stats

    from tfformer.training.commands import evaluate as evaluate_cli

    _, run = converted
    pairs = [
        ("a man is eating food", "a man eats", 4.5),
        ("the dog", "a horse", 1.0),
        ("cafe", "the bread", 0.5),
        ("a man riding", "the man is riding", 5.0),
        ("dogs", "a dog", 3.0),
    ]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs))
    plot = tmp_path / "scatter.png"
    code = evaluate_cli.main(
        ["--checkpoint", run, "--pairs", str(tsv), "--scatter-plot", str(plot)]
    )
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    loaded = tfformer.load(run)
    a = loaded.embed([p[0] for p in pairs])
    b = loaded.embed([p[1] for p in pairs])
    cosines = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    scores = [p[2] for p in pairs]
    assert results["spearman"] == pytest.approx(
        stats.spearmanr(cosines, scores).statistic, abs=1e-6
    )
    assert results["pearson"] == pytest.approx(
        stats.pearsonr(cosines, scores).statistic, abs=1e-5
    )
    assert plot.read_bytes()[:4] == b"\x89PNG"
    tsv.write_text("a\tb\tnot a number\n")
    assert evaluate_cli.main(["--checkpoint", run, "--pairs", str(tsv)]) == 2
    assert "pairs.tsv:1: expected 'text_a<TAB>text_b<TAB>score'" in (
        capsys.readouterr().err
    )
    assert evaluate_cli.main(["--checkpoint", run]) == 2
    assert "give --pairs TSV" in capsys.readouterr().err


def test_prefixes_old_names_half_precision_and_shards_convert_alike(tmp_path):
    """The same weights saved the ways checkpoints differ: under "bert."
    (`BertForSequenceClassification` and friends, with a head), with
    TF-era LayerNorm names, as float16, and sharded with an index."""
    from safetensors.numpy import save_file

    tensors = bert_tensors(np.random.default_rng(8))
    plain = write_checkpoint(tmp_path / "plain", None, tensors=tensors)
    variant = {}
    for name, value in tensors.items():
        name = name.replace("LayerNorm.weight", "LayerNorm.gamma")
        name = name.replace("LayerNorm.bias", "LayerNorm.beta")
        if value.dtype == np.float32:
            value = value.astype(np.float16)
        variant["bert." + name] = value
    variant["classifier.weight"] = np.zeros((2, SIZES["hidden"]), "float16")
    other = write_checkpoint(tmp_path / "other", None, tensors=variant)
    # Sharded: two files and the index instead of model.safetensors.
    (other / "model.safetensors").unlink()
    names = sorted(variant)
    half = len(names) // 2
    index = {}
    for part, chunk in enumerate((names[:half], names[half:])):
        file = f"model-0000{part + 1}-of-00002.safetensors"
        save_file({n: variant[n] for n in chunk}, str(other / file))
        index.update(dict.fromkeys(chunk, file))
    (other / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": index})
    )
    notes = []
    runs = [
        convert(str(plain), str(tmp_path / "run_plain"), progress=quiet),
        convert(str(other), str(tmp_path / "run_other"), progress=notes.append),
    ]
    assert any("classifier.weight" in n for n in notes)  # named, not converted
    mine, theirs = (tfformer.load(r).model for r in runs)
    for a, b in zip(mine.weights, theirs.weights, strict=True):
        np.testing.assert_array_equal(
            b.numpy(), a.numpy().astype(np.float16).astype(np.float32)
        )


@pytest.mark.parametrize(
    "files, message",
    [
        (
            {"tokenizer_config.json": {"tokenizer_class": "BertJapaneseTokenizer"}},
            "tokenizer_class must be one of .*'BertJapaneseTokenizer'",
        ),
        (
            {"tokenizer_config.json": {"cls_token": "[START]"}},
            "the start token '\\[START\\]' .* is not in the vocabulary",
        ),
        ({"tokenizer_config.json": ["a list"]}, "must hold a JSON object"),
        (
            {"tokenizer.json": {"model": ["a list"]}},
            "model.type must be 'WordPiece' with a vocab",
        ),
        (
            {
                "tokenizer.json": {
                    "normalizer": {"type": "BertNormalizer"},
                    "model": {"type": "WordPiece", "vocab": {"a": 0, "b": "1"}},
                }
            },
            "the vocab's ids must be 0..N-1",
        ),
        (
            {"tokenizer_config.json": {"do_lower_case": "false"}},
            "do_lower_case must be true or false. Received: 'false'",
        ),
        (
            {"tokenizer_config.json": {"strip_accents": 1}},
            "strip_accents must be true or false. Received: 1",
        ),
        ({"modules.json": {"not": "a list"}}, "must hold a JSON list"),
    ],
)
def test_bad_tokenizer_files_are_refused_naming_them(tmp_path, files, message):
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(9))
    for name, content in files.items():
        (source / name).write_text(json.dumps(content))
    assert_refused(tmp_path, source, message)


@pytest.mark.parametrize(
    "path",
    [3, "../outside", "/etc"],
    ids=["number", "parent", "absolute"],
)
def test_a_module_path_outside_the_checkpoint_is_refused(tmp_path, path):
    """modules.json is untrusted: its Pooling path is read, so a number (a
    TypeError) or a folder outside the checkpoint is refused by name."""
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(10),
        sentence_transformers={"pooling": "cls", "normalize": True},
    )
    modules = json.loads((source / "modules.json").read_text())
    pooling = next(m for m in modules if m["type"].endswith("Pooling"))
    pooling["path"] = path
    (source / "modules.json").write_text(json.dumps(modules))
    assert_refused(tmp_path, source, "a module's path must be a folder inside")


def test_a_sentence_transformers_dense_module_is_refused(tmp_path):
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(10),
        sentence_transformers={"pooling": "cls", "normalize": True},
    )
    modules = json.loads((source / "modules.json").read_text())
    dense = {"idx": 2, "name": "2", "path": "2_Dense"}
    modules.insert(2, {**dense, "type": "sentence_transformers.models.Dense"})
    (source / "modules.json").write_text(json.dumps(modules))
    assert_refused(tmp_path, source, r"modules must be among .*models\.Dense")
