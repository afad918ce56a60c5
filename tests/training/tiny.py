"""Config overrides that shrink a run to seconds; shared by the training tests."""

# Tiny runs train without XLA: at these sizes compiling the train and
# evaluation steps costs more than running them (the tiny translator's 30
# steps: 35 s with the default config's XLA, 18 s without, on one core).
# The XLA path keeps its own tests: test_trainer.py's lowering test, the
# executions test's XLA case (integration tier) and the slow kill-and-resume
# run ask for it.
NO_XLA = "train.jit_compile=false"

# A one-layer, 32-wide model of any family, trained without XLA.
TINY_MODEL = [
    "model.num_layers=1",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
    NO_XLA,
]

# The number-words task with a small vocabulary and one length bucket: each
# bucket shape is one more trace of the train step (seconds per tiny run), so
# the tests of bucketing itself ask for TWO_BUCKETS.
TINY_NUMBER_WORDS = [
    "data.vocabulary_size=300",
    "data.max_length=32",
    "data.bucket_lengths=[32]",
    *TINY_MODEL,
    "train.batch_size=16",
]
TWO_BUCKETS = "data.bucket_lengths=[16,32]"


def train_tiny_translator(out, steps):
    """Trains a tiny number-words translator into `out` for `steps` steps;
    returns the run directory (for tests that need a finished run)."""
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    config = load_config(
        overrides=[
            *TINY_NUMBER_WORDS,
            "data.train_size=600",
            "data.validation_size=16",
            "data.test_size=16",
            "data.vocabulary_sample_size=300",
            f"train.steps_per_epoch={steps}",
            "train.epochs=1",
            "train.verbose=0",
            "train.final_evaluation=false",
            f"train.output_dir={out}",
        ]
    )
    train(config, progress=lambda *_: None)
    return str(out)


def train_tiny_gpt(
    root, text, *, context, epochs, overrides=(), run=None, tokenizer="byte"
):
    """Trains a tiny GPT (on bytes, or `tokenizer`) on `text` (written to
    `root`) into `run` (default `root/run`), 6 steps of batch 8 per epoch;
    returns the run directory."""
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    path = root / "text.txt"
    path.write_text(text)
    run = root / "run" if run is None else run
    config = load_config(
        overrides=[
            *TINY_MODEL,
            *overrides,
            "task=causal_lm",
            f"data.text_path={path}",
            f"data.tokenizer={tokenizer}",
            f"data.max_length={context}",
            "model.preset=gpt_tiny",
            "train.batch_size=8",
            "train.steps_per_epoch=6",
            f"train.epochs={epochs}",
            "train.warmup_steps=5",
            "train.verbose=0",
            f"train.output_dir={run}",
        ]
    )
    train(config, progress=lambda *_: None)
    return str(run)


# The text and context of the session's shared tiny GPT (`tiny_gpt_run`).
GPT_LINE = "to be or not to be, that is the question.\n"
GPT_CONTEXT = 32


def train_shared_gpt(root, run):
    """The session's tiny GPT: two layers (so that per-layer caches are
    told apart), 20 epochs (120 steps) of `GPT_LINE` repeated, enough to
    predict the line's next byte at 1.65 nats (uniform: 5.56) with a top
    token that changes along the line, which quantized exports are held to."""
    return train_tiny_gpt(
        root,
        GPT_LINE * 80,
        context=GPT_CONTEXT,
        epochs=20,
        overrides=["model.num_layers=2"],
        run=run,
    )


# The session's tiny text classifier (`tiny_classifier_run`): a sentence's
# class is its last word, after 2 to 8 filler words (some not ASCII).
CLASSIFIER_MAX_LENGTH = 16
BAD = ["awful", "dull", "boring", "bad"]
GOOD = ["great", "fine", "superb", "good"]
FILLER = ["the", "film", "was", "really", "quite", "a", "plot", "é", "naïve", "!"]


def cue_sentences(rng, cue_words, count):
    """`count` sentences of filler words ending in one of `cue_words`."""
    return [
        " ".join(
            [*rng.choice(FILLER, rng.integers(2, 9)).tolist(), rng.choice(cue_words)]
        )
        for _ in range(count)
    ]


def tiny_classifier_overrides(run):
    """The tiny classifier's config overrides (`train_tiny_classifier`),
    data files aside, writing to `run`."""
    return [
        *TINY_MODEL,
        "task=text_classification",
        "model.preset=bert_tiny",
        "data.vocabulary_size=80",
        f"data.max_length={CLASSIFIER_MAX_LENGTH}",
        "data.bucket_lengths=[16]",
        "data.holdout_fraction=0.2",
        "train.batch_size=8",
        "train.steps_per_epoch=8",
        "train.epochs=6",
        "train.warmup_steps=10",
        "train.learning_rate_scale=0.3",
        "train.verbose=0",
        "train.label_smoothing=0.0",
        f"train.output_dir={run}",
    ]


def train_tiny_classifier(root, run=None, *, pairs=False):
    """Trains a one-layer BERT classifier into `run` (default `root/run`) on
    sentences written to `root`: negative and positive sentences (two class
    files) or, with `pairs`, a TSV of sentence pairs whose second sentence's
    last word gives one of three classes. 6 epochs of 8 steps (batch 8) at a
    learning-rate scale of 0.3, in one length bucket (each bucket is one more
    trace of the train and test steps): enough to learn the last word (the
    two-class run's validation accuracy was 1.0 with train.seed 0 to 3; at a
    scale of 1.0, over 5 epochs in two buckets, these sentences stayed at
    chance for seeds 0 to 3).
    Returns the run directory."""
    import numpy as np

    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    rng = np.random.default_rng(0)
    run = root / "run" if run is None else run
    overrides = tiny_classifier_overrides(run)
    if pairs:
        lines = []
        for label in rng.integers(0, 3, 240):
            first = " ".join(rng.choice(FILLER, rng.integers(1, 12)))
            second = cue_sentences(rng, [BAD, GOOD, FILLER][label], 1)[0]
            lines.append(f"{first}\t{second}\t{['neg', 'pos', 'neutral'][label]}")
        tsv = root / "pairs.tsv"
        tsv.write_text("\n".join(lines) + "\n")
        overrides.append(f"data.tsv_path={tsv}")
    else:
        negative, positive = root / "neg.txt", root / "pos.txt"
        negative.write_text("\n".join(cue_sentences(rng, BAD, 150)))
        positive.write_text("\n".join(cue_sentences(rng, GOOD, 150)))
        overrides += [
            f"data.class_paths={negative},{positive}",
            "data.class_names=negative,positive",
        ]
    train(load_config(overrides=overrides), progress=lambda *_: None)
    return str(run)
