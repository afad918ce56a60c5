"""`tfformer-export --format litertlm`: the byte tokenizer as Hugging Face's
`tokenizers` reads it, and the bundle in Google's LiteRT-LM runtime against
the Keras generator; a bundle that fails its runtime check is not written."""

import json
import os

import numpy as np
import pytest

from tfformer.decoding import Generator
from tfformer.export import litertlm
from tfformer.export.cli import main as export_main
from tfformer.export.tasks.causal_lm import EXPORTER

from ..training.tiny import GPT_CONTEXT, GPT_LINE

CONTEXT, LINE = GPT_CONTEXT, GPT_LINE  # the shared tiny_gpt_run's
END = 3

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
        # No start token: predict reads a prompt's bytes alone.
        assert engine.bos_token_id is None
        assert engine.eos_token_ids == [[END]]
        assert engine.tokenize("[END]é") == [b + 4 for b in "[END]é".encode()]


@needs_runtime
# "ROMEO:" is the export's own runtime check's prompt: integration tier.
@pytest.mark.parametrize(
    "prompt", ["to be or", pytest.param("ROMEO:", marks=pytest.mark.integration), "x"]
)
def test_litert_lm_decodes_what_the_keras_generator_decodes(
    bundle, run_dir, prompt, capsys
):
    """LiteRT-LM reads the prompt's bytes (no start token, as predict) and
    decodes greedily; the Keras generator, given the same ids, picks the
    same tokens and stops at the same point, and `tfformer-predict --search
    greedy` prints the prompt and that text."""
    from tfformer.training.commands import predict as predict_cli

    new = 12
    got = litertlm.litert_lm_greedy(bundle, prompt, new)
    ids = [b + 4 for b in prompt.encode("utf-8")]
    expected = keras_greedy(run_dir, ids, new)
    if END in expected:
        expected = expected[: expected.index(END)]
    assert got, "LiteRT-LM decoded nothing"
    assert got.encode("utf-8") == bytes(t - 4 for t in expected)
    argv = ["--checkpoint", run_dir, "--max-new-tokens", str(new), prompt]
    capsys.readouterr()
    assert predict_cli.main([*argv, "--search", "greedy"]) == 0
    assert capsys.readouterr().out == prompt + got + "\n"


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


@needs_runtime
@pytest.mark.integration
@pytest.mark.parametrize("quantize", ["int8", "float16"])
def test_a_quantized_bundle_decodes_what_its_tflite_model_decodes(
    bundle, run_dir, tmp_path, quantize
):
    """`--quantize int8` (dynamic range) or `float16` bundles that TFLite
    model (measured against float32, its figures beside it): LiteRT-LM's
    greedy text is the reference runtime's on the same quantized model, and
    the bundle is not the float32 one."""
    from tfformer.export.tflite import export_tflite

    out = tmp_path / "bundle"
    argv = ["--checkpoint", run_dir, "--format", "litertlm", "--out", str(out)]
    assert export_main([*argv, "--quantize", quantize]) == 0
    path = str(out / f"model_{quantize}.litertlm")
    # The bundle, and the quality gate's figures of its model.
    assert sorted(os.listdir(out)) == [f"model_{quantize}.litertlm", "quality.json"]
    assert os.path.getsize(path) != os.path.getsize(bundle)
    tflite = export_tflite(
        run_dir,
        str(tmp_path / "tflite"),
        quantize=quantize,
        prefill_lengths=litertlm.prefill_lengths(CONTEXT),
        progress=lambda *_: None,
    )
    for prompt in ["to be or", "ROMEO:"]:
        got = litertlm.litert_lm_greedy(path, prompt, 12)
        assert got, "LiteRT-LM decoded nothing"
        assert got == litertlm.reference_greedy(tflite, prompt, 12)


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
    for quantize in ("full_int8", "integer_only", "int3"):
        assert export_main([*argv, "--quantize", quantize]) == 2
        assert f"--quantize {quantize!r}" in capsys.readouterr().err
    assert export_main([*argv, "--prefill-lengths", "8,16"]) == 2
    assert "--prefill-lengths '8,16'" in capsys.readouterr().err
    assert export_main([*argv, "--representative-data", "lines.txt"]) == 2
    assert "--representative-data 'lines.txt'" in capsys.readouterr().err
    assert not os.path.exists(out)


