"""Reads a `tfformer-train` run directory: the model, its vocabularies, and
the few config values export needs.

Export may not import `training`, so the run directory is the contract:
`config.json` (the training config as JSON), `model.keras` / `best.keras`, and
`source_vocab.txt` / `target_vocab.txt` (WordPiece, one token per line) or
`source_tokenizer.json` / `target_tokenizer.json` (bytes).
"""

import dataclasses
import json
import os

import keras

import tfformer.layers  # noqa: F401  (registers the layer classes load_model needs)

CHECKPOINTS = ("model.keras", "best.keras")


@dataclasses.dataclass
class Run:
    """What export needs from a training run."""

    directory: str
    model: keras.Model
    tokenizer: str  # "wordpiece" or "byte"
    source_vocabulary: str  # a file path (wordpiece) or None (byte)
    target_vocabulary: str
    lower_case: bool
    source_length: int  # sources are cut to this many tokens
    max_length: int  # the decoder's length: start token, output, end token
    vocabulary_size: int  # target vocabulary
    source_vocabulary_size: int  # ids the encoder embedding accepts

    def files(self):
        """The vocabulary files to ship next to an exported model."""
        return [p for p in (self.source_vocabulary, self.target_vocabulary) if p]


def read_run(run_dir, checkpoint="model.keras"):
    """A finished seq2seq run directory as a `Run`.

    Raises:
        ValueError: the directory is missing or not a finished translator run
            (the message names the missing file or the wrong model family),
            or `checkpoint` is not one of `CHECKPOINTS`.
    """
    if checkpoint not in CHECKPOINTS:
        raise ValueError(
            f"checkpoint file must be one of {CHECKPOINTS}. Received: {checkpoint!r}"
        )
    if not isinstance(run_dir, str | os.PathLike) or not os.path.isdir(run_dir):
        raise ValueError(
            f"--checkpoint must be a tfformer-train run directory. Received: "
            f"{run_dir!r} (not a directory)"
        )
    run_dir = os.fspath(run_dir)
    config_path = os.path.join(run_dir, "config.json")
    model_path = os.path.join(run_dir, checkpoint)
    for path in (config_path, model_path):
        if not os.path.isfile(path):
            raise ValueError(
                f"{run_dir} is not a finished training run: "
                f"{os.path.basename(path)} is missing."
            )
    with open(config_path, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{config_path} is not valid JSON: {e}") from None
    try:
        family = config["model"]["family"]
        data = config["data"]
        tokenizer = data["tokenizer"]
        max_length = int(data["max_length"])
        lower_case = bool(data.get("lower_case", False))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{config_path} lacks a training config field: {e}") from None
    if family != "seq2seq":
        raise ValueError(
            f"{run_dir} holds a {family!r} model; export builds translators from "
            "seq2seq runs."
        )
    if tokenizer not in ("wordpiece", "byte"):
        raise ValueError(f"{config_path}: unknown data.tokenizer {tokenizer!r}")
    vocabularies = []
    for role in ("source", "target"):
        name = f"{role}_vocab.txt" if tokenizer == "wordpiece" else None
        if name is None:
            vocabularies.append(None)
            continue
        path = os.path.join(run_dir, name)
        if not os.path.isfile(path):
            raise ValueError(f"{run_dir} is not a finished run: {name} is missing.")
        vocabularies.append(path)
    model = keras.saving.load_model(model_path, compile=False)
    if tokenizer == "wordpiece":
        with open(vocabularies[1], encoding="utf-8") as f:
            vocabulary_size = sum(1 for _ in f)
    else:
        vocabulary_size = 260
    names = {layer.name for layer in model.layers}
    # Models that share one embedding have no separate encoder embedding.
    source_embedding = model.get_layer(
        "encoder_embedding" if "encoder_embedding" in names else "decoder_embedding"
    )
    return Run(
        directory=run_dir,
        source_vocabulary_size=int(source_embedding.vocabulary_size),
        model=model,
        tokenizer=tokenizer,
        source_vocabulary=vocabularies[0],
        target_vocabulary=vocabularies[1],
        lower_case=lower_case,
        source_length=max_length,
        max_length=max_length,
        vocabulary_size=vocabulary_size,
    )
