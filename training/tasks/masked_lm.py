"""Masked-language-model pre-training of a BERT-style encoder on plain text.

Data: one or more plain or `.gz` UTF-8 files, one sentence or document per
line (empty lines are skipped); a seeded shuffle of the lines, then
`holdout_fraction` of them for validation and as many for test. Each line is
one example, [START] tokens [END], cut to `max_length`. The WordPiece
vocabulary (learned from the training lines, or read from
`data.vocabulary_path`) has a [MASK] token after the reserved ones.

Masking is dynamic: a fresh draw every time an example is visited (BERT's
15 % and 80/10/10, optionally whole words; `training.text.masking`), made
by tf.data on the CPU side, with a fixed number of prediction slots per
bucket length so every batch keeps a static shape. Validation and test use
one fixed draw, so their figures compare across epochs and runs.

Next-sentence prediction (`data.next_sentence_prediction`, off by default:
RoBERTa found it does not help, and BENCHMARKS.md measures it here) makes
each example a pair, [START] A [END] B [END] with segment ids 0 and 1, cut
longest-first to `max_length`. The text is split into blocks of up to
`NSP_BLOCK_LINES` consecutive lines (a blank line, or a sentence left out by
`exclude_heldout_of`, ends a block), and whole blocks go to the training,
validation and test splits, so a pair never joins lines of two splits. For
a line with a continuation in its block, B is that line half of the time
(label "next"); otherwise B is a random other line of the split ("random").
The draws are made once per run with `data.seed`, as BERT's
create_pretraining_data.py draws its pairs once. The model adds BERT's
classifier on the pooled output, and the loss is the sum of the two
cross-entropies, as BERT's.

Metrics: masked-token loss and accuracy (and next-sentence accuracy). The
predictor (`tfformer.training.predictors.masked_lm`) fills the [MASK]s of a
sentence and reports masked-token accuracy, loss and perplexity on the test
split with the training run's fixed masks (and next-sentence accuracy).
"""

import dataclasses

import numpy as np

from tfformer.errors import InputError
from tfformer.training.tasks.base import (
    PreparedData,
    TextDataConfig,
    TrainingTask,
    bucket_lengths,
    check_holdout_fraction,
    holdout_splits,
    token_compile_arguments,
    tokenizer_entries,
)

MASK = "[MASK]"
# Next-sentence labels: 0 pads (as every label here), then BERT's classes
# shifted by one: 1 = B follows A, 2 = B is a random line.
IS_NEXT, IS_RANDOM = 1, 2
# Lines per block of continuous text in next-sentence splits.
NSP_BLOCK_LINES = 16


@dataclasses.dataclass
class MaskedLMData(TextDataConfig):
    """The corpus and the masking (plus `TextDataConfig`'s text settings)."""

    # Plain or .gz UTF-8 files, one sentence or document per line.
    text_paths: tuple[str, ...] = ()
    # Share of the lines held out for validation, and as many for test.
    holdout_fraction: float = 0.05
    # A text_classification config file: the sentences of its validation
    # and test splits are left out of the corpus (pre-training on the text
    # a classifier trains on, never on the text it is tested on).
    exclude_heldout_of: str | None = None
    # A vocabulary file to use instead of learning one (one token per line,
    # tfformer's reserved tokens first, [MASK] among the tokens).
    vocabulary_path: str | None = None
    # Share of the candidate tokens to predict (BERT: 0.15).
    mask_rate: float = 0.15
    # Of the chosen tokens: replaced by [MASK] / by a random token (BERT:
    # 0.8 / 0.1; the rest stay unchanged).
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    # Choose whole words (every "##" piece of a chosen word) instead of
    # single tokens.
    whole_word_masking: bool = False
    # Pairs of lines with BERT's next-sentence prediction (B follows A in
    # its text, or is a random line) and its pooled classifier.
    next_sentence_prediction: bool = False


