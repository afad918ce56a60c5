"""Masked-LM pre-training (`task=masked_lm`) through `train`, `tfformer-predict`
and `tfformer-evaluate`, and a classifier fine-tuned from it with
`model.init_from`."""

import json
import re

import numpy as np
import pytest

from tests.testing import transformer_blocks
from tests.training.tiny import NO_XLA
from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import predict as predict_cli
from tfformer.training.commands import train as train_cli
from tfformer.training.config import load_config
from tfformer.training.trainer import train

# The pre-training corpus repeats one sentence of the first 8 words, so every
# masked word follows from its position (see the closing note of issue 18: a
# corpus where it follows only from the other words of its line, one word
# repeated, stayed at chance for 1,000 steps at this size, while the real
# corpus learns; the benchmark measures that).
WORDS = (
    "red green blue black white brown pink grey gold silver orange purple "
    "cat dog cow horse sheep goat duck fish bird frog bear wolf"
).split()


SENTENCE = " ".join(WORDS[:8])


def mlm_overrides(root, corpus, *extra):
    return [
        "task=masked_lm",
        f"data.text_paths={corpus}",
        "data.vocabulary_size=200",
        "data.max_length=16",
        "data.holdout_fraction=0.1",
        "data.mask_rate=0.3",
        "data.vocabulary_sample_size=200",
        # 3 layers, not bert_tiny's 2: sizes must come from the run.
        "model.num_layers=3",
        "model.hidden_dim=64",
        "model.num_heads=2",
        "model.intermediate_dim=128",
        "model.dropout=0.0",
        "train.batch_size=16",
        "train.epochs=3",
        "train.steps_per_epoch=20",
        "train.optimizer=adamw",
        "train.schedule=cosine",
        "train.learning_rate=0.002",
        "train.warmup_steps=10",
        "train.label_smoothing=0.0",
        "train.verbose=0",
        NO_XLA,
        f"train.output_dir={root}",
        *extra,
    ]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny encoder pre-trained on one sentence: (run dir, TrainResult)."""
    root = tmp_path_factory.mktemp("mlm")
    corpus = root / "cycle.txt.gz"
    import gzip

    with gzip.open(corpus, "wt") as f:
        f.write("\n".join([SENTENCE] * 300) + "\n\n")  # an empty line is skipped
    config = load_config(overrides=mlm_overrides(root / "run", corpus))
    result = train(config, progress=lambda *_: None)
    return str(root / "run"), result


def test_pretraining_learns_the_masked_words(pretrained):
    run, result = pretrained
    vocabulary = open(f"{run}/text_vocab.txt", encoding="utf-8").read().split("\n")[:6]
    assert vocabulary[:5] == ["[PAD]", "[UNK]", "[START]", "[END]", "[MASK]"]
    # Chance over the 8 words is 12.5 %: masked ids, positions and labels
    # line up, or the position would not give the word away.
    assert result.metrics["val_accuracy"] > 0.9
    assert result.metrics["test_accuracy"] > 0.9
    manifest = json.load(open(f"{run}/run.json"))
    assert manifest["task"] == "masked_lm"
    assert manifest["settings"]["mask_token"] == "[MASK]"


def test_fill_mask_prediction_and_evaluation(pretrained, tmp_path, capsys):
    run, result = pretrained
    capsys.readouterr()
    assert (
        predict_cli.main(
            ["--checkpoint", run, "--top-k", "3", "red green [MASK] black white"]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "red green [MASK] black white"
    best = lines[1].split(": ")[1].split(",")[0].split()
    assert best[0] == "blue" and float(best[1]) > 0.5
    assert predict_cli.main(["--checkpoint", run, "no mask here"]) == 2
    assert "needs at least one [MASK]" in capsys.readouterr().err

    output = tmp_path / "eval.json"
    assert evaluate_cli.main(["--checkpoint", run, "--output", str(output)]) == 0
    scores = json.loads(output.read_text())
    # The trainer's test accuracy, over the same fixed evaluation masks.
    assert scores["masked_accuracy"] == pytest.approx(
        result.metrics["test_accuracy"], abs=1e-4
    )
    assert scores["perplexity"] == pytest.approx(np.exp(scores["loss"]))
    assert scores["masked_tokens"] >= 60


def classifier_overrides(root, *extra):
    """Lines of the first 12 words are class 0, of the last 12 class 1."""
    first = root / "first.txt"
    second = root / "second.txt"
    rng = np.random.default_rng(1)
    for path, offset in ((first, 0), (second, 12)):
        path.write_text(
            "\n".join(
                " ".join(WORDS[offset + i] for i in rng.integers(0, 12, 4))
                for _ in range(100)
            )
        )
    return [
        "task=text_classification",
        f"data.class_paths={first},{second}",
        "data.max_length=16",
        "train.batch_size=16",
        "train.epochs=1",
        "train.steps_per_epoch=4",
        "train.optimizer=adamw",
        "train.schedule=linear",
        "train.learning_rate=0.0001",
        "train.final_learning_rate_fraction=0.0",
        "train.warmup_steps=1",
        "train.verbose=0",
        NO_XLA,
        f"train.output_dir={root / 'run'}",
        *extra,
    ]


def test_fine_tuning_starts_from_the_pretrained_encoder(pretrained, tmp_path):
    from tfformer.runs.directory import RunDirectory
    from tfformer.training.trainer import build_dataset, build_model

    run, _ = pretrained
    config = load_config(
        overrides=classifier_overrides(
            tmp_path, f"model.init_from={run}", "model.activation_dropout=0.0"
        )
    )
    data = build_dataset(config, None, progress=lambda *_: None)
    assert (
        data.tokenizers["text"].vocabulary
        == open(f"{run}/text_vocab.txt", encoding="utf-8").read().split("\n")[:-1]
    )
    model = build_model(config, data)
    source = RunDirectory(run).load_model()
    copied = 0
    mine, their = model.backbone, source.backbone
    for layer, theirs in (
        (mine.token_embedding, their.token_embedding),
        (mine.segment_embedding, their.segment_embedding),
        (mine.embeddings_norm, their.embeddings_norm),
        *zip(mine.encoder_blocks, their.encoder_blocks, strict=True),
    ):
        for a, b in zip(layer.get_weights(), theirs.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
            copied += 1
    # Embeddings (3 tables + norm), 3 blocks, and nothing silently skipped.
    assert copied >= 5 + 3 * 12
    # Masked-LM pre-training never trains the pooler: it starts fresh.
    assert not np.allclose(mine.pooler.kernel, their.pooler.kernel)
    blocks = transformer_blocks(model)
    assert len(blocks) == 3
    assert {(block.dropout, block.ffn.dropout) for block in blocks} == {(0.1, 0.0)}
    # Unset, the hidden rate follows model.dropout: the source (trained with
    # the default) records None, not a rate of its own.
    config.model.activation_dropout = None
    blocks = transformer_blocks(build_model(config, data))
    assert {(block.dropout, block.ffn.dropout) for block in blocks} == {(0.1, 0.1)}
    config.model.activation_dropout = 0.0

    result = train(config, progress=lambda *_: None)
    assert result.metrics["global_step"] == 4
    assert (tmp_path / "run" / "text_vocab.txt").read_text() == open(
        f"{run}/text_vocab.txt", encoding="utf-8"
    ).read()


def test_init_from_is_refused_with_the_reason(pretrained, tmp_path, capsys):
    run, _ = pretrained
    base = classifier_overrides(tmp_path, f"model.init_from={run}")
    cases = [
        ("model.num_layers=2", "model.num_layers comes from that run (3)"),
        ("model.activation=relu", "model.activation comes from that run ('gelu')"),
        ("data.lower_case=true", "lower_case=False"),
        ("data.tokenizer=byte", "set data.tokenizer=wordpiece"),
        ("data.max_length=32", "data.max_length must be <= 16"),
        (f"model.init_from={tmp_path}", "run.json is missing"),
    ]
    for override, message in cases:
        config = load_config(overrides=[*base, override])
        with pytest.raises(ValueError, match=re.escape(message)):
            train(config, progress=lambda *_: None)
        assert not (tmp_path / "run").exists()  # refused before writing
    # A run of another family: exit 2, nothing written.
    gpt = tmp_path / "gpt"
    gpt.mkdir()
    (gpt / "run.json").write_text(
        json.dumps(
            {
                "format_version": 1,
                "task": "causal_lm",
                "tokenizers": {"text": {"kind": "byte"}},
                "settings": {"max_length": 8},
            }
        )
    )
    out = tmp_path / "refused"
    config = tmp_path / "classifier.json"
    config.write_text(json.dumps({"task": "text_classification"}))
    overrides = classifier_overrides(tmp_path, f"model.init_from={gpt}")[1:]
    argv = ["--config", str(config), *[f"--set={o}" for o in overrides]]
    code = train_cli.main([*argv, f"--set=train.output_dir={out}"])
    assert code == 2
    assert "holds a 'causal_lm' run" in capsys.readouterr().err
    assert not out.exists()


def test_a_run_directory_with_another_vocabulary_is_not_overwritten(
    pretrained, tmp_path
):
    run, _ = pretrained
    out = tmp_path / "run"
    out.mkdir()
    (out / "text_vocab.txt").write_text("[PAD]\n[UNK]\n[START]\n[END]\nother\n")
    config = load_config(
        overrides=classifier_overrides(tmp_path, f"model.init_from={run}")
    )
    # Its config says it is this run, its vocabulary says otherwise.
    (out / "config.json").write_text(json.dumps(config.to_dict()))
    with pytest.raises(ValueError, match="holds another run's vocabulary"):
        train(config, progress=lambda *_: None)
    assert (out / "text_vocab.txt").read_text().endswith("other\n")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "text_vocab.txt"]


def test_bad_corpora_and_masking_settings(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n" * 20)
    base = mlm_overrides(tmp_path / "run", corpus)
    for override, message in [
        ("data.mask_rate=0", "data.mask_rate must be positive"),
        ("data.mask_rate=1.5", r"data.mask_rate must be in \[0, 1\]"),
        ("data.mask_token_rate=0.95", r"mask_token_rate \+ data.random_token_rate"),
        ("data.tokenizer=byte", "needs data.tokenizer='wordpiece'"),
        ("data.text_paths=", "needs data.text_paths"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_config(overrides=[*base, override])
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("[PAD]\n[UNK]\n[START]\n[END]\na\n[MASK]\n")
    config = load_config(overrides=[*base, f"data.vocabulary_path={vocabulary}"])
    with pytest.raises(ValueError, match=r"needs \[MASK\] as token 4"):
        train(config, progress=lambda *_: None)
    assert not (tmp_path / "run").exists()


@pytest.mark.integration
def test_a_classifier_started_from_a_fine_tuned_classifier_gets_every_layer(
    pretrained, tmp_path
):
    """Sizes come from the initial model, not its config (whose sizes are
    unset when it was itself started from a run)."""
    from tfformer.runs.directory import RunDirectory
    from tfformer.training.trainer import build_dataset, build_model

    run, _ = pretrained
    first = tmp_path / "first"
    first.mkdir()
    train(
        load_config(overrides=classifier_overrides(first, f"model.init_from={run}")),
        progress=lambda *_: None,
    )
    second = tmp_path / "second"
    second.mkdir()
    config = load_config(
        overrides=classifier_overrides(second, f"model.init_from={first / 'run'}")
    )
    data = build_dataset(config, None, progress=lambda *_: None)
    model = build_model(config, data)
    source = RunDirectory(str(first / "run")).load_model()
    mine, their = model.backbone, source.backbone
    for layer, theirs in (
        (mine.encoder_blocks[0], their.encoder_blocks[0]),
        (mine.encoder_blocks[2], their.encoder_blocks[2]),
        (mine.pooler, their.pooler),
    ):
        for a, b in zip(layer.get_weights(), theirs.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    assert len(transformer_blocks(model)) == 3


# -- next-sentence prediction ------------------------------------------------


def test_next_sentence_pairs_are_half_continuations_half_random_lines():
    from tfformer.training.tasks.masked_lm import (
        IS_NEXT,
        IS_RANDOM,
        next_sentence_pairs,
    )

    # Two "files" of 2,000 lines each: a line's continuation is its number + 1
    # within the file; each file's last line has none.
    items = []
    for file in "ab":
        lines = [f"{file}{i}" for i in range(2000)]
        items += list(zip(lines, [*lines[1:], None], strict=True))
    pairs, labels = next_sentence_pairs(items, seed=3)
    assert len(pairs) == len(items) and set(labels) == {IS_NEXT, IS_RANDOM}
    for (a, b), label, (line, following) in zip(pairs, labels, items, strict=True):
        assert a == line and b != a
        if label == IS_NEXT:
            assert b == following  # never across files, never after a last line
    # 1/2 of the 3,998 lines that have a continuation: within 4 sigma.
    nexts = labels.count(IS_NEXT)
    assert abs(nexts - 3998 / 2) < 4 * np.sqrt(3998 / 4), nexts
    # Random B lines come from anywhere (both files), not only A's.
    randoms = [b for (a, b), label in zip(pairs, labels, strict=True) if label == 2]
    assert 0.4 < np.mean([b[0] == "a" for b in randoms]) < 0.6
    assert next_sentence_pairs(items, seed=3) == (pairs, labels)
    assert next_sentence_pairs(items, seed=4) != (pairs, labels)


def test_next_sentence_splits_keep_pairs_inside_blocks_of_continuous_text(tmp_path):
    from tfformer.training.tasks.masked_lm import (
        NSP_BLOCK_LINES,
        MaskedLMData,
        next_sentence_pairs,
        next_sentence_splits,
    )

    # Line "f<file>_<n>": blank lines after every 7th line; "f0_20" is left
    # out (a classifier's held-out sentence).
    paths = []
    for file in range(2):
        lines = []
        for n in range(300):
            lines.append(f"f{file}_{n}")
            if n % 7 == 6:
                lines.append("")
        path = tmp_path / f"text{file}.txt"
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    data = MaskedLMData(
        text_paths=tuple(paths), holdout_fraction=0.1, next_sentence_prediction=True
    )
    splits = next_sentence_splits(data, excluded={"f0_20"})
    seen = [line for items in splits.values() for line, _ in items]
    assert sorted(seen) == sorted(
        f"f{f}_{n}" for f in range(2) for n in range(300) if (f, n) != (0, 20)
    )
    run = 0
    for items in splits.values():
        assert items
        for line, following in items:
            if following is None:
                run = 0
                continue
            run += 1
            file, n = line[1:].split("_")
            # The next line of the same file, never across a blank line, a
            # left-out line or the block size.
            assert following == f"f{file}_{int(n) + 1}"
            assert int(n) % 7 != 6 and line != "f0_19"
            assert run < NSP_BLOCK_LINES
    # A pair never joins two splits.
    for name, items in splits.items():
        lines = {line for line, _ in items}
        assert {f for _, f in items if f is not None} <= lines, name
    with pytest.raises(ValueError, match="at least 2 lines in each split"):
        next_sentence_pairs([("alone", None)], seed=0)


def next_sentence_run(root, steps_per_epoch):
    """A tiny pre-training run with next-sentence prediction on a corpus of
    8 sentences in a cycle (a line's continuation is the next sentence), 3
    epochs: (run dir, TrainResult)."""
    corpus = root / "cycle.txt"
    cycle = [" ".join(WORDS[3 * i : 3 * i + 3]) for i in range(8)]
    corpus.write_text("\n".join(cycle * 100) + "\n")
    config = load_config(
        overrides=mlm_overrides(
            root / "run",
            corpus,
            "data.next_sentence_prediction=true",
            f"train.steps_per_epoch={steps_per_epoch}",
            "train.learning_rate=0.001",
        )
    )
    return str(root / "run"), train(config, progress=lambda *_: None)


@pytest.fixture(scope="module")
def with_next_sentence(tmp_path_factory):
    """A next-sentence run of 3 x 4 steps: the wiring, not the learning."""
    return next_sentence_run(tmp_path_factory.mktemp("nsp"), steps_per_epoch=4)


@pytest.mark.slow
def test_next_sentence_prediction_learns_the_continuations(tmp_path):
    # Both heads stay at chance for ~400 steps, then learn (measured: 92.5 %
    # next-sentence accuracy after 900 steps). Half the pairs are
    # continuations; a random B is A's successor 1 time in 8, so the best
    # rule ("next" exactly for successors) scores 93.75 % and a constant
    # answer 50 %.
    _, result = next_sentence_run(tmp_path, steps_per_epoch=250)
    assert result.metrics["val_next_sentence_accuracy"] > 0.8
    assert result.metrics["val_masked_lm_accuracy"] > 0.9


@pytest.mark.integration
def test_next_sentence_prediction_trains_and_evaluates(with_next_sentence, tmp_path):
    from tfformer.training.trainer import build_dataset

    run, result = with_next_sentence
    metrics = result.metrics
    # Keras names the metrics after the outputs; the token count still
    # reaches tokens/s and stays out of the test metrics.
    assert metrics["real_tokens_per_second"] > 0
    assert "test_masked_lm_real_tokens" not in metrics
    for name in ("next_sentence_accuracy", "masked_lm_accuracy"):
        assert 0 <= metrics["val_" + name] <= 1, name
    # Pairs with segment ids 0 then 1, and labels for both heads.
    config = load_config(f"{run}/config.json")
    data = build_dataset(config, run, progress=lambda *_: None)
    example = data.examples["test"]
    ids = example.features["token_ids"][0].numpy().tolist()
    segments = example.features["segment_ids"][0].numpy().tolist()
    middle = ids.index(3)  # the [END] after A
    assert segments == [0] * (middle + 1) + [1] * (len(ids) - middle - 1)
    assert ids[-1] == 3

    output = tmp_path / "eval.json"
    assert evaluate_cli.main(["--checkpoint", run, "--output", str(output)]) == 0
    scores = json.loads(output.read_text())
    assert scores["masked_accuracy"] == pytest.approx(
        metrics["test_masked_lm_accuracy"], abs=1e-4
    )
    assert scores["next_sentence_accuracy"] == pytest.approx(
        metrics["test_next_sentence_accuracy"], abs=1e-4
    )


@pytest.mark.integration
def test_a_classifier_from_a_next_sentence_run_keeps_the_trained_pooler(
    with_next_sentence, tmp_path
):
    from tfformer.runs.directory import RunDirectory
    from tfformer.training.trainer import build_dataset, build_model

    run, _ = with_next_sentence
    config = load_config(
        overrides=classifier_overrides(tmp_path, f"model.init_from={run}")
    )
    model = build_model(config, build_dataset(config, None, progress=lambda *_: None))
    source = RunDirectory(run).load_model()
    for mine, theirs in zip(
        model.backbone.pooler.get_weights(),
        source.backbone.pooler.get_weights(),
        strict=True,
    ):
        np.testing.assert_array_equal(mine, theirs)
