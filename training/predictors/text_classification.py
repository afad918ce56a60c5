"""The predictor of text-classification runs (trained, or converted from a
BERT sequence classifier): texts or sentence pairs in, labels out.

    classifier = tfformer.load("runs/polarity_finetune")
    labels, probabilities = classifier.classify(["a gripping film"])
    classifier.evaluate()["accuracy"]
"""

import os

import numpy as np

from tfformer.errors import InputError, InputTypeError
from tfformer.training.predictors.base import Option, Predictor

PAIR_INPUT = (
    "This classifier reads sentence pairs: give each input as "
    "'text_a<TAB>text_b'. Received: {!r}"
)


class TextClassificationPredictor(Predictor):
    """Classifies texts, or sentence pairs for a run trained on pairs (see
    `Predictor` for the arguments and attributes; `labels` are the class
    names in class-id order)."""

    task = "text_classification"
    evaluate_options = (
        Option(
            "--confusion-plot",
            metavar="PNG",
            help="where to draw the confusion matrix (default: "
            "confusion_matrix.png in the run directory)",
        ),
        Option(
            "--tsv",
            dest="tsv_path",
            metavar="FILE",
            help="score these lines (text<TAB>label or text_a<TAB>text_b<TAB>"
            "label, labels among the run's) instead of the run's test split "
            "(a converted classifier has none)",
        ),
    )

    @property
    def labels(self):
        return list(self.manifest.labels)

    def probabilities(self, texts, batch_size=64):
        """`(len(texts), classes)` softmax of the model's logits for `texts`
        (strings, or (text_a, text_b) pairs for a pair classifier), encoded
        as in training and padded to the run's `max_length`."""
        from keras import ops

        from tfformer.training.tasks.text_classification import padded_inputs

        texts = self._checked(texts)
        length = self.manifest.max_length
        out = []
        for start in range(0, len(texts), batch_size):
            ids, segment_ids = padded_inputs(
                self.tokenizers["text"],
                texts[start : start + batch_size],
                length,
                width=length,
            )
            logits = self.model(
                {"token_ids": ids, "segment_ids": segment_ids}, training=False
            )
            out.append(ops.convert_to_numpy(ops.softmax(logits, axis=-1)))
        return np.concatenate(out) if out else np.zeros((0, len(self.labels)))

    def logits(self, texts, batch_size=128, progress=None):
        """`(len(texts), classes)` float32 logits of the model for `texts`
        (as `probabilities` takes them), in the order given. Texts are
        batched by length, each batch padded to its longest row rounded up
        to a multiple of 16 tokens: far fewer padding tokens than
        `probabilities`' fixed width, for long lists (a distillation
        teacher's). `progress` (a print-like function) hears about every
        tenth of the texts."""
        from tfformer.training.tasks.text_classification import (
            encode_texts,
            padded_rows,
        )

        texts = self._checked(texts)
        length = self.manifest.max_length
        rows, segments = encode_texts(self.tokenizers["text"], texts, length)
        order = np.argsort([len(row) for row in rows], kind="stable")
        out = np.zeros((len(texts), len(self.labels)), np.float32)
        reported = 0
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            width = max(len(rows[i]) for i in chosen)
            width = min(-(-width // 16) * 16, length)
            ids, segment_ids = padded_rows(
                [rows[i] for i in chosen], [segments[i] for i in chosen], width
            )
            out[chosen] = self.model.predict_on_batch(
                {"token_ids": ids, "segment_ids": segment_ids}
            )
            done = start + len(chosen)
            if progress and done * 10 // len(texts) > reported:
                reported = done * 10 // len(texts)
                progress(f"Teacher logits: {done}/{len(texts)} texts")
        return out

    def classify(self, texts):
        """(the most probable label of each text, a list of str; the
        `probabilities` array)."""
        probabilities = self.probabilities(texts)
        return [self.labels[i] for i in probabilities.argmax(-1)], probabilities

    def predict(self, inputs):
        """{"label", "probability", "input"} per input; a pair classifier
        reads each input as "text_a<TAB>text_b" (or a (text_a, text_b)
        pair)."""
        texts = list(inputs)
        if self.manifest.pairs:
            texts = [as_pair(text) for text in texts]
        labels, probabilities = self.classify(texts)
        return [
            {"label": label, "probability": float(p.max()), "input": text}
            for text, label, p in zip(inputs, labels, probabilities, strict=True)
        ]

    def describe(self, result):
        return f"{result['label']}\t{result['probability']:.4f}\t{result['input']}"

    def evaluate(
        self, *, tsv_path=None, confusion_plot=None, limit=None, progress=print
    ):
        """Accuracy, macro-F1 and the confusion matrix on the run's test
        split, or on the lines of `tsv_path` (text<TAB>label, or
        text_a<TAB>text_b<TAB>label, labels among the run's); the matrix is
        also drawn as a PNG (`confusion_plot`; default:
        confusion_matrix.png in the run directory)."""
        del progress  # one pass, no progress to report
        from tfformer.training.plots import plot_confusion_matrix
        from tfformer.training.sources.text_files import read_labelled_tsv
        from tfformer.training.tasks.text_classification import (
            TASK,
            classification_scores,
        )

        labels = self.labels
        if tsv_path:
            try:
                test, _ = read_labelled_tsv(tsv_path, labels)
            except ValueError as e:
                raise InputError(f"tsv_path: {e}") from None
        else:
            test = TASK.raw_splits(self.config.data)["test"]
        if limit:
            test = test[:limit]
        if not test:
            raise InputError(f"{self.directory.path}: the test split is empty.")
        truth = np.array([label for _, label in test])
        predicted = self.probabilities([text for text, _ in test]).argmax(-1)
        scores = classification_scores(truth, predicted, labels)
        path = self.directory.path
        scores["confusion_plot"] = plot_confusion_matrix(
            scores["confusion_matrix"],
            labels,
            confusion_plot or os.path.join(path, "confusion_matrix.png"),
            title=f"{os.path.basename(os.path.normpath(path))}: "
            f"accuracy {scores['accuracy']:.1%}",
        )
        return scores

    def _checked(self, texts):
        """`texts` as a list, each a str (or a pair for a pair classifier)."""
        if isinstance(texts, str):
            raise InputTypeError("texts must be a list, not one string.")
        texts = list(texts)
        for text in texts:
            pair = isinstance(text, tuple | list)
            if self.manifest.pairs and not (pair and len(text) == 2):
                raise InputError(
                    "This classifier reads sentence pairs: give each as "
                    f"(text_a, text_b). Received: {text!r}"
                )
            if not self.manifest.pairs and not isinstance(text, str):
                raise InputError(
                    f"This classifier reads single texts. Received: {text!r}"
                )
        return [tuple(text) if self.manifest.pairs else text for text in texts]


def as_pair(text):
    """(text_a, text_b) of "text_a<TAB>text_b" (a pair stays as it is)."""
    if isinstance(text, tuple | list):
        return tuple(text)
    if text.count("\t") != 1:
        raise InputError(PAIR_INPUT.format(text))
    return tuple(text.split("\t"))
