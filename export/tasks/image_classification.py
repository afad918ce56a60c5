"""Export of image-classification (ViT) runs.

SavedModel (TF Serving), core ops only, loadable with TensorFlow alone:
- `classify` (also `serving_default`): `image_bytes` `(batch,)` strings,
  each an encoded JPEG, PNG, GIF (first frame) or BMP of any size and
  channel count -> `probabilities` `(batch, classes)` float32, `label`
  `(batch,)` string, `label_id` `(batch,)` int32 and `label_names` `(batch,
  classes)` string (every row the same, TF Serving's batch-major format).
  Each image is decoded and resized in the graph exactly as in training
  (`tfformer.preprocessing.images`). Bytes that are no image in those formats
  fail the request with an InvalidArgumentError naming the input's index;
  a header declaring more than `MAX_PIXELS` pixels, or a truncated or
  corrupt image, fails with an InvalidArgumentError saying which.
- `classify_pixels`: `pixels` `(batch, size, size, 3)` uint8, already
  decoded and resized -> the same outputs.

TFLite (LiteRT), builtin ops only: `model.tflite` (or `model_<quantize>`)
with `pixels` uint8 `(1, size, size, 3)` in (the camera-frame convention:
decoded RGB, resized; the model normalizes) and `probabilities` `(1,
classes)` out (int8 for `integer_only`: real = scale * (q - zero point)),
plus `image.json` (size, labels) and `classify_image.py`, a reference
runtime.
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.export import quality, runtimes
from tfformer.export.archive import SignatureArchive
from tfformer.export.exporter import CALIBRATED, Exporter, ExportRun, TFLiteSource
from tfformer.preprocessing.images import MAX_PIXELS, decode_pixels, is_image


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageRun(ExportRun):
    """What export needs from an image-classification run directory."""

    image_size: int  # images are resized to image_size x image_size
    labels: list


class ImageClassifierGraph(tf.Module):
    """The serving functions of one image-classification run."""

    def __init__(self, run):
        super().__init__()
        self.model = run.model
        self.size = run.image_size
        self.labels = tf.constant(run.labels)
        self.settings = {
            "image_size": run.image_size,
            "labels": run.labels,
            "max_pixels": MAX_PIXELS,
        }

    def decode(self, image_bytes):
        """uint8 pixels `(batch, size, size, 3)` of encoded images."""
        image_bytes = tf.reshape(image_bytes, [-1])
        known = is_image(image_bytes)
        # The first unknown input's index (a sentinel keeps argmin defined
        # on an empty batch).
        first_bad = tf.argmin(
            tf.concat([tf.cast(known, tf.int32), [0]], 0), output_type=tf.int32
        )
        check = tf.debugging.Assert(
            tf.reduce_all(known),
            [
                tf.strings.format(
                    "classify: image_bytes[{}] is not a JPEG, PNG, GIF or BMP file",
                    [first_bad],
                )
            ],
        )
        with tf.control_dependencies([check]):
            image_bytes = tf.identity(image_bytes)
        return tf.map_fn(
            lambda data: decode_pixels(data, self.size),
            image_bytes,
            fn_output_signature=tf.TensorSpec([self.size, self.size, 3], tf.uint8),
        )

    def classify_pixels(self, pixels):
        logits = self.model(tf.cast(pixels, tf.float32), training=False)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        best = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        rows = tf.shape(best)[0]
        return {
            "probabilities": probabilities,
            "label": tf.gather(self.labels, best),
            "label_id": best,
            "label_names": tf.tile(self.labels[None, :], [rows, 1]),
        }

    def classify(self, image_bytes):
        return self.classify_pixels(self.decode(image_bytes))

    def write(self, path):
        archive = SignatureArchive()
        archive.track(self.model)
        images = [tf.TensorSpec([None], tf.string, name="image_bytes")]
        pixels = [
            tf.TensorSpec([None, self.size, self.size, 3], tf.uint8, name="pixels")
        ]
        # The first endpoint is also `serving_default` (the archive aliases
        # it): one trace instead of two.
        archive.add_endpoint("classify", self.classify, images)
        archive.add_endpoint("classify_pixels", self.classify_pixels, pixels)
        archive.write_out(path)


class ImageClassificationExporter(Exporter):
    """The image-classification task's exporter."""

    task = "image_classification"
    run_type = ImageRun
    quality_metric = quality.ACCURACY

    def task_run(self, run, model, tokenizers):
        del tokenizers  # images have none
        return ImageRun(
            directory=run.path,
            model=model,
            image_size=run.manifest.image_size,
            labels=list(run.manifest.labels),
        )

    def saved_model(self, run, path, **_):
        graph = ImageClassifierGraph(run)
        graph.write(path)
        return graph.settings

    def tflite_sources(self, run, staging, quantize):
        """A float model takes uint8 pixels through a cast in its graph; a
        calibrated one takes float pixel values (0 to 255) that the
        converter turns into a uint8 input (scale 1, zero point 0 after
        calibration on real images), so no float op is left at the input.
        The weights keep per-channel int8 scales (no tied embedding)."""
        path = os.path.join(staging, "image_classifier")
        archive = SignatureArchive()
        archive.track(run.model)
        calibrated = quantize in CALIBRATED

        def probabilities(pixels):
            logits = run.model(tf.cast(pixels, tf.float32), training=False)
            return {"probabilities": tf.nn.softmax(tf.cast(logits, tf.float32))}

        shape = [1, run.image_size, run.image_size, 3]
        dtype = tf.float32 if calibrated else tf.uint8
        archive.add_endpoint(
            "serving_default",
            probabilities,
            [tf.TensorSpec(shape, dtype, name="pixels")],
        )
        archive.write_out(path)
        return [
            TFLiteSource(
                "model",
                path,
                input_type=tf.uint8 if calibrated else None,
                per_channel_weights=True,
            )
        ]

    def calibration(self, run, paths, quantize, limit=200):
        """Full-int8 samples: the pixels of image files (one path per line of
        `--representative-data`; training images, say)."""
        del quantize  # the float pixels: the same for both
        paths = [p.strip() for p in paths if p.strip()][:limit]
        if not paths:
            raise InputError(
                "--representative-data is empty; calibrating an image classifier "
                "needs image files, one path per line (training images, say)."
            )
        samples = []
        for path in paths:
            pixels = read_image(path, run.image_size, "--representative-data")
            samples.append(pixels[None])
        # A black and a white frame: the calibrated input range is then the
        # whole 0 to 255, so the uint8 input's scale is 1 and its zero
        # point 0 (the app feeds camera pixels as they are). Without them
        # the range is the sample's, and pixel values would be rescaled.
        shape = (1, run.image_size, run.image_size, 3)
        return [
            np.zeros(shape, np.float32),
            np.full(shape, 255.0, np.float32),
            *samples,
        ]

    def device_files(self, run, out_dir):
        """`image.json` (size, labels) and `classify_image.py`."""
        settings = {"image_size": run.image_size, "labels": run.labels}
        runtimes.write_settings(out_dir, "image.json", settings)
        runtimes.ship(out_dir, "classify_image.py")

    def quality_samples(self, run, path):
        """(uint8 pixels (N, size, size, 3), class ids): an .npz of
        `pixels` and `labels` (the run's `heldout.npz`), or TSV rows "image
        file<TAB>label" (a name or an id)."""
        manifest = run.manifest
        labels, size = list(manifest.labels), manifest.image_size
        where, named = str(path), f"--quality-data {path!r}"
        if path is None:
            path = run.heldout_file()
            if path is None:
                return None, (
                    "the run has no held-out images (one trained before "
                    "tfformer wrote them); pass --quality-data FILE"
                )
            where = named = f"the run's held-out images ({path})"
        if str(path).endswith(".npz"):
            pixels, ids = read_npz(path, labels, named)
        else:
            pixels, ids = [], []
            for row in quality.read_examples(path, ("image", "label")):
                image = row["image"].strip()
                pixels.append(read_image(image, size, "--quality-data"))
                ids.append(quality.label_id(row["label"], labels, where))
        pixels, ids = pixels[: quality.MOST_EXAMPLES], ids[: quality.MOST_EXAMPLES]
        if tuple(np.shape(pixels)[1:3]) != (size, size):
            pixels = tf.image.resize(np.asarray(pixels), (size, size)).numpy()
        pixels = np.clip(np.round(pixels), 0, 255).astype(np.uint8)
        return (pixels, np.asarray(ids, np.int64)), where

    def quality(self, run, float32_path, quantized_path, samples):
        from tfformer.export.runtimes.classify_image import ImageClassifier

        pixels, labels = samples
        answers = []
        for path in (float32_path, quantized_path):
            classifier = ImageClassifier(path)
            answers.append(
                [int(np.argmax(classifier.probabilities(p))) for p in pixels]
            )
        return quality.class_figures(answers, labels)


