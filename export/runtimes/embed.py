"""Reference runtime of a tfformer sentence embedder on LiteRT, in Python with
NumPy and `ai_edge_litert` only: the reference to port to an app (Kotlin,
Swift, C++) for on-device semantic search. It reads `text.json` and the
vocabulary next to the model and tokenizes with `tokenizer.py`.

The steps, for a text:
  1. ids(text) with `tokenizer.py` (the checkpoint's normalization: BERT's
     cleanup, accent stripping and lower-casing as `text.json` says).
  2. [START] ids[:max_length - 2] [END] (the vocabulary's own [CLS] and
     [SEP]: `special_ids` in `text.json`).
  3. Resize the model's input to (1, n), set `token_ids`, invoke, read
     `embedding` (1, dim): already pooled (and L2-normalised when
     `normalize` is true in `text.json`).
  4. Compare two texts by the cosine of their embeddings (the dot product
     when normalised); search = the documents sorted by cosine to a query.

Usage: python embed.py model.tflite "query" "document 1" "document 2" ...
prints each document's cosine to the query, best first.

Example:
>>> embedder = LiteRTEmbedder("device/model.tflite")
>>> embedder.embed("A man is eating food.")          # array of dim floats
>>> embedder.search("A man eats", ["A horse", "Bread is food"])
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


class LiteRTEmbedder:
    """Embeds texts with `model*.tflite` and the files beside it."""

    def __init__(self, path, num_threads=None):
        model_file = load_model_file()
        model_file.check_model(path)  # a wrong path named before the rest
        self.directory = os.path.dirname(os.path.abspath(path))
        self.settings = model_file.read_settings(
            model_file.neighbour(self.directory, "text.json"), ("max_length",)
        )
        self.max_length = self.settings["max_length"]
        tokenizer = model_file.load_module(self.directory, "tokenizer")
        self.tokenizer = tokenizer.DeviceTokenizer(self.directory)
        self.interpreter = model_file.open_interpreter(path, num_threads, check=False)
        self.runner = self.interpreter.get_signature_runner("serving_default")

    def token_ids(self, text):
        """Steps 1-2: the model's input ids of one text."""
        ids = self.tokenizer.ids(text)[: self.max_length - 2]
        return [self.tokenizer.start, *ids, self.tokenizer.end]

    def embed(self, text):
        """Step 3: the embedding of one text, a float32 vector."""
        ids = np.array([self.token_ids(text)], np.int32)
        return self.runner(token_ids=ids)["embedding"][0].astype(np.float32)

    def search(self, query, documents):
        """Step 4: (cosine, document) pairs, best first."""
        q = self.embed(query)
        scored = []
        for document in documents:
            d = self.embed(document)
            norms = float(np.linalg.norm(q) * np.linalg.norm(d))
            scored.append((float(q @ d) / norms if norms else 0.0, document))
        return sorted(scored, key=lambda x: -x[0])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3:
        print(
            'usage: python embed.py model.tflite "query" "document" ...',
            file=sys.stderr,
        )
        return 2
    try:
        embedder = LiteRTEmbedder(argv[0])
        results = embedder.search(argv[1], argv[2:])
    except (OSError, ValueError, ImportError) as e:
        print(f"embed.py: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # LiteRT failed on a model SHA256SUMS does not list
        print(f"embed.py: error: LiteRT could not run {argv[0]} ({e})", file=sys.stderr)
        return 2
    for score, document in results:
        print(f"{score:.4f}\t{document}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
