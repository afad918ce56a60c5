"""A text classifier's exported forms against its Keras model: size, latency
per sentence, and accuracy on the run's test split.

For one text_classification run it writes the SavedModel (`classify`) and
the five TFLite variants (float32, float16, dynamic-range int8, full int8
with float fallback and integer-only int8, both calibrated on 200 training
sentences) with `tfformer-export`, then
classifies every test sentence one at a time with each:

- Keras: the run's model (graph mode via `model.predict_on_batch`, batch 1,
  inputs from training's encoding);
- SavedModel: `classify` (strings in);
- TFLite: `classify.py`'s `LiteRTClassifier` (the reference tokenizer and
  the interpreter), as an app would.

It reports file sizes, accuracy and macro-F1, agreement of the argmax with
Keras, the largest probability difference from Keras, and the median
latency per sentence with its 10th-90th percentile spread.

Usage: python -m bench.exports.classifier_export --checkpoint RUN
    [--output bench/results/classifier_export.json] [--variants none int8 ...]
"""

import json
import os
import tempfile

import tfformer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from bench import common
from tfformer.training.tasks import get_task
from tfformer.training.tasks.text_classification import (
    classification_scores,
    encode_texts,
)

VARIANTS = ("none", "float16", "int8", "full_int8", "integer_only")


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument(
        "--output", default=os.path.join("bench", "results", "classifier_export.json")
    )
    p.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=list(VARIANTS),
        help="the TFLite variants to make (default: all five)",
    )
    args = p.parse_args()
    task = get_task("text_classification")
    loaded = tfformer.load(args.checkpoint)
    splits = task.raw_splits(loaded.config.data)
    test = splits["test"]
    texts = [t for t, _ in test]
    truth = np.array([label for _, label in test])
    labels = loaded.directory.manifest.labels
    length = loaded.directory.manifest.max_length
    tokenizer = loaded.tokenizers["text"]

    def keras_one(text):
        rows, segments = encode_texts(tokenizer, [text], length)
        logits = loaded.model.predict_on_batch(
            {"token_ids": np.array(rows), "segment_ids": np.array(segments)}
        )
        return tf.nn.softmax(logits[0]).numpy()

    forms = {}
    keras_p, keras_time = common.latency_per_item(keras_one, texts)
    forms["keras"] = {"latency": keras_time, "probabilities": keras_p}
    work = tempfile.mkdtemp(prefix="classifier_export_")
    version = common.saved_model_export(args.checkpoint, os.path.join(work, "serving"))
    served = tf.saved_model.load(version)
    classify = served.signatures["classify"]

    def saved_one(text):
        if isinstance(text, tuple):
            out = classify(text=tf.constant([text[0]]), text_b=tf.constant([text[1]]))
        else:
            out = classify(text=tf.constant([text]))
        return out["probabilities"].numpy()[0]

    saved_p, saved_time = common.latency_per_item(saved_one, texts)
    forms["saved_model"] = {
        "latency": saved_time,
        "probabilities": saved_p,
        "bytes": common.directory_bytes(version),
    }
    calibration = os.path.join(work, "calibration.txt")
    with open(calibration, "w", encoding="utf-8") as f:
        for text, _ in splits["train"][:200]:
            f.write((text if isinstance(text, str) else "\t".join(text)) + "\n")
    for quantize in args.variants:
        out = os.path.join(work, f"tflite_{quantize}")
        path = common.tflite_export(args.checkpoint, quantize, out, calibration)
        device = common.load_script(os.path.join(out, "classify.py"))
        runtime = device.LiteRTClassifier(path, num_threads=1)
        device_p, device_time = common.latency_per_item(
            lambda t, r=runtime: r.classify(t)[1], texts
        )
        forms[f"tflite_{quantize}"] = {
            "latency": device_time,
            "probabilities": device_p,
            "bytes": os.path.getsize(path),
        }
    report = {
        "checkpoint": os.path.abspath(args.checkpoint),
        "test_sentences": len(texts),
        "labels": labels,
        "forms": {},
    }
    for form, found in forms.items():
        probabilities = found.pop("probabilities")
        scores = classification_scores(truth, probabilities.argmax(-1), labels)
        found.update(
            {
                "accuracy": scores["accuracy"],
                "macro_f1": scores["macro_f1"],
                "argmax_agrees_with_keras": float(
                    np.mean(probabilities.argmax(-1) == keras_p.argmax(-1))
                ),
                "max_probability_difference": float(
                    np.abs(probabilities - keras_p).max()
                ),
            }
        )
        report["forms"][form] = found
        print(form, json.dumps(found))
    common.write_result(args.output, report)


if __name__ == "__main__":
    main()
