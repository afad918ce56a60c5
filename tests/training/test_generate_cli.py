"""`tfformer-predict` on a causal-LM run: the text it prints is the text of
`tfformer.decoding.Generator`'s whole search (greedy, seeded sampling, beam),
streamed piece by piece for greedy and sampling; prompts are cut from the
left with a warning; bad settings exit 2 naming the option."""

import io
import sys

import numpy as np
import pytest

import tfformer
from tfformer.decoding import Generator
from tfformer.runs.files import printable
from tfformer.training.commands import predict as predict_cli
from tfformer.training.predictors.causal_lm import detokenize, stream_text

from .tiny import GPT_CONTEXT, GPT_LINE

CONTEXT, LINE = GPT_CONTEXT, GPT_LINE  # the shared tiny_gpt_run's


@pytest.fixture(scope="module")
def run(tiny_gpt_run):
    return tiny_gpt_run


@pytest.fixture(scope="module")
def loaded(run):
    return tfformer.load(run)


def reference(loaded, prompt_ids, max_new_tokens, **settings):
    """The text of the Generator's whole search over `prompt_ids`."""
    tokenizer = loaded.tokenizers["text"]
    generator = Generator(
        loaded.model,
        max_length=len(prompt_ids) + max_new_tokens,
        start_id=tokenizer.start_id,
        end_id=tokenizer.end_id,
        **settings,
    )
    out = np.asarray(generator(np.array([prompt_ids], "int32"))["token_ids"])[0]
    return detokenize(tokenizer, out)


def predict(capsys, run, *argv):
    capsys.readouterr()
    code = predict_cli.main(["--checkpoint", run, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def byte_ids(text):
    return [b + 4 for b in text.encode()]  # the byte tokenizer's offset


@pytest.mark.parametrize(
    "argv, settings",
    [
        ([], dict(search="greedy")),
        # Slow: test_top_k_zero_means_no_top_k_filter samples through the
        # command in the integration tier, and the stream test samples
        # through the API in the default suite.
        pytest.param(
            [
                "--search",
                "sample",
                "--seed",
                "3",
                "--temperature",
                "1.3",
                "--top-p",
                "0.95",
            ],
            dict(search="sample", seed=3, temperature=1.3, top_p=0.95),
            marks=pytest.mark.slow,
        ),
        (
            ["--search", "beam", "--beam-width", "3", "--length-penalty", "0"],
            dict(search="beam", beam_width=3, length_penalty=0.0),
        ),
    ],
    ids=["greedy", "sample", "beam"],
)
def test_prints_the_text_of_the_whole_search(capsys, run, loaded, argv, settings):
    code, out, err = predict(capsys, run, *argv, "--max-new-tokens", "12", "that is")
    assert code == 0, err
    expected = reference(loaded, byte_ids("that is"), 12, **settings)
    assert len(expected) > len("that is")
    assert out == expected + "\n"
    if settings["search"] == "sample":  # the same seed, the same text
        assert (
            predict(capsys, run, *argv, "--max-new-tokens", "12", "that is")[1] == out
        )


def test_greedy_and_sampling_stream_their_tokens(loaded):
    """The predictor streams the prompt, then one piece per generated token
    (bytes: one character each here); tfformer-predict prints those pieces,
    then the line's end."""
    for settings in ({}, {"search": "sample", "seed": 1}):
        pieces = list(loaded.stream("to be", max_new_tokens=9, **settings))
        assert pieces[0] == "to be"
        generated = pieces[1:]
        assert all(len(p) == 1 for p in generated)
        whole = reference(loaded, byte_ids("to be"), 9, **settings)
        assert "".join(pieces) == whole
        # Nine pieces unless the model ended the text sooner.
        assert len(generated) == len(whole) - len("to be") <= 9
        printed = list(loaded.printed(["to be"], max_new_tokens=9, **settings))
        assert printed == [*pieces, "\n"]


def test_a_long_prompt_is_cut_from_the_left_with_a_warning(capsys, run, loaded):
    prompt = LINE.strip() * 2  # 82 bytes, the context is 32
    code, out, err = predict(capsys, run, "--max-new-tokens", "10", prompt)
    assert code == 0
    assert "the prompt has 82 tokens; kept its last 22" in err
    kept = prompt[-22:]
    assert out == reference(loaded, byte_ids(kept), 10) + "\n"
    assert out.startswith(kept)
    # With no new tokens it keeps 31, as the SavedModel's generate does.
    code, out, err = predict(capsys, run, "--max-new-tokens", "0", prompt)
    assert code == 0 and "kept its last 31" in err and out == prompt[-31:] + "\n"


def test_an_empty_prompt_starts_from_the_start_token(capsys, run, loaded):
    code, out, _ = predict(capsys, run, "--max-new-tokens", "8", "")
    assert code == 0
    start = loaded.tokenizers["text"].start_id
    expected = reference(loaded, [start], 8)
    assert expected and out == expected + "\n"


@pytest.mark.integration
def test_top_k_zero_means_no_top_k_filter(capsys, run, loaded):
    argv = ["--search", "sample", "--seed", "4", "--temperature", "2.0"]
    _, out, _ = predict(
        capsys, run, *argv, "--top-k", "0", "--max-new-tokens", "10", "to"
    )
    assert out == predict(capsys, run, *argv, "--max-new-tokens", "10", "to")[1]
    expected = reference(
        loaded, byte_ids("to"), 10, search="sample", seed=4, temperature=2.0
    )
    assert out == expected + "\n"
    narrowed = reference(
        loaded, byte_ids("to"), 10, search="sample", seed=4, temperature=2.0, top_k=2
    )
    assert narrowed != expected  # so the comparison above can tell


def test_arguments_that_are_not_utf8_become_replacement_characters():
    # Python hands undecodable argv bytes over as escaped lone surrogates.
    assert printable(b"to \xff be".decode("utf-8", "surrogateescape")) == (
        "to \ufffd be"
    )
    assert printable("a\ud800b") == "a\ufffdb"
    assert printable("plain é") == "plain é"


def test_zero_new_tokens_prints_the_prompt(capsys, run):
    assert predict(capsys, run, "--max-new-tokens", "0", "to be")[1] == "to be\n"


def test_invalid_utf8_on_stdin_becomes_replacement_characters(
    capsys, run, loaded, monkeypatch
):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"to \xff be\n")))
    code, out, _ = predict(capsys, run, "--max-new-tokens", "4")
    assert code == 0
    assert out.startswith("to \ufffd be")
    ids = byte_ids("to \ufffd be")
    assert out == reference(loaded, ids, 4) + "\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--temperature", "0"], "--temperature must be positive"),
        (["--temperature", "-1"], "--temperature must be positive"),
        (["--top-p", "0"], "--top-p must be in (0, 1]"),
        (["--top-p", "1.5"], "--top-p must be in (0, 1]"),
        (["--top-k", "-1"], "--top-k must be >= 0. Received: -1"),
        (["--max-new-tokens", "-1"], "--max-new-tokens must be >= 0"),
        (["--max-new-tokens", "32"], "--max-new-tokens must be in [0, 31]"),
        (["--beam-width", "0"], "--beam-width must be >= 1. Received: 0"),
        (["--length-penalty", "-1"], "--length-penalty must be >= 0"),
    ],
)
def test_bad_settings_exit_2_naming_the_option(capsys, run, argv, message):
    code, out, err = predict(capsys, run, "--search", "sample", *argv, "to be")
    assert code == 2 and out == ""
    assert message in err


