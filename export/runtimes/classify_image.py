"""Reference runtime of a tfformer image classifier on LiteRT, in Python with
NumPy, `ai_edge_litert` and Pillow only: the reference to port to an app
(Kotlin, Swift, C++). It reads `image.json` next to the model.

The steps, for one camera frame or image file:
  1. Decode to RGB (drop alpha, repeat gray) and resize to `image_size` x
     `image_size` (an app: the camera's RGB buffer, scaled). Training
     decoded with TensorFlow and resized with its antialiased bilinear
     filter; Pillow, used here, is close but not bit-identical: a PNG at
     the model's size gives the same pixels, a resized one differs by at
     most 1 level, a JPEG by a few (the decoders' upsampling differs).
  2. Set `pixels` uint8 `(1, size, size, 3)` as they are (the model
     normalizes), invoke, read `probabilities` `(1, classes)`; the label
     names are `labels` in `image.json`. An integer-only model
     (`model_integer_only.tflite`) gives int8 probabilities: real value =
     scale * (q - zero_point), with the output's quantization parameters.

Usage: python classify_image.py model.tflite photo.jpg ...; prints the top
three classes with their probabilities.

Example:
>>> classifier = ImageClassifier("device/model.tflite")
>>> classifier.probabilities(pixels)   # pixels: uint8 (size, size, 3)
"""

import importlib.util
import os
import sys

import numpy as np


def load_model_file():
    """`model_file.py`, shipped beside this file: it finds, checks and opens
    the model and the files beside it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_file.py")
    spec = importlib.util.spec_from_file_location("tfformer_device_model_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # FileNotFoundError naming a missing one
    return module


class ImageClassifier:
    """Classifies uint8 RGB pixels with `model*.tflite` and `image.json`."""

    def __init__(self, path, num_threads=None):
        model_file = load_model_file()
        model_file.check_model(path)  # a wrong path named before the rest
        directory = os.path.dirname(os.path.abspath(path))
        settings = model_file.read_settings(
            model_file.neighbour(directory, "image.json"), ("image_size", "labels")
        )
        self.size = settings["image_size"]
        self.labels = settings["labels"]
        self.interpreter = model_file.open_interpreter(path, num_threads, check=False)
        self.runner = self.interpreter.get_signature_runner()
        output = self.runner.get_output_details()["probabilities"]
        # (scale, zero point) of an int8 output; (0.0, 0) for float32.
        self.output_quantization = output["quantization"]
        pixels = self.runner.get_input_details()["pixels"]
        # Pixels go in as they are: a quantized uint8 input must mean its
        # values (scale 1, zero point 0; the exporter calibrates it so).
        if pixels["dtype"] != np.uint8 or pixels["quantization"] not in (
            (0.0, 0),
            (1.0, 0),
        ):
            raise ValueError(
                f"{path}: the input must be uint8 pixel values (scale 1, zero "
                f"point 0). Received: {pixels['dtype'].__name__}, "
                f"quantization {pixels['quantization']}"
            )

    def probabilities(self, pixels):
        """Class probabilities of uint8 `(size, size, 3)` pixels."""
        pixels = np.asarray(pixels)
        if pixels.shape != (self.size, self.size, 3) or pixels.dtype != np.uint8:
            raise ValueError(
                f"pixels must be uint8 ({self.size}, {self.size}, 3). Received: "
                f"{pixels.dtype} {pixels.shape}"
            )
        p = self.runner(pixels=pixels[None])["probabilities"][0]
        scale, zero_point = self.output_quantization
        if p.dtype != np.float32:
            p = scale * (p.astype(np.float32) - zero_point)
        return p

    def read(self, path):
        """uint8 pixels of an image file, decoded and resized with Pillow."""
        return read_pixels(path, self.size)


def read_pixels(path, size):
    """Step 1 with Pillow: uint8 `(size, size, 3)` RGB pixels of an image
    file (within a few levels of training's; see the module docstring)."""
    from PIL import Image

    with Image.open(path) as image:
        image = image.convert("RGB")
        if image.size != (size, size):
            image = image.resize((size, size), Image.BILINEAR)
        return np.asarray(image, np.uint8)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: classify_image.py MODEL.tflite IMAGE...", file=sys.stderr)
        return 2
    try:
        classifier = ImageClassifier(argv[0])
    except (OSError, ValueError, ImportError, RuntimeError) as e:
        print(f"classify_image.py: error: {e}", file=sys.stderr)
        return 2
    for path in argv[1:]:
        try:
            pixels = classifier.read(path)
        except (OSError, ValueError) as e:
            print(f"classify_image.py: error: {path!r}: {e}", file=sys.stderr)
            return 2
        try:
            p = classifier.probabilities(pixels)
        except RuntimeError as e:  # LiteRT failed on a model SHA256SUMS does not list
            print(
                f"classify_image.py: error: LiteRT could not run {argv[0]} ({e})",
                file=sys.stderr,
            )
            return 2
        top = np.argsort(-p, kind="stable")[:3]
        print(
            path + "\t" + "\t".join(f"{classifier.labels[i]} {p[i]:.4f}" for i in top)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