# -- converted runs: GPT-2's and Llama 3's byte-level BPE -------------------------


def converted_gpt2(tmp_path):
    from tests.testing import train_byte_level_bpe
    from tests.training.convert.huggingface.test_gpt2 import with_tokenizer
    from tfformer.training.convert import convert

    hf = train_byte_level_bpe(vocab_size=300)
    source = with_tokenizer(tmp_path / "hf", hf)
    return hf, convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)


def converted_llama3(tmp_path):
    from tests.training.convert.huggingface.test_llama import (
        llama3_tokenizer,
        write_llama3_checkpoint,
    )
    from tfformer.training.convert import convert

    hf = llama3_tokenizer()
    source = write_llama3_checkpoint(tmp_path / "hf", hf, np.random.default_rng(8))
    return hf, convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)


def converted_qwen2(tmp_path):
    """A random Qwen2 checkpoint with a Qwen2-style tokenizer.json (NFC, one
    digit a piece) and ChatML, converted: (its tokenizer, the run)."""
    from tests.training.convert.huggingface.test_qwen2 import qwen2_text_checkpoint
    from tfformer.training.convert import convert

    source, hf = qwen2_text_checkpoint(tmp_path / "hf", np.random.default_rng(5))
    return hf, convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)


def test_a_chat_is_checked_on_the_messages_that_fit_the_context(tmp_path):
    """The bundle's chat check takes the three messages of CHECK_MESSAGES,
    or the last alone where they do not leave CHECK_TOKENS of the context,
    or none."""
    import tfformer

    _, run = converted_qwen2(tmp_path)
    model = tfformer.load(run)
    chat, tokenizer = model.chat_template, model.tokenizer
    three = len(chat.prompt_ids(litertlm.CHECK_MESSAGES, tokenizer))
    one = len(chat.prompt_ids(litertlm.CHECK_MESSAGES[-1:], tokenizer))
    assert one < three
    for context, messages in (
        (three + litertlm.CHECK_TOKENS, litertlm.CHECK_MESSAGES),
        (three + litertlm.CHECK_TOKENS - 1, litertlm.CHECK_MESSAGES[-1:]),
        (one + litertlm.CHECK_TOKENS - 1, None),
    ):
        assert litertlm.check_messages(chat, tokenizer, context) == messages


def converted_llama2(tmp_path):
    """A random Llama checkpoint with a SentencePiece `tokenizer.model` in
    Llama 2's settings, converted: (the sentencepiece processor, the run)."""
    from tests.training.convert.huggingface.test_llama import converted_llama2_text

    processor, _, run, _ = converted_llama2_text(tmp_path)
    return processor, run


def assert_litert_lm_continues_as_predict(bundle, run, prompts, capsys):
    """LiteRT-LM's greedy continuation of each prompt (8 tokens) is what
    one `tfformer-predict --search greedy` of all of them prints: each
    prompt's text and continuation, then a newline (it streams one prompt
    after the other, so one run of the command serves every prompt).
    LiteRT-LM decodes a continuation alone: with a SentencePiece model that
    drops its first piece's leading space (sentencepiece's dummy-prefix
    rule), which predict writes after the prompt."""
    import tfformer
    from tfformer.training.commands import predict as predict_cli

    argv = ["--checkpoint", run, "--max-new-tokens", "8", "--search", "greedy"]
    assert predict_cli.main([*argv, *prompts]) == 0
    printed = capsys.readouterr().out
    got = [litertlm.litert_lm_greedy(bundle, prompt, 8) for prompt in prompts]
    assert all(got), f"LiteRT-LM decoded nothing: {got}"
    spaced = tfformer.load(run).directory.tokenizer("text").kind == "sentencepiece"
    at = 0
    for prompt, text in zip(prompts, got, strict=True):
        alone = f"{prompt}{text}\n"
        after_space = f"{prompt} {text}\n"
        if spaced and printed.startswith(after_space, at):
            alone = after_space
        assert printed.startswith(alone, at), (prompts, got, printed)
        at += len(alone)
    assert at == len(printed), (prompts, got, printed)


