"""`tfformer-export --format litertlm`: the byte tokenizer as Hugging Face's
`tokenizers` reads it, and the bundle in Google's LiteRT-LM runtime against
the Keras generator; a bundle that fails its runtime check is not written."""

import os

import numpy as np
import pytest

from tfformer.decoding import Generator
from tfformer.export import litertlm
from tfformer.export.cli import main as export_main
from tfformer.export.tasks.causal_lm import EXPORTER
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.text import RESERVED_TOKENS

from ..training.tiny import GPT_CONTEXT, GPT_LINE

CONTEXT, LINE = GPT_CONTEXT, GPT_LINE  # the shared tiny_gpt_run's
START, END = 2, 3

try:
    import litert_lm  # noqa: F401

    RUNTIME = None
except ImportError:
    RUNTIME = 'litert-lm-api is not installed (pip install "tfformer[litertlm]")'
needs_runtime = pytest.mark.skipif(RUNTIME is not None, reason=RUNTIME or "")

TEXTS = [
    "ROMEO: to be or not to be",
    "",
    "  two  spaces\tand a tab\n",
    "naïve café Straße 日本語 😀",
    "nul\x00byte",
    "\u2028 line separator, \ufeff BOM",
    "[END] and [START] are text here",
]


def test_the_byte_tokenizer_json_tokenizes_as_tfformer_does():
    """Hugging Face's `tokenizers` (what LiteRT-LM's HF tokenizer follows)
    reads the written tokenizer.json as tfformer's byte tokenizer: same ids,
    and decoding gives the text back."""
    import json

    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(litertlm.byte_tokenizer_json()))
    ours = ByteTokenizer()
    expected = ours.tokenize(TEXTS).to_list()
    for text, ids in zip(TEXTS, expected, strict=True):
        assert hf.encode(text).ids == ids, text
        assert hf.decode(ids) == text
    # Each of the 256 bytes is one token (id b + 4); the 4 reserved tokens
    # are special.
    assert hf.get_vocab_size() == 260
    assert [hf.token_to_id(t) for t in RESERVED_TOKENS] == [0, 1, 2, 3]


@pytest.fixture(scope="module")
def run_dir(tiny_gpt_run):
    return tiny_gpt_run


@pytest.fixture(scope="module")
def bundle(run_dir, tmp_path_factory):
    if RUNTIME is not None:
        pytest.skip(RUNTIME)
    out = tmp_path_factory.mktemp("litertlm")
    code = export_main(
        ["--checkpoint", run_dir, "--format", "litertlm", "--out", str(out)]
    )
    assert code == 0
    return str(out / "model.litertlm")


def keras_greedy(run_dir, ids, new):
    run = EXPORTER.read(run_dir)
    generator = Generator(run.model, max_length=CONTEXT, search="greedy")
    out = generator.generate(
        np.array([ids], np.int32), max_new_tokens=np.array([new], np.int32)
    )
    tokens = np.asarray(out["token_ids"])[0][len(ids) :]
    return [int(t) for t in tokens if t != 0]


@needs_runtime
def test_the_bundle_names_its_start_and_stop_tokens(bundle):
    import litert_lm

    with litert_lm.Engine(bundle) as engine:
        assert engine.bos_token_id == START
        assert engine.eos_token_ids == [[END]]
        assert engine.tokenize("[END]é") == [b + 4 for b in "[END]é".encode()]


@needs_runtime
@pytest.mark.parametrize("prompt", ["to be or", "ROMEO:", "x"])
def test_litert_lm_decodes_what_the_keras_generator_decodes(bundle, run_dir, prompt):
    """LiteRT-LM starts the prompt with the bundle's start token and decodes
    greedily; the Keras generator, given the same ids, picks the same
    tokens, and stops at the same point."""
    new = 12
    got = litertlm.litert_lm_greedy(bundle, prompt, new)
    ids = [START, *(b + 4 for b in prompt.encode("utf-8"))]
    expected = keras_greedy(run_dir, ids, new)
    if END in expected:
        expected = expected[: expected.index(END)]
    assert got, "LiteRT-LM decoded nothing"
    assert got.encode("utf-8") == bytes(t - 4 for t in expected)


@needs_runtime
@pytest.mark.parametrize("decoded", ["", pytest.param("zz", marks=pytest.mark.slow)])
def test_a_bundle_that_fails_its_runtime_check_is_not_written(
    run_dir, tmp_path, monkeypatch, decoded
):
    """Nothing decoded counts as a failure too; an earlier bundle in the
    folder is left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.litertlm").write_bytes(b"an earlier bundle")
    monkeypatch.setattr(litertlm, "litert_lm_greedy", lambda *_: decoded)
    with pytest.raises(ValueError, match=r"LiteRT-LM decoded .* not written"):
        litertlm.export_litertlm(run_dir, str(out), progress=lambda *_: None)
    assert (out / "model.litertlm").read_bytes() == b"an earlier bundle"


def test_runs_it_cannot_bundle_are_refused_naming_them(
    tiny_translator_run, run_dir, capsys, tmp_path
):
    out = str(tmp_path / "out")
    argv = ["--checkpoint", tiny_translator_run, "--format", "litertlm", "--out", out]
    assert export_main(argv) == 2
    assert (
        "is for causal_lm runs. Received: a 'translation' run"
        in capsys.readouterr().err
    )
    argv = ["--checkpoint", run_dir, "--format", "litertlm", "--out", out]
    assert export_main([*argv, "--quantize", "int8"]) == 2
    assert "--quantize 'int8'" in capsys.readouterr().err
    assert export_main([*argv, "--prefill-lengths", "8,16"]) == 2
    assert "--prefill-lengths '8,16'" in capsys.readouterr().err
    assert not os.path.exists(out)