def read_npz(path, labels, where):
    """`pixels` and `labels` of an .npz file (`where` names it in errors),
    checked, or ValueError."""
    try:
        with np.load(path) as arrays:
            pixels, ids = arrays["pixels"], arrays["labels"]
    except (OSError, KeyError, ValueError) as e:
        raise InputError(
            f"{where} must be an .npz of uint8 pixels (N, H, W, 3) and labels (N,): {e}"
        ) from None
    if pixels.dtype != np.uint8 or pixels.ndim != 4 or pixels.shape[-1] != 3:
        raise InputError(
            f"{where}: pixels must be uint8 (N, H, W, 3). Received: "
            f"{pixels.dtype} {pixels.shape}"
        )
    if len(ids) != len(pixels) or not len(ids):
        raise InputError(
            f"{where}: needs one label per image, and images. Received: pixels "
            f"{pixels.shape}, labels {ids.shape}"
        )
    if ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= len(labels):
        raise InputError(f"{where}: labels must be class ids in [0, {len(labels)}).")
    return pixels, ids


def read_image(path, size, flag):
    """uint8 pixels of the image file `path` at `size`, or ValueError."""
    if not os.path.isfile(path):
        raise InputError(f"{flag}: no such image file {path!r}")
    with open(path, "rb") as f:
        data = f.read()
    try:
        return np.asarray(decode_pixels(tf.constant(data), size), np.float32)
    except tf.errors.InvalidArgumentError:
        raise InputError(
            f"{flag}: {path!r} is not an image TensorFlow decodes."
        ) from None


EXPORTER = ImageClassificationExporter()
