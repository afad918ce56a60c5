"""A run's tokenizers: learned from the training split, or reloaded from the
run directory (a resumed run keeps its vocabulary)."""

import os
import time

import numpy as np

from tfformer.errors import InputError
from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.sentencepiece_tokenizer import SentencePieceTokenizer
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.runs.directory import tokenizer_file
from tfformer.training.text.wordpiece import WordPieceTokenizer


def learn_or_load(
    config, sentences, directory, role, progress=print, *, extra_tokens=()
):
    """The `role` tokenizer of `config` (a text task's data config).

    Read from `directory` if its file is there, else learned from
    `sentences` (WordPiece, with `extra_tokens` after the reserved ones) or
    made (bytes). `directory` None: always learned (never a file that
    happens to lie in the working directory).
    """
    if config.tokenizer in ("ids", "bpe", "sentencepiece"):
        raise InputError(
            f"data.tokenizer={config.tokenizer!r} is the tokenizer of converted "
            "checkpoints (token ids, byte-level or SentencePiece BPE), which "
            "tfformer does not "
            "learn: use 'wordpiece' or 'byte', or fine-tune a converted "
            "causal_lm run with model.init_from=RUN."
        )
    path = directory and os.path.join(directory, tokenizer_file(config.tokenizer, role))
    if config.tokenizer == "byte":
        return (
            ByteTokenizer.load(path)
            if path and os.path.isfile(path)
            else ByteTokenizer()
        )
    if path and os.path.isfile(path):
        progress(f"Tokenizer ({role}): reusing {path}")
        return WordPieceTokenizer.load(path, lower_case=config.lower_case)
    sample = list(sentences)
    if len(sample) > config.vocabulary_sample_size:
        order = np.random.default_rng(config.seed).permutation(len(sample))
        sample = [sample[i] for i in order[: config.vocabulary_sample_size]]
    # tensorflow-text's learner reports nothing and can take minutes
    # (about 4 per 8,000-token vocabulary of 29,000 sentences, on 2 cores).
    progress(
        f"Tokenizer ({role}): learning {config.vocabulary_size} WordPiece tokens "
        f"from {len(sample)} sentences..."
    )
    began = time.perf_counter()
    tokenizer = WordPieceTokenizer.learn(
        sample,
        config.vocabulary_size,
        lower_case=config.lower_case,
        extra_tokens=extra_tokens,
    )
    progress(
        f"Tokenizer ({role}): {tokenizer.vocabulary_size} tokens in "
        f"{time.perf_counter() - began:.0f} s"
    )
    return tokenizer


def load_tokenizer(spec):
    """The tokenizer a run directory's `TokenizerSpec` describes."""
    if spec.kind == "byte":
        return ByteTokenizer()
    if spec.kind == "ids":
        return TokenIdTokenizer.load(spec.path)
    if spec.kind == "bpe":
        return ByteLevelBPETokenizer.load(spec.path)
    if spec.kind == "sentencepiece":
        return SentencePieceTokenizer.load(spec.path)
    return WordPieceTokenizer.load(
        spec.path, lower_case=spec.lower_case, **spec.options
    )
