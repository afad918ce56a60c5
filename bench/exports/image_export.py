"""An image classifier's exported forms against its Keras model: size,
latency per image, accuracy on the run's test images, and parity.

For one image_classification run it writes the SavedModel and the five
TFLite variants (float32, float16, dynamic-range int8, full int8 with float
fallback and integer-only int8, both calibrated on 200 training images
spread over the training folder) with `tfformer-export`, then classifies
the test images with each:

- Keras: the run's model on the decoded pixels (`tfformer.preprocessing.images`,
  as training decoded them), in batches of 500 for accuracy; latency one
  image at a time (`predict_on_batch`) on the first `--latency-images`;
- SavedModel: `classify` on each test file's encoded bytes (the graph
  decodes and resizes), in batches of 100; latency one image at a time;
- TFLite: `classify_image.py`'s `ImageClassifier` (one interpreter
  thread) on the same decoded pixels, one image at a time, every image.

It reports sizes, accuracy, agreement of the argmax with Keras (the issue's
parity: 1.0 for the SavedModel and TFLite float32), the largest probability
difference from Keras, and the median latency per image with its
10th-90th percentile spread.

Usage: python -m bench.exports.image_export --checkpoint RUN
    [--output bench/results/image_export_cifar10.json] [--latency-images 300]
"""

import json
import os
import tempfile

import tfformer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from bench import common
from bench.exports.classifier_export import VARIANTS
from tfformer.preprocessing.images import decode_pixels
from tfformer.training.predictors.image_classification import class_probabilities
from tfformer.training.sources.image_folders import list_split, resolve


def test_files(data_config):
    """Paths of the test images and of 200 training images, in the order
    training reads them (the test folder must exist)."""
    folder = resolve(data_config.image_dir, progress=lambda m: None)
    test, _, _, _ = list_split(os.path.join(folder, "test"))
    train, _, _, _ = list_split(os.path.join(folder, "train"))
    return test, train[:: max(len(train) // 200, 1)][:200]


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument(
        "--output",
        default=os.path.join("bench", "results", "image_export_cifar10.json"),
    )
    p.add_argument("--latency-images", type=int, default=300)
    args = p.parse_args()
    loaded = tfformer.load(args.checkpoint)
    size = loaded.directory.manifest.image_size
    labels = loaded.directory.manifest.labels
    files, calibration_files = test_files(loaded.config.data)
    truth = np.array([labels.index(f.split(os.sep)[-2]) for f in files])
    encoded = [open(f, "rb").read() for f in files]
    pixels = np.stack([decode_pixels(tf.constant(e), size).numpy() for e in encoded])
    timing = range(min(args.latency_images, len(files)))

    forms = {}
    keras_p = class_probabilities(loaded.model, pixels, batch_size=500)
    _, keras_time = common.latency_per_item(
        lambda i: loaded.model.predict_on_batch(pixels[i : i + 1].astype("float32")),
        timing,
    )
    forms["keras"] = {"latency": keras_time, "probabilities": keras_p}

    work = tempfile.mkdtemp(prefix="image_export_")
    version = common.saved_model_export(args.checkpoint, os.path.join(work, "serving"))
    classify = tf.saved_model.load(version).signatures["classify"]
    saved_p = np.concatenate(
        [
            classify(image_bytes=tf.constant(encoded[i : i + 100]))[
                "probabilities"
            ].numpy()
            for i in range(0, len(encoded), 100)
        ]
    )
    _, saved_time = common.latency_per_item(
        lambda i: classify(image_bytes=tf.constant(encoded[i : i + 1])), timing
    )
    forms["saved_model"] = {
        "latency": saved_time,
        "probabilities": saved_p,
        "bytes": common.directory_bytes(version),
    }
    calibration = os.path.join(work, "calibration.txt")
    with open(calibration, "w", encoding="utf-8") as f:
        f.write("\n".join(calibration_files) + "\n")
    for quantize in VARIANTS:
        out = os.path.join(work, f"tflite_{quantize}")
        path = common.tflite_export(args.checkpoint, quantize, out, calibration)
        device = common.load_script(os.path.join(out, "classify_image.py"))
        runtime = device.ImageClassifier(path, num_threads=1)
        device_p, device_time = common.latency_per_item(runtime.probabilities, pixels)
        forms[f"tflite_{quantize}"] = {
            "latency": device_time,
            "probabilities": device_p,
            "bytes": os.path.getsize(path),
        }
    report = {
        "checkpoint": os.path.abspath(args.checkpoint),
        "test_images": len(files),
        "latency_images": len(timing),
        "forms": {},
    }
    for form, found in forms.items():
        probabilities = found.pop("probabilities")
        predicted = probabilities.argmax(-1)
        found.update(
            {
                "accuracy": float(np.mean(predicted == truth)),
                "argmax_agrees_with_keras": float(
                    np.mean(predicted == keras_p.argmax(-1))
                ),
                "max_probability_difference": float(
                    np.abs(probabilities - keras_p).max()
                ),
            }
        )
        report["forms"][form] = found
        print(form, json.dumps(found), flush=True)
    common.write_result(args.output, report)


if __name__ == "__main__":
    main()
