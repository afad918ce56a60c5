"""A trained run directory as a translator: strings in, strings out."""

import json
import os
import time

import keras
import numpy as np

from tfformer.decoding import Generator
from training.byte_tokenizer import ByteTokenizer
from training.config import config_from_dict
from training.data import tokenizer_file
from training.wordpiece_tokenizer import WordPieceTokenizer

CHECKPOINTS = ("model.keras", "best.keras")


def load_run(run_dir, checkpoint="model.keras"):
    """(config, model, source tokenizer, target tokenizer) of a training run.

    Raises:
        ValueError: `run_dir` is not a finished seq2seq run (the message names
            the missing file), or `checkpoint` is not one of its models.
    """
    if checkpoint not in CHECKPOINTS:
        raise ValueError(
            f"checkpoint must be one of {CHECKPOINTS}. Received: {checkpoint!r}"
        )
    if not os.path.isdir(run_dir):
        raise ValueError(f"Run directory not found. Received: --checkpoint {run_dir!r}")
    config_path = os.path.join(run_dir, "config.json")
    model_path = os.path.join(run_dir, checkpoint)
    for path in (config_path, model_path):
        if not os.path.isfile(path):
            raise ValueError(
                f"{run_dir} is not a finished training run: {os.path.basename(path)} "
                "is missing."
            )
    with open(config_path, encoding="utf-8") as f:
        config = config_from_dict(json.load(f))
    if config.model.family != "seq2seq":
        raise ValueError(
            f"{run_dir} holds a {config.model.family!r} model, not a translator."
        )
    tokenizers = []
    for role in ("source", "target"):
        path = os.path.join(run_dir, tokenizer_file(config.data, role))
        if config.data.tokenizer == "byte":
            tokenizers.append(ByteTokenizer.load(path))
        else:
            tokenizers.append(
                WordPieceTokenizer.load(path, lower_case=config.data.lower_case)
            )
    model = keras.saving.load_model(model_path, compile=False)
    return config, model, tokenizers[0], tokenizers[1]


class Translator:
    """Translates sentences with a trained seq2seq run.

    Args:
        run_dir: a `tfformer-train` output directory.
        checkpoint: "model.keras" (final) or "best.keras".
        search: "greedy" or "beam".
        beam_width, length_penalty: beam search settings.
        max_length: maximum target tokens (start and end included); defaults
            to the training `data.max_length`.
        batch_size: sentences decoded together.
    """

    def __init__(
        self,
        run_dir,
        *,
        checkpoint="model.keras",
        search="beam",
        beam_width=4,
        length_penalty=0.6,
        max_length=None,
        batch_size=32,
    ):
        if search not in ("greedy", "beam"):
            raise ValueError(
                f"search must be 'greedy' or 'beam'. Received: {search!r}"
            )
        config, model, source, target = load_run(run_dir, checkpoint)
        self.config, self.model = config, model
        self.source_tokenizer, self.target_tokenizer = source, target
        self.source_length = config.data.max_length
        self.max_length = max_length or config.data.max_length
        self.batch_size = batch_size
        self.generator = Generator(
            model,
            max_length=self.max_length,
            search=search,
            beam_width=beam_width,
            length_penalty=length_penalty,
            start_id=target.start_id,
            end_id=target.end_id,
            pad_id=target.pad_id,
        )
        self._decode = self.generator.compiled(jit_compile=False)
        self.stats = {"sentences": 0, "tokens": 0, "seconds": 0.0}

    def source_ids(self, sentences):
        """`(batch_size, source_length)` padded ids (rows beyond the batch are 0)."""
        ids = self.source_tokenizer.tokenize(sentences)[:, : self.source_length]
        return ids.to_tensor(shape=[self.batch_size, self.source_length])

    def translate_ids(self, sentences):
        """Generated target ids `(len(sentences), max_length)` (numpy)."""
        out = []
        for start in range(0, len(sentences), self.batch_size):
            chunk = list(sentences[start : start + self.batch_size])
            began = time.perf_counter()
            ids = self._decode(self.source_ids(chunk))["token_ids"].numpy()
            self.stats["seconds"] += time.perf_counter() - began
            ids = ids[: len(chunk)]
            self.stats["sentences"] += len(chunk)
            # Generated tokens: everything after the start token, end included.
            self.stats["tokens"] += int(np.sum(ids[:, 1:] != 0))
            out.append(ids)
        if not out:
            return np.zeros((0, self.max_length), "int32")
        return np.concatenate(out)

    def translate(self, sentences):
        """Translations of `sentences` (a list of str) as a list of str."""
        if isinstance(sentences, str):
            raise TypeError("sentences must be a list of strings, not one string.")
        ids = self.translate_ids(list(sentences))
        if not len(ids):
            return []
        texts = self.target_tokenizer.detokenize(ids).numpy()
        return [t.decode("utf-8", "replace") for t in texts]
