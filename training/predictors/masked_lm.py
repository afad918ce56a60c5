"""The predictor of masked-language-model (BERT pre-training) runs: the
[MASK]s of a sentence filled, masked-token scores.

    encoder = tfformer.load("runs/polarity_mlm")
    encoder.fill_mask(["the cat sat on the [MASK] ."], top_k=3)
    encoder.evaluate()["masked_accuracy"]
"""

import math

import numpy as np

from tfformer.errors import InputError, InputTypeError
from tfformer.training.predictors.base import Option, Predictor
from tfformer.training.tasks.masked_lm import MASK


class MaskedLMPredictor(Predictor):
    """Fills [MASK] tokens (see `Predictor` for the arguments and
    attributes)."""

    task = "masked_lm"
    predict_options = (
        Option("--top-k", type=int, default=5, help="candidates shown per [MASK]"),
    )

    def fill_mask(self, texts, *, top_k=5):
        """The `top_k` candidates of each [MASK] of each text: per text, a
        list with one list per [MASK] (in order) of (token, probability)
        pairs, most probable first. Each text is read as in training,
        [START] tokens [END] cut to the run's `max_length`, with each literal
        "[MASK]" as the mask token.

        Raises:
            ValueError: a text without [MASK] (or whose [MASK]s all lie past
                the model's length), or `top_k` below 1.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1. Received: {top_k}")
        if isinstance(texts, str):
            raise InputTypeError("texts must be a list of strings, not one string.")
        # Every text is checked before any is run.
        encoded = [self._masked_input(text) for text in texts]
        vocabulary = self.tokenizers["text"].vocabulary
        out = []
        for ids, positions in encoded:
            probabilities = self.mask_probabilities(ids, positions)
            candidates = []
            for p in probabilities:
                best = np.argsort(-p)[:top_k]
                candidates.append([(vocabulary[i], float(p[i])) for i in best])
            out.append(candidates)
        return out

    def mask_probabilities(self, ids, positions):
        """`(len(positions), vocabulary)` softmax of the masked-LM logits at
        `positions` of one row of token ids."""
        from keras import ops

        outputs = self.model(
            {
                "token_ids": np.array([ids], "int32"),
                "segment_ids": np.zeros((1, len(ids)), "int32"),
                "mask_positions": np.array([positions], "int32"),
            },
            training=False,
        )
        logits = masked_lm_logits(outputs)
        return ops.convert_to_numpy(ops.softmax(logits, axis=-1))[0]

    def predict(self, inputs, *, top_k=5):
        """{"text", "masks": `fill_mask`'s candidates} per input."""
        filled = self.fill_mask(inputs, top_k=top_k)
        return [
            {"text": text, "masks": masks}
            for text, masks in zip(inputs, filled, strict=True)
        ]

    def describe(self, result):
        lines = [result["text"]]
        for number, candidates in enumerate(result["masks"], start=1):
            shown = ", ".join(f"{token} {p:.3f}" for token, p in candidates)
            lines.append(f"  {MASK} {number}: {shown}")
        return "\n".join(lines)

    def evaluate(self, *, limit=None, progress=print):
        """Masked-token accuracy, loss (nats) and perplexity on the test
        split, with the training run's fixed evaluation masks (and
        next-sentence accuracy for a run that trained it)."""
        from keras import ops

        from tfformer.training import pipeline
        from tfformer.training.tasks.base import bucket_lengths
        from tfformer.training.tasks.masked_lm import TASK

        data_config = self.config.data
        lines = TASK.raw_splits(data_config)["test"]
        if not lines:
            raise InputError(f"{self.directory.path}: the test split is empty.")
        # The training run's test pairs, drawn on the whole split, then cut.
        examples = TASK.prepare_lines(
            self.tokenizers["text"], data_config, lines, limit
        )
        dataset = pipeline.evaluation_dataset(
            examples, batch_size=32, bucket_lengths=bucket_lengths(data_config)
        )
        nats, correct, count = 0.0, 0, 0
        next_correct, pairs = 0, 0
        for features, labels in dataset:
            outputs = self.model(features, training=False)
            if isinstance(labels, dict):
                # Next-sentence labels (batch, 1): 0 pads, else 1 + class.
                truth = labels["next_sentence"].numpy()[:, 0]
                guess = 1 + np.argmax(outputs["next_sentence"], axis=-1)
                next_correct += int(((guess == truth) & (truth > 0)).sum())
                pairs += int((truth > 0).sum())
                labels = labels["masked_lm"]
            log_p = ops.convert_to_numpy(
                ops.log_softmax(masked_lm_logits(outputs), axis=-1)
            )
            labels = labels.numpy()
            real = labels != 0
            picked = np.take_along_axis(log_p, labels[..., None], axis=-1)[..., 0]
            nats -= float(picked[real].sum())
            correct += int((log_p.argmax(-1) == labels)[real].sum())
            count += int(real.sum())
            progress(f"scored {count} masked tokens")
        scores = {
            "masked_tokens": count,
            "masked_accuracy": correct / max(count, 1),
            "loss": nats / max(count, 1),
            "perplexity": math.exp(nats / max(count, 1)),
        }
        if pairs:
            scores["next_sentence_accuracy"] = next_correct / pairs
        return scores

    def _masked_input(self, text):
        """(token ids [START] ... [END], positions of the [MASK]s) of a text."""
        tokenizer = self.tokenizers["text"]
        length = self.manifest.max_length
        mask_id = tokenizer.vocabulary.index(MASK)
        ids = masked_sentence_ids(tokenizer, text, mask_id)
        if mask_id not in ids:
            raise InputError(
                f"Each input needs at least one {MASK}. Received: {text!r}"
            )
        ids = [tokenizer.start_id, *ids[: length - 2], tokenizer.end_id]
        positions = [i for i, token in enumerate(ids) if token == mask_id]
        if not positions:
            raise InputError(
                f"The {MASK} of {text!r} lies past the model's {length} tokens."
            )
        return ids, positions


def masked_sentence_ids(tokenizer, text, mask_id):
    """Token ids of `text` with each literal "[MASK]" as the mask id."""
    ids = []
    for number, part in enumerate(text.split(MASK)):
        if number:
            ids.append(mask_id)
        if part.strip():
            ids += tokenizer.tokenize([part])[0].numpy().tolist()
    return ids


def masked_lm_logits(outputs):
    """The masked-LM logits of a pre-training model's outputs."""
    return outputs["masked_lm"] if isinstance(outputs, dict) else outputs