class MaskedLMTask(TrainingTask):
    name = "masked_lm"
    DataConfig = MaskedLMData
    backbone_name = "BertBackbone"
    default_preset = "bert_tiny"

    def validate(self, config):
        super().validate(config)
        d = config.data
        if not d.text_paths:
            raise InputError(
                "task 'masked_lm' needs data.text_paths (one or more text files)."
            )
        if d.tokenizer != "wordpiece":
            raise InputError(
                "task 'masked_lm' needs data.tokenizer='wordpiece' (its "
                f"vocabulary holds the {MASK} token). Received: "
                f"data.tokenizer={d.tokenizer!r}"
            )
        check_holdout_fraction(d)
        for name in ("mask_rate", "mask_token_rate", "random_token_rate"):
            value = getattr(d, name)
            if not 0.0 <= value <= 1.0:
                raise InputError(
                    f"data.{name} must be in [0, 1]. Received: data.{name}={value}"
                )
        if d.next_sentence_prediction and d.max_length < 5:
            raise InputError(
                "data.max_length must be >= 5 for next-sentence pairs. "
                f"Received: data.max_length={d.max_length}"
            )
        if d.mask_rate == 0.0:
            raise InputError("data.mask_rate must be positive. Received: 0.0")
        if d.mask_token_rate + d.random_token_rate > 1.0:
            raise InputError(
                "data.mask_token_rate + data.random_token_rate must be <= 1. "
                f"Received: {d.mask_token_rate} + {d.random_token_rate}"
            )

    def raw_splits(self, data_config):
        from tfformer.training.sources.text_files import read_lines

        excluded = set()
        if data_config.exclude_heldout_of:
            excluded = heldout_sentences(data_config.exclude_heldout_of)
        if data_config.next_sentence_prediction:
            return next_sentence_splits(data_config, excluded)
        items = []
        for path in data_config.text_paths:
            items += [
                line
                for line in read_lines(path, allow_empty_lines=True)
                if line.strip() and line not in excluded
            ]
        return holdout_splits(items, data_config)

    def tokenizer(self, data_config, lines, directory, progress=print):
        """The run's WordPiece tokenizer: saved in `directory`, read from
        `data.vocabulary_path`, or learned with [MASK] reserved."""
        from tfformer.training.text.vocabulary import learn_or_load
        from tfformer.training.text.wordpiece import WordPieceTokenizer

        if data_config.vocabulary_path and not (
            directory and _saved_vocabulary(directory)
        ):
            tokenizer = WordPieceTokenizer.load(
                data_config.vocabulary_path, lower_case=data_config.lower_case
            )
        else:
            tokenizer = learn_or_load(
                data_config, lines, directory, "text", progress, extra_tokens=(MASK,)
            )
        check_mask_token(tokenizer, data_config.vocabulary_path)
        return tokenizer

    def prepare(self, config, raw, directory, progress=print):
        data_config = config.data
        lines = raw["train"]
        if data_config.next_sentence_prediction:
            lines = [line for line, _ in lines]
        tokenizer = self.tokenizer(data_config, lines, directory, progress)
        examples = {
            split: self.prepare_lines(tokenizer, data_config, lines)
            for split, lines in raw.items()
        }
        return PreparedData(
            {"text": tokenizer}, examples, raw, bucket_lengths(data_config)
        )

    def run_manifest(self, config, data):
        from tfformer.runs.manifest import MaskedLMManifest

        return MaskedLMManifest(
            tokenizers=tokenizer_entries(config, data),
            max_length=config.data.max_length,
            mask_token=MASK,
        )

    def build_model(self, config, data):
        from tfformer.models import bert_masked_lm, from_preset

        encoder = from_preset(
            self.preset(config.model),
            data.tokenizers["text"].vocabulary_size,
            **{
                **self.model_sizes(config.model),
                "max_sequence_length": max(config.data.max_length, 8),
            },
        )
        nsp = config.data.next_sentence_prediction
        return bert_masked_lm(
            encoder,
            next_sentence_prediction=nsp,
            name="bert_pretraining" if nsp else "bert_masked_lm",
        )

    def compile_arguments(self, config):
        arguments = token_compile_arguments(config)
        if not config.data.next_sentence_prediction:
            return arguments
        from tfformer.training.losses import NextSentenceLoss
        from tfformer.training.metrics import NextSentenceAccuracy

        # Summed, as BERT's; Keras prefixes the metrics with the output names
        # (masked_lm_accuracy, next_sentence_accuracy).
        return {
            "loss": {
                "masked_lm": arguments["loss"],
                "next_sentence": NextSentenceLoss(),
            },
            "metrics": {
                "masked_lm": arguments["metrics"],
                "next_sentence": [NextSentenceAccuracy()],
            },
        }

    def prepare_lines(self, tokenizer, data_config, lines, limit=None):
        """`pipeline.Examples` of `lines` (the first `limit` of them) with
        this task's masking. With next-sentence prediction, `lines` are
        (line, next line or None) items and become pairs, drawn on all of
        `lines` before the cut."""
        from tfformer.training import pipeline

        if data_config.next_sentence_prediction:
            from tfformer.training.tasks.text_classification import encode_texts

            pairs, labels = next_sentence_pairs(lines, data_config.seed)
            pairs, labels = pairs[:limit], labels[:limit]
            ids, segments = encode_texts(tokenizer, pairs, data_config.max_length)
            examples = pipeline.rows_examples(
                {"token_ids": ids, "segment_ids": segments}, labels
            )
            examples.transform = masking_transform(tokenizer, data_config)
            return examples
        lines = lines[:limit]
        examples = pipeline.classification_examples(
            tokenizer.tokenize(lines),
            [0] * len(lines),
            start_id=tokenizer.start_id,
            end_id=tokenizer.end_id,
            max_length=data_config.max_length,
        )
        examples.labels = examples.features["token_ids"]
        examples.transform = masking_transform(tokenizer, data_config)
        return examples