@needs_runtime
# Both in the integration tier (a conversion, a bundle and four LiteRT-LM
# engines: 18-22 CPU-seconds each). The default suite runs LiteRT-LM on the
# byte-level bundle above and checks each converted run's tokenizer.json
# with `tokenizers` (what LiteRT-LM's Hugging Face tokenizer follows).
@pytest.mark.integration
@pytest.mark.parametrize(
    "converted", [converted_gpt2, converted_llama3, converted_llama2, converted_qwen2]
)
def test_litert_lm_continues_a_converted_run_as_tfformer_predict_does(
    tmp_path, capsys, converted
):
    """`--format litertlm` on a converted GPT-2, Llama 3, Llama 2 and Qwen2
    (random weights; byte-level BPEs in a tokenizer.json, Qwen2's after
    NFC, a SentencePiece model in a tokenizer.model): the bundle passes its
    runtime check (Qwen2's ChatML conversation too), and LiteRT-LM's greedy
    text equals `tfformer-predict --search greedy`'s continuation."""
    import litert_lm

    import tfformer
    from tests.tfformer.preprocessing.test_bpe_tokenizer import random_texts

    _, run = converted(tmp_path)
    ours = tfformer.load(run).tokenizers["text"]
    out = tmp_path / "bundle"
    assert (
        export_main(["--checkpoint", run, "--out", str(out), "--format", "litertlm"])
        == 0
    )
    assert "no chat template" not in capsys.readouterr().out
    bundle = str(out / litertlm.BUNDLE)
    # The last prompt is cut into other pieces by Llama 3's pattern than by
    # GPT-2's (digits in threes, line breaks with the spaces before them).
    assert_litert_lm_continues_as_predict(
        bundle, run, ("the cat", "don't stop", "x 2024123 \n\n  y"), capsys
    )
    # The runtime's own tokenizer gives the run's ids (its start token
    # comes from the metadata: LiteRT-LM's bos).
    with litert_lm.Engine(bundle) as engine:
        # (Its tokenize takes a C string: a text ends at its first NUL.)
        # "x, \ny": " \n" is one piece of Llama 3's, two of GPT-2's.
        for prompt in ("the cat", "x, \ny", *TEXTS, *random_texts(20, seed=8)):
            prompt = prompt.split("\x00")[0]
            ids = ours.tokenize([prompt])[0].numpy().tolist()
            if ours.add_start_token:
                assert ids[0] == engine.bos_token_id == ours.start_id
                ids = ids[1:]
            assert engine.tokenize(prompt) == ids, prompt


@pytest.mark.integration
@needs_runtime
def test_a_litert_lm_conversation_replies_as_tfformer_chat_does(tmp_path):
    """A converted chat checkpoint (Llama 3's template, random weights):
    the bundle carries the template and every stop token, and a LiteRT-LM
    `Conversation` (its own Jinja, greedy) gives the reply `chat` gives,
    for a conversation and for one that starts with a history; both stop
    at an end id that only config.json lists (here the first reply's third
    token, from keras-hub's greedy). (A second turn in the same LiteRT-LM
    conversation continues from its cache, the reply's own tokens, where
    tfformer's chat renders the reply's text again: not compared.)"""
    import litert_lm

    import tfformer
    from tests.training.convert.huggingface.test_chat import (
        MESSAGES,
        chat_checkpoint,
        keras_hub_reply,
    )
    from tfformer.training.convert import convert

    greedy, hf = keras_hub_reply(tmp_path / "reference")
    source, _ = chat_checkpoint(
        tmp_path / "hf", np.random.default_rng(21), eos=[greedy[2]], context=128
    )
    run = convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)
    model = tfformer.load(run)
    out = tmp_path / "bundle"
    assert (
        export_main(["--checkpoint", run, "--out", str(out), "--format", "litertlm"])
        == 0
    )
    stops = [[i] for i in model.chat_template.stop_ids]
    assert len(stops) == 3 and stops[-1] == [greedy[2] + 1]
    sampler = litert_lm.SamplerConfig(top_k=1)
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    # The first turn, then a conversation that starts with a history (a
    # reply that was cut at a stop token, then a new question).
    longer = [
        *MESSAGES,
        {"role": "assistant", "content": "the mat"},
        {"role": "user", "content": "and then?"},
    ]
    replies = []
    with litert_lm.Engine(str(out / litertlm.BUNDLE)) as engine:
        assert engine.eos_token_ids == stops
        for history in (MESSAGES, longer):
            expected = model.chat(history, max_new_tokens=8)
            conversation = engine.create_conversation(
                messages=history[:-1], sampler_config=sampler, max_output_tokens=8
            )
            got = conversation.send_message(history[-1])
            conversation.close()
            assert got.role == litert_lm.Role.MODEL
            assert [c.text for c in got.contents] == [expected], len(history)
            replies.append(expected)
    assert replies[0] == hf.decode(greedy[:2])


