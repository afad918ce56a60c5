"""Reference runtime of a tfformer text classifier on LiteRT, in Python with
NumPy and `ai_edge_litert` only: the reference to port to an app (Kotlin,
Swift, C++). It reads `text.json` and the vocabulary next to the model and
tokenizes with `tokenizer.py` (the same reference tokenizer as the
translator's and the generator's).

The steps, for a text (or a pair a, b):
  1. ids(a) (and ids(b)) with `tokenizer.py`.
  2. One text: [START] a[:max_length - 2] [END], segment ids all 0.
     A pair: cut longest-first to max_length - 3 tokens (the longer text
     loses its last token until both fit; on a tie b does), then
     [START] a [END] b [END], segment ids 0 up to the first [END], 1 after.
  3. Resize the model's inputs to (1, n), set `token_ids` and
     `segment_ids`, invoke, read `probabilities` (1, classes); the label
     names are `labels` in `text.json`. An integer-only model
     (`model_integer_only.tflite`) gives int8 probabilities: real value =
     scale * (q - zero_point), with the output's quantization parameters.

Usage: python classify.py model.tflite "a gripping, funny film" ...
(a pair as "text a<TAB>text b"); prints label, probability and text.

Example:
>>> classifier = LiteRTClassifier("device/model.tflite")
>>> classifier.classify("a gripping, funny film")   # ("positive", array([...]))
"""

import importlib.util
import os
import sys

import numpy as np

START, END = 2, 3


def load_model_file():
    """`model_file.py`, shipped beside this file: it finds, checks and opens
    the model and the files beside it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_file.py")
    spec = importlib.util.spec_from_file_location("tfformer_device_model_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # FileNotFoundError naming a missing one
    return module


def encode(first, second, max_length, start=START, end=END):
    """(token_ids, segment_ids) lists of one text (`second` None) or a pair;
    `start` and `end` are the vocabulary's [START] and [END] ids (a
    converted BERT's [CLS] and [SEP])."""
    if second is None:
        ids = [start, *first[: max_length - 2], end]
        return ids, [0] * len(ids)
    first, second = list(first), list(second)
    while len(first) + len(second) > max_length - 3:
        (first if len(first) > len(second) else second).pop()
    ids = [start, *first, end, *second, end]
    return ids, [0] * (len(first) + 2) + [1] * (len(second) + 1)


class LiteRTClassifier:
    """Classifies texts with `model*.tflite` and the files beside it."""

    def __init__(self, path, num_threads=None):
        model_file = load_model_file()
        model_file.check_model(path)  # a wrong path named before the rest
        self.directory = os.path.dirname(os.path.abspath(path))
        self.settings = model_file.read_settings(
            model_file.neighbour(self.directory, "text.json"),
            ("max_length", "labels", "pairs"),
        )
        self.max_length = self.settings["max_length"]
        self.labels = self.settings["labels"]
        self.pairs = self.settings["pairs"]
        tokenizer = model_file.load_module(self.directory, "tokenizer")
        self.tokenizer = tokenizer.DeviceTokenizer(self.directory)
        self.interpreter = model_file.open_interpreter(path, num_threads, check=False)
        self.runner = self.interpreter.get_signature_runner()
        output = self.runner.get_output_details()["probabilities"]
        # (scale, zero point) of an int8 output; (0.0, 0) for float32.
        self.output_quantization = output["quantization"]

    def encode(self, text):
        """The model's inputs for `text` (a str, or an (a, b) pair)."""
        if self.pairs:
            first, second = text
            ids, segments = encode(
                self.tokenizer.ids(first),
                self.tokenizer.ids(second),
                self.max_length,
                self.tokenizer.start,
                self.tokenizer.end,
            )
        else:
            ids, segments = encode(
                self.tokenizer.ids(text),
                None,
                self.max_length,
                self.tokenizer.start,
                self.tokenizer.end,
            )
        return np.array([ids], np.int32), np.array([segments], np.int32)

    def probabilities(self, token_ids, segment_ids):
        p = self.runner(token_ids=token_ids, segment_ids=segment_ids)["probabilities"][
            0
        ]
        scale, zero_point = self.output_quantization
        if p.dtype != np.float32:
            p = scale * (p.astype(np.float32) - zero_point)
        return p

    def classify(self, text):
        """(label, probabilities) of `text` (a pair: a tuple)."""
        p = self.probabilities(*self.encode(text))
        return self.labels[int(np.argmax(p))], p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: classify.py MODEL.tflite TEXT...", file=sys.stderr)
        return 2
    try:
        classifier = LiteRTClassifier(argv[0])
        for text in argv[1:]:
            item = text
            if classifier.pairs:
                if text.count("\t") != 1:
                    raise ValueError(f"give a pair as 'a<TAB>b'. Received: {text!r}")
                item = tuple(text.split("\t"))
            label, p = classifier.classify(item)
            print(f"{label}\t{p.max():.4f}\t{text}")
    except (OSError, ValueError, ImportError) as e:
        print(f"classify.py: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # LiteRT failed on a model SHA256SUMS does not list
        print(
            f"classify.py: error: LiteRT could not run {argv[0]} ({e})", file=sys.stderr
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
