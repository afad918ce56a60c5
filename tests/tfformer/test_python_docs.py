"""The model-library examples of docs/python.md run as written: the blocks
that need no run directory are executed and what they build is checked
against what the page says (shapes, classes, decoding outputs)."""

import os

import keras
import numpy as np

from tests.test_docs import ROOT, read, split_fences

PAGE = os.path.join(ROOT, "docs", "python.md")


def python_blocks():
    return [body for info, body in split_fences(read(PAGE))[1] if info == "python"]


def test_the_model_library_and_decoding_examples_run():
    blocks = python_blocks()
    (library,) = [b for b in blocks if "Seq2SeqBackbone.from_preset" in b]
    (decoding,) = [b for b in blocks if "from tfformer.decoding import Generator" in b]
    namespace = {}
    exec(compile(library, PAGE, "exec"), namespace)
    from tfformer.models import CausalLM, Seq2SeqBackbone, Seq2SeqLM

    assert isinstance(namespace["backbone"], Seq2SeqBackbone)
    assert isinstance(namespace["model"], Seq2SeqLM)
    assert isinstance(namespace["gpt"], CausalLM)
    # "(1, 4, 8000)", as the comment beside the call says.
    assert tuple(namespace["logits"].shape) == (1, 4, 8000)
    assert namespace["gpt"].compiled

    if keras.backend.backend() != "tensorflow":
        return  # Generator.compiled() is a tf.function
    namespace["source_ids"] = np.array([[5, 9, 2, 0]], "int32")
    exec(compile(decoding, PAGE, "exec"), namespace)
    out = namespace["out"]
    ids = keras.ops.convert_to_numpy(out["token_ids"])
    assert ids.shape[0] == 1 and ids.shape[1] <= 64
    assert np.all((ids >= 0) & (ids < 8000))
    assert keras.ops.convert_to_numpy(out["scores"]).shape == (1,)
    assert namespace["sampler"].search == "sample"
