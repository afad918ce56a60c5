"""From a `DataConfig` to tokenizers and tokenized train/validation/test splits."""

import dataclasses
import os
import time

import numpy as np

from training import pipeline
from training.byte_tokenizer import ByteTokenizer
from training.number_words import number_words_splits
from training.text_files import read_labelled_text, read_parallel_text, read_text
from training.wordpiece_tokenizer import WordPieceTokenizer

SPLITS = ("train", "validation", "test")


@dataclasses.dataclass
class Data:
    """Everything a run needs from its data.

    `tokenizers` maps "source"/"target" (seq2seq) or "text" to a tokenizer;
    `examples` maps split names to `pipeline.Examples`; `raw` maps split names
    to the untokenized examples (pairs, or (sentence, label)); `num_classes` is
    set for classification.
    """

    tokenizers: dict
    examples: dict
    raw: dict
    bucket_lengths: tuple
    num_classes: int = 0


def raw_splits(config):
    """Untokenized splits for `config.task` as a dict of lists."""
    task = config.task
    if task == "number_words":
        return number_words_splits(
            config.seed, config.train_size, config.validation_size, config.test_size
        )
    if task == "parallel_text":
        names = {
            "train": "train",
            "validation": config.validation_split_name,
            "test": config.test_split_name,
        }
        return {
            split: read_parallel_text(
                config.source_path.format(split=name),
                config.target_path.format(split=name),
            )
            for split, name in names.items()
        }
    if task == "tfds":
        from training.tfds_source import tfds_translation_splits

        return tfds_translation_splits(
            config.tfds_name,
            source_key=config.source_key,
            target_key=config.target_key,
            data_dir=config.tfds_data_dir or None,
        )
    if task == "text":
        text = read_text(config.text_path)
        cut = int(len(text) * (1 - config.holdout_fraction))
        middle = cut + (len(text) - cut) // 2
        return {
            "train": text[:cut],
            "validation": text[cut:middle],
            "test": text[middle:],
        }
    # labelled_text: a seeded shuffle, then the holdout split in two halves.
    examples = read_labelled_text(config.class_paths)
    order = np.random.default_rng(config.seed).permutation(len(examples))
    examples = [examples[i] for i in order]
    held = int(len(examples) * config.holdout_fraction)
    return {
        "train": examples[2 * held :],
        "validation": examples[:held],
        "test": examples[held : 2 * held],
    }


def _learn_or_load(config, sentences, path, role, progress):
    """A tokenizer read from `path` if it exists, else learned from `sentences`."""
    if config.tokenizer == "byte":
        return ByteTokenizer.load(path) if os.path.isfile(path) else ByteTokenizer()
    if os.path.isfile(path):
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
        sample, config.vocabulary_size, lower_case=config.lower_case
    )
    progress(
        f"Tokenizer ({role}): {tokenizer.vocabulary_size} tokens in "
        f"{time.perf_counter() - began:.0f} s"
    )
    return tokenizer


def tokenizer_file(config, role):
    """File name of a tokenizer inside the run directory."""
    if config.tokenizer == "byte":
        return f"{role}_tokenizer.json"
    return f"{role}_vocab.txt"


def build_dataset(config, directory=None, *, progress=print):
    """Reads `config.task` (a `DataConfig`), gets tokenizers, tokenizes the splits.

    Tokenizers already saved in `directory` are reused (a resumed run keeps its
    vocabulary); new ones are learned from the training split only.

    Returns:
        A `Data`.
    """
    buckets = tuple(config.bucket_lengths) or (config.max_length,)
    raw = raw_splits(config)
    directory = directory or ""

    def path(role):
        return os.path.join(directory, tokenizer_file(config, role))

    if config.task in ("number_words", "parallel_text", "tfds"):
        source = _learn_or_load(
            config, (s for s, _ in raw["train"]), path("source"), "source", progress
        )
        target = _learn_or_load(
            config, (t for _, t in raw["train"]), path("target"), "target", progress
        )
        tokenizers = {"source": source, "target": target}
        examples = {
            split: pipeline.seq2seq_examples(
                source.tokenize([s for s, _ in pairs]),
                target.tokenize([t for _, t in pairs]),
                start_id=target.start_id,
                end_id=target.end_id,
                max_length=config.max_length,
            )
            for split, pairs in raw.items()
        }
        return Data(tokenizers, examples, raw, buckets)
    if config.task == "text":
        lines = raw["train"].split("\n")
        tokenizer = _learn_or_load(config, lines, path("text"), "text", progress)
        examples = {}
        for split, text in raw.items():
            ids = tokenizer.tokenize([text]).flat_values.numpy()
            examples[split] = pipeline.language_model_examples(
                ids, sequence_length=config.max_length
            )
        return Data({"text": tokenizer}, examples, raw, (config.max_length,))
    tokenizer = _learn_or_load(
        config, (s for s, _ in raw["train"]), path("text"), "text", progress
    )
    examples = {
        split: pipeline.classification_examples(
            tokenizer.tokenize([s for s, _ in items]),
            [label for _, label in items],
            start_id=tokenizer.start_id,
            end_id=tokenizer.end_id,
            max_length=config.max_length,
        )
        for split, items in raw.items()
    }
    return Data(
        {"text": tokenizer}, examples, raw, buckets, num_classes=len(config.class_paths)
    )


def save_tokenizers(data, config, directory):
    for role, tokenizer in data.tokenizers.items():
        tokenizer.save(os.path.join(directory, tokenizer_file(config, role)))