@needs_runtime
def test_a_gemma_conversation_in_litert_lm_replies_as_tfformer_chat_does(tmp_path):
    """Gemma's chat template over its SentencePiece tokenizer (random
    weights): LiteRT-LM renders `<bos>` as nothing and puts the start id
    first, and that is the ids tfformer's chat reads (the `<bos>` the
    template writes split out of the text); its greedy reply is chat's, for
    a conversation with a history and for a first message."""
    import litert_lm

    import tfformer
    from tests.training.convert.huggingface.test_chat import (
        GEMMA_MESSAGES,
        gemma_chat_checkpoint,
    )
    from tfformer.training.convert import convert

    source, _ = gemma_chat_checkpoint(tmp_path / "hf", np.random.default_rng(3))
    run = convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)
    model = tfformer.load(run)
    out = tmp_path / "bundle"
    argv = ["--checkpoint", run, "--out", str(out), "--format", "litertlm"]
    assert export_main(argv) == 0
    sampler = litert_lm.SamplerConfig(top_k=1)
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    with litert_lm.Engine(str(out / litertlm.BUNDLE)) as engine:
        for history in (GEMMA_MESSAGES, GEMMA_MESSAGES[:1]):
            expected = model.chat(history, max_new_tokens=8)
            conversation = engine.create_conversation(
                messages=history[:-1], sampler_config=sampler, max_output_tokens=8
            )
            text = conversation.render_message_to_string(history[-1])
            assert text.startswith("<start_of_turn>user\n")
            ids = [engine.bos_token_id, *engine.tokenize(text)]
            assert ids == model.chat_ids(history)
            got = conversation.send_message(history[-1])
            conversation.close()
            assert [c.text for c in got.contents] == [expected], len(history)


@needs_runtime
@pytest.mark.integration
def test_a_chat_template_litert_lm_reads_otherwise_is_left_out(tmp_path, capsys):
    """Llama 2's template writes `</s><s>` between turns, which LiteRT-LM
    renders as nothing: the bundle is written without the template, and the
    export says why."""
    import litert_lm

    from tests.training.convert.huggingface.test_chat import LLAMA2_TEMPLATE
    from tests.training.convert.huggingface.test_llama import converted_llama2_text
    from tfformer.training.convert import convert

    _, source, _, _ = converted_llama2_text(tmp_path / "first")
    settings = {"bos_token": "<s>", "eos_token": "</s>"}
    settings["chat_template"] = LLAMA2_TEMPLATE
    (source / "tokenizer_config.json").write_text(json.dumps(settings))
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(
        json.dumps({**config, "max_position_embeddings": 128})
    )
    run = convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)
    out = tmp_path / "bundle"
    capsys.readouterr()
    argv = ["--checkpoint", run, "--out", str(out), "--format", "litertlm"]
    assert export_main(argv) == 0
    assert "the bundle carries no chat template" in capsys.readouterr().out
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    with litert_lm.Engine(str(out / litertlm.BUNDLE)) as engine:
        conversation = engine.create_conversation()
        text = conversation.render_message_to_string({"role": "user", "content": "x"})
        conversation.close()
    assert "[INST]" not in text


