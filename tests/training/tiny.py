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


def train_tiny_gpt(root, text, *, context, epochs, overrides=(), run=None):
    """Trains a tiny byte-level GPT on `text` (written to `root`) into
    `run` (default `root/run`), 6 steps of batch 8 per epoch; returns the run
    directory."""
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
            "data.tokenizer=byte",
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
