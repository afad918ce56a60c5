"""Reference runtime of a tfformer translator on LiteRT, in Python with NumPy
and `ai_edge_litert` only: the reference to port to an app (Kotlin, Swift,
C++). It tokenizes with `tokenizer.py` (beside this file) and reads
`text.json` and the vocabularies beside the model; the exporter writes all
of them into one directory.

The model holds the whole greedy decoding loop (one WHILE op): source ids
in, generated ids out. The steps, for a sentence:
  1. ids = `DeviceTokenizer.tokenize(sentence)`: the source's tokens, cut
     to `source_length` and padded with 0 (the model's input shape).
  2. Set `source_ids` int32 `(1, source_length)`, invoke, read `token_ids`
     int32 `(1, max_length)`: [START], the translation, [END], then 0s.
     Ids outside the source vocabulary are read as [UNK] by the model.
  3. text = `DeviceTokenizer.detokenize(token_ids)`.
This is what the SavedModel's `serving_default` computes with
`--search greedy`, and what Keras's greedy `Translator` writes.

Usage: python translate.py model.tflite "sentence" ...; prints one
translation per line.

Example:
>>> translator = Translator("device/model.tflite")
>>> translator.translate(["twenty-one", "nine"])   # ["21", "9"]
"""

import argparse
import importlib.util
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load_model_file():
    """`model_file.py`, shipped beside this file: it finds, checks and opens
    the model and the files beside it."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_file.py")
    spec = importlib.util.spec_from_file_location("tfformer_device_model_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # FileNotFoundError naming a missing one
    return module


def load_tokenizer(model_file, model_directory):
    """`DeviceTokenizer` of `tokenizer.py` (beside this file) for the
    `text.json` and vocabularies beside the model."""
    model_file.neighbour(model_directory, "text.json")
    return model_file.load_module(HERE, "tokenizer").DeviceTokenizer(model_directory)


class Translator:
    """Translates with an exported translator's `.tflite` (greedy, as the
    model decodes), one sentence at a time.

    Args:
        model_path: `model.tflite` or a quantized variant
            (`model_int8.tflite`, ...).
        num_threads: the interpreter's CPU threads (None: its default).

    Raises:
        FileNotFoundError: the model, `text.json`, a vocabulary,
            `tokenizer.py` or `model_file.py` is missing (named).
        ValueError: the model is damaged (it does not match `SHA256SUMS`,
            or LiteRT cannot read it) or is not a translator's.
    """

    def __init__(self, model_path, num_threads=None):
        model_file = load_model_file()
        model_file.check_model(model_path)  # a wrong path named before the rest
        self.directory = os.path.dirname(os.path.abspath(model_path))
        self.tokenizer = load_tokenizer(model_file, self.directory)
        self.interpreter = model_file.open_interpreter(
            model_path, num_threads, check=False
        )
        self.runner = self.interpreter.get_signature_runner()
        inputs = self.runner.get_input_details()
        if "source_ids" not in inputs:
            raise ValueError(
                f"{model_path} is not a translator: its inputs are "
                f"{sorted(inputs)}, not source_ids."
            )
        self.source_length = int(inputs["source_ids"]["shape"][1])

    def translate_ids(self, source_ids):
        """`(S,)` or `(1, S)` integer source ids (S = `source_length`) ->
        `(max_length,)` int32 generated ids."""
        ids = np.asarray(source_ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"source_ids must be integers. Received: {ids.dtype}")
        ids = ids.astype(np.int32).reshape(1, -1)
        if ids.shape[1] != self.source_length:
            raise ValueError(
                f"source_ids must have {self.source_length} ids (cut and pad "
                f"with 0, as DeviceTokenizer.tokenize does). Received: "
                f"{ids.shape[1]}"
            )
        return self.runner(source_ids=ids)["token_ids"][0]

    def translate(self, texts):
        """The translations of `texts` (a list of str or UTF-8 bytes), in
        order, as a list of str."""
        if isinstance(texts, str | bytes):
            raise TypeError(
                "texts must be a list of sentences. Received: one "
                f"{type(texts).__name__} ({texts[:40]!r}); wrap it in a list."
            )
        out = []
        for text in texts:
            ids = self.translate_ids(self.tokenizer.tokenize(text))
            out.append(self.tokenizer.detokenize(ids.tolist()))
        return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="translate.py", description=__doc__.split("\n")[0])
    p.add_argument("model", help="model.tflite (or a quantized variant)")
    p.add_argument("texts", nargs="+", metavar="text", help="sentences to translate")
    p.add_argument("--threads", type=int, help="the interpreter's CPU threads")
    args = p.parse_args(argv)
    # Bytes that are not UTF-8 arrive as lone surrogates; U+FFFD instead.
    texts = [os.fsencode(t).decode("utf-8", "replace") for t in args.texts]
    try:
        translator = Translator(args.model, num_threads=args.threads)
        translations = translator.translate(texts)
    except ImportError as e:
        p.exit(2, f"{p.prog}: error: needs NumPy and ai_edge_litert ({e})\n")
    except (OSError, ValueError) as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    except RuntimeError as e:  # LiteRT failed on a model SHA256SUMS does not list
        p.exit(2, f"{p.prog}: error: LiteRT could not run {args.model} ({e})\n")
    for translation in translations:
        print(translation)
    return 0


if __name__ == "__main__":
    sys.exit(main())
