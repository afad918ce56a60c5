"""The predictor of image-classification runs (a ViT trained, or converted
from Hugging Face): image files or decoded pixels in, classes out.

    classifier = tfformer.load("runs/cifar10_vit")
    labels, probabilities = classifier.classify(["rose.jpg", "tulip.png"])
    classifier.evaluate(attention_plot="rollout.png")["accuracy"]
"""

import os
import re

import numpy as np

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.files import printable
from tfformer.training.predictors.base import Option, Predictor


class ImageClassificationPredictor(Predictor):
    """Classifies images (see `Predictor` for the arguments and attributes;
    `labels` are the class names in class-id order, `image_size` the side
    the model's images have). Images are decoded and resized as in
    training; the model normalizes raw pixel values itself."""

    task = "image_classification"
    inputs_are_paths = True
    predict_options = (
        Option(
            "--top", type=int, default=3, help="classes shown per image (default 3)"
        ),
    )
    evaluate_options = (
        Option(
            "--confusion-plot",
            metavar="PNG",
            help="where to draw the confusion matrix (default: "
            "confusion_matrix.png in the run directory)",
        ),
        Option(
            "--attention-plot",
            metavar="PNG",
            help="also draw attention rollout maps over test images here",
        ),
        Option(
            "--attention-images",
            type=int,
            default=8,
            help="test images in the attention plot (default 8)",
        ),
    )

    @property
    def labels(self):
        return list(self.manifest.labels)

    @property
    def image_size(self):
        return self.manifest.image_size

    def pixels(self, images):
        """uint8 `(n, image_size, image_size, 3)` pixels of `images`: paths
        of image files (JPEG, PNG, GIF or BMP), or decoded RGB pixels (an
        `(n, h, w, 3)` array or a list of `(h, w, 3)` arrays), resized as in
        training."""
        if isinstance(images, str | os.PathLike):
            raise InputTypeError("images must be a list (or an array), not one path.")
        if len(images) and isinstance(images[0], str | os.PathLike):
            return read_image_files([os.fspath(p) for p in images], self.image_size)
        return resized_images(images, self.image_size)

    def probabilities(self, images):
        """`(n, classes)` softmax of the model's logits for `images` (as
        `pixels` takes them)."""
        return class_probabilities(self.model, self.pixels(images))

    def classify(self, images):
        """(the most probable label of each image, a list of str; the
        `probabilities` array)."""
        probabilities = self.probabilities(images)
        return [self.labels[i] for i in probabilities.argmax(-1)], probabilities

    def predict(self, inputs, *, top=3):
        """{"image", "top": [(label, probability)] of the `top` classes,
        most probable first} per image file of `inputs`."""
        if top < 1:
            raise InputError(f"top must be positive. Received: top={top}")
        _, probabilities = self.classify(inputs)
        top = min(top, len(self.labels))
        results = []
        for image, p in zip(inputs, probabilities, strict=True):
            best = np.argsort(-p, kind="stable")[:top]
            results.append(
                {"image": image, "top": [(self.labels[i], float(p[i])) for i in best]}
            )
        return results

    def describe(self, result):
        shown = (f"{label} {p:.4f}" for label, p in result["top"])
        return "\t".join([printable(os.fspath(result["image"])), *shown])

    def evaluate(
        self,
        *,
        confusion_plot=None,
        attention_plot=None,
        attention_images=8,
        limit=None,
        progress=print,
    ):
        """Accuracy, per-class accuracy, macro-F1 and the confusion matrix
        on the run's test split (the matrix also as a PNG, `confusion_plot`;
        default: confusion_matrix.png in the run directory); with
        `attention_plot` (a PNG path), attention rollout maps of
        `attention_images` test images taking the classes in turn."""
        from tfformer.training.plots import plot_confusion_matrix
        from tfformer.training.tasks.image_classification import TASK
        from tfformer.training.tasks.text_classification import (
            classification_scores,
        )

        if attention_plot and attention_images < 1:
            raise InputError(
                f"attention_images must be positive. Received: {attention_images}"
            )
        raw = TASK.raw_splits(self.config.data, progress)
        self.check_test_split(raw["fingerprint"])
        pixels, truth = raw["test"]
        if limit:
            pixels, truth = pixels[:limit], truth[:limit]
        labels = self.labels
        progress(f"Classifying {len(truth):,} test images")
        probabilities = class_probabilities(self.model, pixels)
        predicted = probabilities.argmax(-1)
        scores = classification_scores(truth, predicted, labels)
        matrix = np.asarray(scores["confusion_matrix"])
        scores["class_accuracy"] = {
            label: float(matrix[i, i] / max(matrix[i].sum(), 1))
            for i, label in enumerate(labels)
        }
        name = os.path.basename(os.path.normpath(self.directory.path))
        scores["confusion_plot"] = plot_confusion_matrix(
            matrix,
            labels,
            confusion_plot or os.path.join(self.directory.path, "confusion_matrix.png"),
            title=f"{name}: accuracy {scores['accuracy']:.1%}",
        )
        if attention_plot:
            from tfformer.training.evaluation.attention_rollout import (
                attention_rollout,
                plot_rollout,
            )

            shown = spread_over_classes(truth, attention_images)
            maps = attention_rollout(self.model, pixels[shown].astype("float32"))
            scores["attention_plot"] = plot_rollout(
                pixels[shown],
                maps,
                [labels[truth[i]] for i in shown],
                [
                    f"{labels[predicted[i]]} {probabilities[i, predicted[i]]:.0%}"
                    for i in shown
                ],
                attention_plot,
                title=f"{name}: attention rollout",
            )
        return scores

    def check_test_split(self, fingerprint):
        """Refuses to score the run on a test split other than the one it
        held out (`fingerprint`: the digest of the images it now comes
        from): files added, removed or renamed since training would change
        the seeded split (and could move training images into it)."""
        saved = self.manifest.test_split_fingerprint
        if saved is not None and saved != fingerprint:
            d = self.config.data
            source = d.image_dir if d.image_dir is not None else d.tfds_name
            raise InputError(
                f"The images of {source} changed since {self.directory.path} was "
                f"trained (test split fingerprint {fingerprint}, trained "
                f"with {saved}): its test split would not be the one the run "
                "held out. Restore the images, or train again."
            )