def heldout_sentences(config_path):
    """The validation and test sentences of a text_classification config."""
    from tfformer.training.config import load_config
    from tfformer.training.tasks import get_task

    try:
        config = load_config(config_path)
    except (ValueError, TypeError) as e:
        raise InputError(f"data.exclude_heldout_of={config_path!r}: {e}") from None
    if config.task != "text_classification":
        raise InputError(
            f"data.exclude_heldout_of must be a text_classification config. "
            f"Received: {config_path!r} (task {config.task!r})"
        )
    splits = get_task(config.task).raw_splits(config.data)
    held = set()
    for split in ("validation", "test"):
        for text, _ in splits[split]:
            held.update(text if isinstance(text, tuple) else (text,))
    return held


def check_mask_token(tokenizer, source=None):
    """The mask token must follow the reserved tokens (id 4): ids above it
    are the regular tokens that masking chooses and draws."""
    from tfformer.preprocessing.text import RESERVED_TOKENS

    vocabulary = tokenizer.vocabulary
    if len(vocabulary) <= len(RESERVED_TOKENS) + 1 or (
        vocabulary[len(RESERVED_TOKENS)] != MASK
    ):
        raise InputError(
            f"{source or 'the vocabulary'}: masked language modelling needs "
            f"{MASK} as token {len(RESERVED_TOKENS)}, right after "
            f"{list(RESERVED_TOKENS)}, and regular tokens after it. Received: "
            f"{vocabulary[: len(RESERVED_TOKENS) + 2]}"
        )


def _saved_vocabulary(directory):
    import os

    from tfformer.runs.directory import tokenizer_file

    return os.path.isfile(os.path.join(directory, tokenizer_file("wordpiece", "text")))


def masking_transform(tokenizer, data_config):
    """The `pipeline.Examples.transform` that masks token ids: features get
    the corrupted ids and `mask_positions`, labels become the original ids
    at those positions (0 in unused slots)."""
    import tensorflow as tf

    from tfformer.preprocessing.text import SUFFIX
    from tfformer.training.text.masking import mask_tokens

    vocabulary = tokenizer.vocabulary
    mask_id = vocabulary.index(MASK)
    continues_word = None
    if data_config.whole_word_masking:
        continues_word = tf.constant([t.startswith(SUFFIX) for t in vocabulary])
    rate = data_config.mask_rate

    def transform(features, labels, seed):
        # The original ids are the token ids; with next-sentence pairs the
        # labels are the pair's class.
        ids = features["token_ids"]
        length = tf.shape(ids)[0]
        slots = tf.maximum(
            1, tf.cast(tf.math.ceil(rate * tf.cast(length - 2, tf.float32)), tf.int32)
        )
        masked, positions, targets = mask_tokens(
            ids,
            seed,
            num_predictions=slots,
            mask_id=mask_id,
            first_regular_id=mask_id + 1,
            vocabulary_size=len(vocabulary),
            rate=rate,
            mask_token_rate=data_config.mask_token_rate,
            random_token_rate=data_config.random_token_rate,
            continues_word=continues_word,
        )
        features = {**features, "token_ids": masked, "mask_positions": positions}
        if data_config.next_sentence_prediction:
            targets = {"masked_lm": targets, "next_sentence": tf.reshape(labels, [1])}
        return features, targets

    return transform


def next_sentence_splits(data_config, excluded):
    """The splits of `data.text_paths` for next-sentence prediction: lists of
    (line, the next line of its block or None), whole blocks per split."""
    from tfformer.training.sources.text_files import read_lines

    blocks = []
    for path in data_config.text_paths:
        block = []
        for line in read_lines(path, allow_empty_lines=True):
            if line.strip() and line not in excluded:
                block.append(line)
                if len(block) < NSP_BLOCK_LINES:
                    continue
            # A full block, a blank line or a left-out sentence ends a block.
            if block:
                blocks.append(block)
            block = []
        if block:
            blocks.append(block)
    return {
        split: [
            (line, following)
            for block in chosen
            for line, following in zip(block, [*block[1:], None], strict=True)
        ]
        for split, chosen in holdout_splits(blocks, data_config).items()
    }


def next_sentence_pairs(items, seed):
    """((A, B) pairs, labels) of (line, next line or None) items: B is the
    next line (label IS_NEXT) with probability 1/2 when there is one, else a
    random line of `items` other than A (IS_RANDOM); drawn with `seed`.

    Raises:
        ValueError: a single item (no other line to draw).
    """
    if len(items) == 1:
        raise InputError(
            "next-sentence prediction needs at least 2 lines in each split "
            f"(a random B is another line). Received: 1 line ({items[0][0]!r})"
        )
    import zlib

    # The split's own draws: its first line is part of the seed (splits of
    # one size would otherwise get the same label sequence).
    first = zlib.crc32(items[0][0].encode("utf-8")) if items else 0
    rng = np.random.default_rng([seed, 0x4E5, first])
    lines = [line for line, _ in items]
    pairs, labels = [], []
    for index, (line, following) in enumerate(items):
        if following is not None and rng.random() < 0.5:
            pairs.append((line, following))
            labels.append(IS_NEXT)
            continue
        other = index
        while other == index:  # terminates: a split has >= 2 lines
            other = int(rng.integers(len(lines)))
        pairs.append((line, lines[other]))
        labels.append(IS_RANDOM)
    return pairs, labels


TASK = MaskedLMTask()
