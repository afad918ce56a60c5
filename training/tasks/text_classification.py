"""Text classification: a BERT-style encoder with a classification head.

Data: one file per class, one sentence per line; a seeded shuffle, then the
holdout split in validation and test halves. Evaluation: accuracy, macro-F1
and the confusion matrix. Prediction: label and probability.
"""

import dataclasses
import os

from tfformer.training.tasks.base import (
    PreparedData,
    Task,
    TextDataConfig,
    check_holdout_fraction,
)


@dataclasses.dataclass
class ClassificationData(TextDataConfig):
    """The labelled files (plus `TextDataConfig`'s text settings)."""

    # One file per class, in class-id order.
    class_paths: tuple[str, ...] = ()
    # Label names, in class-id order; empty: the file names.
    class_names: tuple[str, ...] = ()
    # Share of the examples held out; half validation, half test.
    holdout_fraction: float = 0.1


def label_names(data_config):
    if data_config.class_names:
        return list(data_config.class_names)
    return [os.path.basename(p).removesuffix(".gz") for p in data_config.class_paths]


class TextClassificationTask(Task):
    name = "text_classification"
    DataConfig = ClassificationData
    builder_name = "bert_encoder"
    default_preset = "bert_tiny"

    def validate(self, config):
        super().validate(config)
        d = config.data
        if len(d.class_paths) < 2:
            raise ValueError(
                f"data.class_paths needs a file per class (>= 2). Received: "
                f"{list(d.class_paths)}"
            )
        if d.class_names and len(d.class_names) != len(d.class_paths):
            raise ValueError(
                f"data.class_names must name each of the {len(d.class_paths)} "
                f"classes. Received: {list(d.class_names)}"
            )
        check_holdout_fraction(d)

    def raw_splits(self, data_config):
        import numpy as np

        from tfformer.training.sources.text_files import read_labelled_text

        examples = read_labelled_text(data_config.class_paths)
        order = np.random.default_rng(data_config.seed).permutation(len(examples))
        examples = [examples[i] for i in order]
        held = int(len(examples) * data_config.holdout_fraction)
        return {
            "train": examples[2 * held :],
            "validation": examples[:held],
            "test": examples[held : 2 * held],
        }

    def prepare(self, data_config, raw, directory, progress=print):
        from tfformer.training import pipeline
        from tfformer.training.text.vocabulary import learn_or_load

        tokenizer = learn_or_load(
            data_config, (s for s, _ in raw["train"]), directory, "text", progress
        )
        examples = {
            split: pipeline.classification_examples(
                tokenizer.tokenize([s for s, _ in items]),
                [label for _, label in items],
                start_id=tokenizer.start_id,
                end_id=tokenizer.end_id,
                max_length=data_config.max_length,
            )
            for split, items in raw.items()
        }
        return PreparedData(
            {"text": tokenizer},
            examples,
            raw,
            self.bucket_lengths(data_config),
            labels=tuple(label_names(data_config)),
        )

    def inference_settings(self, config, data):
        return {"max_length": config.data.max_length, "labels": list(data.labels)}

    def build_model(self, config, data):
        from tfformer.models import bert_classifier, from_preset

        sizes = self.model_sizes(config.model)
        encoder = from_preset(
            self.preset(config.model),
            data.tokenizers["text"].vocabulary_size,
            **{**sizes, "max_sequence_length": max(config.data.max_length, 8)},
        )
        return bert_classifier(
            encoder, data.num_classes, dropout=sizes.get("dropout", 0.1)
        )

    def compile_arguments(self, config):
        import keras

        return {
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            # Weights mark the padding rows of the last evaluation batches.
            "weighted_metrics": [
                keras.metrics.SparseCategoricalAccuracy(name="accuracy")
            ],
        }

    # -- inference ---------------------------------------------------------------

    def _probabilities(self, run, sentences, batch_size=64):
        import numpy as np
        from keras import ops

        tokenizer = run.tokenizers["text"]
        length = run.directory.setting("max_length")
        out = []
        for start in range(0, len(sentences), batch_size):
            chunk = sentences[start : start + batch_size]
            body = tokenizer.tokenize(chunk)[:, : length - 2].to_list()
            ids = np.zeros((len(chunk), length), "int32")
            for row, tokens in enumerate(body):
                ids[row, : len(tokens) + 2] = [
                    tokenizer.start_id,
                    *tokens,
                    tokenizer.end_id,
                ]
            logits = run.model(
                {"token_ids": ids, "segment_ids": np.zeros_like(ids)}, training=False
            )
            out.append(ops.convert_to_numpy(ops.softmax(logits, axis=-1)))
        return np.concatenate(out) if out else np.zeros((0, 0), "float32")

    def predict(self, run_dir, args, inputs):
        run = self.load(run_dir, args.model)
        labels = run.directory.setting("labels")
        for sentence, p in zip(
            inputs, self._probabilities(run, list(inputs)), strict=True
        ):
            best = int(p.argmax())
            yield f"{labels[best]}\t{p[best]:.4f}\t{sentence}"

    def evaluate(self, run_dir, args, progress=print):
        """Accuracy, macro-F1 and the confusion matrix on the test split."""
        import numpy as np

        run = self.load(run_dir, args.model)
        test = self.raw_splits(run.config.data)["test"]
        if args.limit:
            test = test[: args.limit]
        labels = run.directory.setting("labels")
        if not test:
            raise ValueError(f"{run.directory.path}: the test split is empty.")
        truth = np.array([label for _, label in test])
        predicted = self._probabilities(run, [s for s, _ in test]).argmax(-1)
        return classification_scores(truth, predicted, labels)


def classification_scores(truth, predicted, labels):
    """Accuracy, per-class and macro F1, and the confusion matrix (rows: true
    class, columns: predicted)."""
    import numpy as np

    n = len(labels)
    confusion = np.zeros((n, n), int)
    np.add.at(confusion, (np.asarray(truth), np.asarray(predicted)), 1)
    tp = np.diag(confusion).astype(float)
    precision = tp / np.maximum(confusion.sum(0), 1)
    recall = tp / np.maximum(confusion.sum(1), 1)
    f1 = np.where(
        precision + recall > 0,
        2 * precision * recall / np.maximum(precision + recall, 1e-12),
        0.0,
    )
    return {
        "examples": int(confusion.sum()),
        "accuracy": float(tp.sum() / max(confusion.sum(), 1)),
        "macro_f1": float(f1.mean()),
        "f1": {label: float(v) for label, v in zip(labels, f1, strict=True)},
        "labels": list(labels),
        "confusion_matrix": confusion.tolist(),
    }


TASK = TextClassificationTask()