def class_probabilities(model, pixels, batch_size=256):
    """Class probabilities `(n, classes)` of uint8 `pixels` `(n, size, size,
    3)`: the softmax of `model`'s logits."""
    from keras import ops

    out = [
        ops.convert_to_numpy(
            ops.softmax(
                model(
                    pixels[start : start + batch_size].astype("float32"),
                    training=False,
                ),
                axis=-1,
            )
        )
        for start in range(0, len(pixels), batch_size)
    ]
    return np.concatenate(out) if out else np.zeros((0, 0), "float32")


def resized_images(images, size):
    """uint8 `(n, size, size, 3)` of decoded RGB images (an `(n, h, w, 3)`
    array or a list of `(h, w, 3)` arrays), resized as in training."""
    from tfformer.preprocessing.images import resize_pixels

    out = np.zeros((len(images), size, size, 3), np.uint8)
    for i, image in enumerate(images):
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[-1] != 3:
            raise InputError(
                "images must be RGB pixels, (height, width, 3) each. Received: "
                f"an image of shape {image.shape}"
            )
        if image.dtype != np.uint8:
            raise InputError(
                "images must be uint8 pixels (0 to 255), as decoded. Received: "
                f"dtype {image.dtype}"
            )
        out[i] = np.asarray(resize_pixels(image, size))
    return out


def spread_over_classes(truth, count):
    """Indices of up to `count` examples taking the classes in turn (the
    first example of each class, then the second, ...)."""
    truth = np.asarray(truth)
    queues = [list(np.flatnonzero(truth == c)) for c in np.unique(truth)]
    chosen = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(int(queue.pop(0)))
    return np.asarray(chosen, int)


def read_image_files(paths, size):
    """uint8 pixels `(n, size, size, 3)` of image files, decoded and resized
    as in training. ValueError naming the file that is missing or does not
    decode."""
    import tensorflow as tf

    from tfformer.preprocessing.images import MAX_PIXELS, decode_pixels

    pixels = np.zeros((len(paths), size, size, 3), np.uint8)
    for i, path in enumerate(paths):
        if not os.path.isfile(path):
            raise InputError(f"No such image file: {printable(path)!r}")
        with open(path, "rb") as f:
            data = f.read()
        try:
            pixels[i] = decode_pixels(tf.constant(data), size).numpy()
        except tf.errors.InvalidArgumentError as e:
            # TensorFlow's message without its function-node and op wrapping.
            first = re.sub(r"\{\{.*?\}\}|\[Op:.*", "", e.message).strip()
            raise InputError(
                f"{path!r} is not an image tfformer decodes (a JPEG, PNG, GIF or "
                f"BMP of at most {MAX_PIXELS:,} pixels): {first}"
            ) from None
    return pixels