# -- converted runs of token ids: Gemma, Qwen3, Llama without a tokenizer ----------


def converted_ids(tmp_path, architecture):
    """A converted run of token ids from a random checkpoint of the test
    module `test_<architecture>` (its vocabulary: 40 ids)."""
    import importlib

    from tfformer.training.convert import convert

    module = importlib.import_module(
        f"tests.training.convert.huggingface.test_{architecture}"
    )
    source = module.write_checkpoint(tmp_path / "hf", np.random.default_rng(31))
    return convert(str(source), str(tmp_path / "run"), progress=lambda *_: None)


@needs_runtime
# Llama in the slow run: its TFLite model's parity is test_llama.py's, and
# Gemma's and Qwen3's bundles hold every op of its.
@pytest.mark.parametrize(
    "architecture",
    [
        pytest.param("gemma", marks=pytest.mark.integration),
        pytest.param("qwen3", marks=pytest.mark.integration),
        pytest.param("llama", marks=pytest.mark.slow),
    ],
)
def test_litert_lm_continues_a_run_of_token_ids_as_tfformer_predict_does(
    tmp_path, capsys, architecture
):
    """Converted runs of token ids (random weights) bundle: LiteRT-LM's
    greedy continuation of a prompt of ids is `tfformer-predict --search
    greedy`'s, id for id."""

    run = converted_ids(tmp_path, architecture)
    out = tmp_path / "bundle"
    argv = ["--checkpoint", run, "--out", str(out), "--format", "litertlm"]
    assert export_main(argv) == 0
    capsys.readouterr()
    bundle = str(out / litertlm.BUNDLE)
    assert_litert_lm_continues_as_predict(
        bundle, run, ("1 5 0 12", "7", "39 38 2 2"), capsys
    )


@needs_runtime
@pytest.mark.integration
def test_litert_lm_continues_a_wordpiece_run_as_tfformer_predict_does(tmp_path, capsys):
    """A GPT trained on a lower-cased WordPiece vocabulary (one line,
    repeated): its bundle carries the equivalent Hugging Face tokenizer.json
    and passes its runtime check; for each prompt LiteRT-LM's text is the
    run's decoding of the Keras generator's greedy ids after the prompt's
    ids (decoded alone: "'s" after a word reads "' s" there), and those ids
    continue the prompt in `tfformer-predict --search greedy`'s text."""
    import tfformer
    from tests.export.test_tokenizer_json import LINE
    from tests.training.tiny import train_tiny_gpt
    from tfformer.training.commands import predict as predict_cli

    run = train_tiny_gpt(
        tmp_path,
        (LINE + "\n") * 80,
        context=32,
        epochs=20,
        tokenizer="wordpiece",
        overrides=["data.lower_case=true"],
    )
    out = tmp_path / "bundle"
    argv = ["--checkpoint", run, "--out", str(out), "--format", "litertlm"]
    assert export_main(argv) == 0
    bundle = str(out / litertlm.BUNDLE)
    tokenizer = tfformer.load(run).tokenizer
    for prompt in ("To be", "it's a well", "That IS"):
        got = litertlm.litert_lm_greedy(bundle, prompt, 8)
        ids = tokenizer.tokenize([prompt])[0].numpy().tolist()
        tokens = keras_greedy(run, ids, 8)
        tokens = tokens[: tokens.index(3)] if 3 in tokens else tokens
        assert len(tokens) > 3 and got == litertlm.decoded(tokenizer, tokens)
        capsys.readouterr()
        argv = ["--checkpoint", run, "--max-new-tokens", "8", "--search", "greedy"]
        assert predict_cli.main([*argv, prompt]) == 0
        whole = litertlm.decoded(tokenizer, ids + tokens)
        assert capsys.readouterr().out == whole + "\n"