def steps_of(ids):
    """`Generator.stream`-shaped steps that generate `ids` for one row."""
    return [(i + 1, np.array([t]), np.array([True])) for i, t in enumerate(ids)]


def test_wordpiece_streaming_never_takes_text_back():
    """The join rules rewrite the last words ("it '" + "s" is "it's", "well
    -" + "known" is "well-known"): every printed piece extends the text so
    far, and all of them together are the text of all the tokens."""
    from tfformer.training.text.wordpiece import WordPieceTokenizer

    vocabulary = [
        *("[PAD]", "[UNK]", "[START]", "[END]"),
        *("it", "'", "s", "well", "-", "known", "play", "##ing", ".", "a"),
    ]
    tokenizer = WordPieceTokenizer(vocabulary)
    index = {token: i for i, token in enumerate(vocabulary)}
    words = "it ' s well - known a play ##ing it ' s .".split()
    prompt = [index["a"]]
    generated = [index[w] for w in words] + [index["[END]"]]
    pieces = list(stream_text(tokenizer, prompt, steps_of(generated)))
    text = "".join(pieces)
    assert text == "a it's well-known a playing it's."
    assert text == detokenize(tokenizer, prompt + generated)
    # Nothing printed was ever rewritten: each prefix is the start of the
    # text of all the tokens up to then.
    printed = ""
    for piece in pieces:
        printed += piece
        assert text.startswith(printed)
    assert len(pieces) > 5  # it streamed, rather than printing at the end


def test_byte_streaming_waits_for_whole_characters():
    """A two-byte character arrives in two tokens: nothing is printed for
    the first byte, then the whole character."""
    from tfformer.preprocessing.byte_tokenizer import ByteTokenizer

    tokenizer = ByteTokenizer()
    generated = byte_ids("aé!")
    pieces = list(stream_text(tokenizer, byte_ids(">"), steps_of(generated)))
    assert pieces == [">", "a", "é", "!"]
