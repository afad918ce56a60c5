"""Chat with converted checkpoints: a tiny random Llama 3-style checkpoint
with Llama 3's chat template and special tokens, converted; its replies
checked against keras-hub's `Llama3Backbone` greedy on Hugging Face's
tokenization of the rendered conversation, stopping at any of the
checkpoint's end tokens."""

import json

import numpy as np
import pytest

import tfformer
from tests.tfformer.preprocessing.test_chat_template import GEMMA
from tests.training.convert.huggingface.test_llama import (
    BEGIN,
    END_OF_TEXT,
    llama3_tokenizer,
    write_llama3_checkpoint,
)
from tests.training.convert.huggingface.testing import quiet, reference_greedy
from tfformer.training.commands import predict as predict_cli
from tfformer.training.convert import convert

# Meta-Llama-3-8B-Instruct's chat template (tokenizer_config.json).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
TURN_TOKENS = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "the cat sat"},
]


def chat_checkpoint(path, rng, *, template=LLAMA3_TEMPLATE, eos=(), context=96):
    """(checkpoint directory, its Hugging Face tokenizer): Llama 3's turn
    tokens added, `<|eot_id|>` as tokenizer_config.json's eos_token and
    the ids `eos` added to config.json's eos_token_id list."""
    hf = llama3_tokenizer()
    hf.add_special_tokens(TURN_TOKENS)
    source = write_llama3_checkpoint(path, hf, rng)
    config = json.loads((source / "config.json").read_text())
    config["eos_token_id"] = [hf.token_to_id(END_OF_TEXT), *eos]
    config["max_position_embeddings"] = context  # room for a conversation
    (source / "config.json").write_text(json.dumps(config))
    settings = {
        "bos_token": BEGIN,
        "eos_token": "<|eot_id|>",
        "chat_template": template,
    }
    (source / "tokenizer_config.json").write_text(json.dumps(settings))
    return source, hf


def hand_rendered(messages):
    """Llama 3's template, written out by hand."""
    text = BEGIN
    for m in messages:
        text += f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n"
        text += m["content"].strip() + "<|eot_id|>"
    return text + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def keras_hub_reply(path):
    """keras-hub's greedy reply to MESSAGES on the checkpoint of seed 21
    (written to `path`) without extra end ids: (its 8 greedy tokens, the
    Hugging Face tokenizer)."""
    keras_hub = pytest.importorskip("keras_hub")
    source, hf = chat_checkpoint(path, np.random.default_rng(21))
    prompt = hf.encode(hand_rendered(MESSAGES), add_special_tokens=False).ids
    assert prompt[0] == hf.token_to_id(BEGIN) and prompt.count(prompt[0]) == 1
    model = keras_hub.models.Llama3Backbone.from_preset(str(source))
    ids = reference_greedy(model, prompt, 8, end=hf.token_to_id("<|eot_id|>"))
    return ids[len(prompt) :], hf


@pytest.fixture(scope="module")
def reference_reply(tmp_path_factory):
    return keras_hub_reply(tmp_path_factory.mktemp("reference"))


def test_chat_replies_as_keras_hub_and_stops_at_any_end_token(
    tmp_path, reference_reply, capsys
):
    """The reply is keras-hub's greedy continuation of the rendered
    conversation (tokenized without a second start token), cut before the
    first of the checkpoint's end tokens: one listed in config.json's
    eos_token_id only (here the reply's third token) stops it too."""
    greedy, hf = reference_reply
    assert len(greedy) == 8 and greedy[2] not in greedy[:2]
    source, _ = chat_checkpoint(
        tmp_path / "hf", np.random.default_rng(21), eos=[greedy[2]]
    )
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    stops = [END_OF_TEXT, "<|eot_id|>", hf.id_to_token(greedy[2])]
    assert any(f"replies stop at {stops}" in line for line in said)
    model = tfformer.load(run)
    assert model.chat_template.render(MESSAGES) == hand_rendered(MESSAGES)
    reply = model.chat(MESSAGES, max_new_tokens=8)
    assert reply == hf.decode(greedy[:2])
    # Without the extra end id, all eight tokens.
    plain = tmp_path / "plain"
    source, _ = chat_checkpoint(plain / "hf", np.random.default_rng(21))
    plain_run = convert(str(source), str(plain / "run"), progress=quiet)
    full = tfformer.load(plain_run).chat(MESSAGES, max_new_tokens=8)
    assert full == hf.decode(greedy)
    # The command prints the same reply.
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(MESSAGES))
    capsys.readouterr()
    code = predict_cli.main(
        ["--checkpoint", plain_run, "--chat", str(path), "--max-new-tokens", "8"]
    )
    assert code == 0
    assert capsys.readouterr().out == full + "\n"


def test_a_template_without_a_start_token_gets_none(tmp_path):
    """ChatML (Qwen's form) writes no start token: the conversation's ids
    are Hugging Face's tokenization of the rendered text without one, though
    the Llama 3 tokenizer starts every plain text with <|begin_of_text|>."""
    keras_hub = pytest.importorskip("keras_hub")
    chatml = (
        "{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '\\n' + "
        "m['content'] + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant\\n' }}"
        "{% endif %}"
    )
    source, hf = chat_checkpoint(
        tmp_path / "hf", np.random.default_rng(25), template=chatml
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run)
    rendered = model.chat_template.render(MESSAGES)
    assert rendered.startswith("<|start_header_id|>system\nBe brief.<|eot_id|>")
    prompt = hf.encode(rendered, add_special_tokens=False).ids
    assert hf.token_to_id(BEGIN) not in prompt
    assert [i - 1 for i in model.chat_ids(MESSAGES)] == prompt
    reference = keras_hub.models.Llama3Backbone.from_preset(str(source))
    greedy = reference_greedy(reference, prompt, 5, end=hf.token_to_id("<|eot_id|>"))
    assert model.chat(MESSAGES, max_new_tokens=5) == hf.decode(greedy[len(prompt) :])


def stdin_of(monkeypatch, data):
    import io

    stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    return stdin


@pytest.mark.integration
def test_a_conversation_on_stdin_keeps_its_history(tmp_path, monkeypatch, capsys):
    """`tfformer-predict --chat` with no file: each stdin line (CRLF or LF;
    blank lines skipped) is the user's next message, answered with the
    conversation so far; when it outgrows the context, its oldest exchanges
    are left out, said on stderr."""
    source, _ = chat_checkpoint(tmp_path / "hf", np.random.default_rng(22))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run)
    first = model.chat([{"role": "user", "content": "the cat"}], max_new_tokens=5)
    history = [
        {"role": "user", "content": "the cat"},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "sat on"},
    ]
    second = model.chat(history, max_new_tokens=5)
    assert second != model.chat(history[2:], max_new_tokens=5)  # history counts
    # A third message that fits only without the first exchange.
    long = "the cat sat on the mat"
    history += [
        {"role": "assistant", "content": second},
        {"role": "user", "content": long},
    ]
    assert len(model.chat_ids(history)) + 5 > 96  # the context
    assert len(model.chat_ids(history[2:])) + 5 <= 96
    third = model.chat(history[2:], max_new_tokens=5)
    stdin_of(monkeypatch, f"the cat\r\n\nsat on\n{long}\n".encode())
    capsys.readouterr()
    code = predict_cli.main(["--checkpoint", run, "--chat", "--max-new-tokens", "5"])
    assert code == 0
    out, err = capsys.readouterr()
    assert out == f"{first}\n{second}\n{third}\n"
    assert "its 2 oldest messages are left out" in err
    # Beam search is refused before a line is read.
    stdin = stdin_of(monkeypatch, b"the cat\n")
    argv = ["--checkpoint", run, "--chat", "--search", "beam"]
    assert predict_cli.main(argv) == 2
    assert "'beam' is not offered" in capsys.readouterr().err
    assert stdin.read() == "the cat\n"


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    source, _ = chat_checkpoint(root / "hf", np.random.default_rng(23))
    return convert(str(source), str(root / "run"), progress=quiet)


@pytest.mark.parametrize(
    "messages, message",
    [
        ([{"role": "robot", "content": "hi"}], r"messages\[0\]: role must be one of"),
        (
            [{"role": "user", "content": "hi"}, {"role": "user", "content": 3}],
            r"messages\[1\]: content must be a string. Received: 3",
        ),
        ([{"role": "user", "content": "hi", "name": "x"}], r"has keys \['name'\]"),
        ({"role": "user", "content": "hi"}, "messages must be a list"),
        ([], "messages is empty"),
    ],
)
def test_bad_messages_are_refused_naming_the_message(chat_run, messages, message):
    with pytest.raises(ValueError, match=message):
        tfformer.load(chat_run).chat(messages)


def test_a_conversation_keeps_its_cache_and_replies_as_chat_does(chat_run, capsys):
    """`conversation()` sends messages one at a time: each reply is the one
    `chat` makes fresh for the conversation so far, while its step reads
    only what follows the cached ids (the last turn's whole prompt is
    reused) until the conversation outgrows the context: then its oldest
    exchange is left out and it is read again from its first message. A
    message that does not fit is refused and leaves the conversation as it
    was; a system message first is never left out; sampling with a seed
    replies as chat does."""
    model = tfformer.load(chat_run)
    chat = model.conversation(max_new_tokens=5)
    prompt = []
    for turn, text in enumerate(["the cat", "sat on", "the cat sat on the mat"]):
        whole = [*chat.messages, {"role": "user", "content": text}]
        reply = chat.send(text)
        *asked, answer = chat.messages
        assert asked[-1] == {"role": "user", "content": text}
        assert answer == {"role": "assistant", "content": reply}
        assert reply == model.chat(asked, max_new_tokens=5)
        if turn < 2:
            assert len(asked) == 2 * turn + 1
            assert chat.session.reused >= len(prompt) > 0 or turn == 0
        else:  # the context is 96 tokens
            assert len(model.chat_ids(whole)) + 5 > 96 and asked == whole[2:]
            # Shared: the start token and the first turn's header.
            assert 0 < chat.session.reused < len(model.chat_ids(whole[:1]))
            assert "its 2 oldest messages are left out" in capsys.readouterr().err
        prompt = model.chat_ids(asked)
    history = list(chat.messages)
    with pytest.raises(ValueError, match="does not fit the context"):
        chat.send("the cat " * 100)
    assert chat.messages == history
    # A system message first stays when older exchanges are left out.
    kept = model.conversation(MESSAGES[:1], max_new_tokens=5)
    for text in ["the cat", "sat on", "the cat sat on the mat"]:
        kept.send(text)
    assert kept.messages[0] == MESSAGES[0] and len(kept.messages) == 5
    settings = dict(max_new_tokens=8, search="sample", seed=3)
    sampled = model.conversation(MESSAGES[:1], **settings)
    asked = [*MESSAGES[:1], {"role": "user", "content": "sat on"}]
    assert sampled.send("sat on") == model.chat(asked, **settings)


def test_bad_chat_requests_exit_2_in_one_line(chat_run, tiny_gpt_run, tmp_path, capsys):
    def run(*argv):
        capsys.readouterr()
        code = predict_cli.main(["--max-new-tokens", "2", *argv])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
        return err

    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "bot", "content": "hi"}]))
    assert f"--chat: {path}: messages[0]: role must be one of" in run(
        "--checkpoint", chat_run, "--chat", str(path)
    )
    path.write_text("[{")
    assert f"{path} is not a JSON list of messages" in run(
        "--checkpoint", chat_run, "--chat", str(path)
    )
    assert "cannot read" in run(
        "--checkpoint", chat_run, "--chat", str(tmp_path / "no")
    )
    assert "not as arguments" in run(
        "--checkpoint", chat_run, "--chat", str(path), "hi"
    )
    assert "has none" in run("--checkpoint", tiny_gpt_run, "--chat", str(path))
    path.write_text(json.dumps(MESSAGES))
    assert "'beam' is not offered" in run(
        "--checkpoint", chat_run, "--chat", str(path), "--search", "beam"
    )
    path.write_text(json.dumps([{"role": "user", "content": "the cat " * 100}]))
    assert "does not fit the context" in run(
        "--checkpoint", chat_run, "--chat", str(path)
    )


def test_a_manifest_naming_another_chat_file_is_refused(chat_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(chat_run, run)
    manifest = json.loads((run / "run.json").read_text())
    manifest["settings"]["chat_template"] = "../../etc/passwd"
    (run / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"settings\.chat_template must be"):
        tfformer.load(str(run)).chat(MESSAGES)


def test_a_template_tfformer_cannot_render_is_left_out_and_said(tmp_path):
    """A template that fails on a plain conversation, or uses
    transformers' {% generation %} tag, is not converted; the run keeps
    text in and out, and chat says it has no template."""
    for i, template in enumerate(
        ["{{ raise_exception('no') }}", "{% generation %}x{% endgeneration %}"]
    ):
        source, _ = chat_checkpoint(
            tmp_path / f"hf{i}", np.random.default_rng(24), template=template
        )
        said = []
        run = convert(str(source), str(tmp_path / f"run{i}"), progress=said.append)
        assert any("The chat template is not converted." in line for line in said)
        assert any("tokenizer_config.json: chat_template" in line for line in said)
        with pytest.raises(ValueError, match="has none"):
            tfformer.load(run).chat(MESSAGES)


# -- SentencePiece checkpoints: Gemma's template, Llama 2's ------------------------

# Gemma's chat template (google/gemma-2b-it's tokenizer_config.json).
GEMMA_TEMPLATE = GEMMA
GEMMA_MESSAGES = [
    {"role": "user", "content": "the quick fox"},
    {"role": "assistant", "content": "over the dog"},
    {"role": "user", "content": "tools  then?"},
]


def gemma_sentencepiece():
    """A SentencePiece BPE in Gemma's settings and ids (pad 0, eos 1, bos 2,
    unk 3; no dummy prefix) with its turn markers as user-defined pieces,
    trained here: its `sentencepiece` processor."""
    spm = pytest.importorskip("sentencepiece")
    from tests.tfformer.preprocessing.test_sentencepiece_tokenizer import (
        SETTINGS,
        TOOL,
        train,
    )

    data = train(
        {
            **SETTINGS["gemma"],
            "user_defined_symbols": [TOOL, "<start_of_turn>", "<end_of_turn>"],
            **dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3),
            **dict(pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>"),
        }
    )
    return spm.SentencePieceProcessor(model_proto=data)


def gemma_chat_checkpoint(path, rng, context=128):
    """(a random Gemma checkpoint with `gemma_sentencepiece`'s
    `tokenizer.model`, Gemma's chat template, `<end_of_turn>` as a
    generation_config.json end id; its processor)."""
    from tests.training.convert.huggingface.test_gemma import gemma_tensors
    from tests.training.convert.huggingface.test_gemma import (
        write_checkpoint as write_gemma,
    )

    processor = gemma_sentencepiece()
    size = processor.get_piece_size()

    tensors = gemma_tensors(rng)
    width = tensors["model.embed_tokens.weight"].shape[1]
    tensors["model.embed_tokens.weight"] = (
        0.3 * rng.normal(size=(size, width))
    ).astype("float32")
    config = {
        "vocab_size": size,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "max_position_embeddings": context,
    }
    source = write_gemma(path, rng, config=config, tensors=tensors)
    (source / "tokenizer.model").write_bytes(processor.serialized_model_proto())
    settings = {"bos_token": "<bos>", "eos_token": "<eos>"}
    settings["chat_template"] = GEMMA_TEMPLATE
    (source / "tokenizer_config.json").write_text(json.dumps(settings))
    turn_end = processor.piece_to_id("<end_of_turn>")
    (source / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [1, turn_end]})
    )
    return source, processor


def gemma_rendered(messages):
    """Gemma's template, written out by hand."""
    text = "<bos>"
    for m in messages:
        role = "model" if m["role"] == "assistant" else m["role"]
        text += f"<start_of_turn>{role}\n{m['content'].strip()}<end_of_turn>\n"
    return text + "<start_of_turn>model\n"


def test_gemma_chat_replies_as_keras_hub_on_its_sentencepiece_ids(tmp_path):
    """A Gemma checkpoint's chat template on its SentencePiece tokenizer:
    the rendered `<bos>` is the start id (not its characters, as
    `sentencepiece` alone reads it), the turn markers are their pieces, and
    the reply is keras-hub's `GemmaBackbone` greedy on those ids, cut at
    `<end_of_turn>`."""
    from tests.training.convert.huggingface.test_gemma import keras_hub_backbone

    source, processor = gemma_chat_checkpoint(tmp_path / "hf", np.random.default_rng(3))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("replies stop at ['<eos>', '<end_of_turn>']" in s for s in said), said
    model = tfformer.load(run)
    text = model.chat_template.render(GEMMA_MESSAGES)
    assert text == gemma_rendered(GEMMA_MESSAGES)
    # transformers' reading: <bos> split out, then the rest (no dummy prefix).
    prompt = [2, *processor.encode(text[len("<bos>") :])]
    assert processor.piece_to_id("<start_of_turn>") in prompt
    assert [i - 1 for i in model.chat_ids(GEMMA_MESSAGES)] == prompt
    turn_end = processor.piece_to_id("<end_of_turn>")
    greedy = reference_greedy(keras_hub_backbone(source), prompt, 12, end=[1, turn_end])
    reply = processor.decode(greedy[len(prompt) :])
    assert model.chat(GEMMA_MESSAGES, max_new_tokens=12) == reply


LLAMA2_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)


@pytest.mark.parametrize(
    "tokenizer_json, after_special, before_space",
    [
        # The legacy Llama 2 tokenizer.json: Prepend("▁") on every text.
        (
            {
                "normalizer": {
                    "type": "Sequence",
                    "normalizers": [
                        {"type": "Prepend", "prepend": "\u2581"},
                        {"type": "Replace", "pattern": {"String": " "}},
                    ],
                }
            },
            True,
            True,
        ),
        # legacy: false: Metaspace prepends to the first piece only (and to
        # no text that starts with a space), here inside a Sequence.
        (
            {
                "normalizer": None,
                "pre_tokenizer": {
                    "type": "Sequence",
                    "pretokenizers": [{"type": "Metaspace", "prepend_scheme": "first"}],
                },
            },
            False,
            False,
        ),
        (
            {"pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "always"}},
            True,
            False,
        ),
        # No tokenizer.json: tokenizer_config.json's legacy, true when absent.
        (None, True, True),
    ],
)
def test_llama2_chat_reads_its_special_tokens_as_its_tokenizer_json_does(
    tmp_path, tokenizer_json, after_special, before_space
):
    """Llama 2's template writes `<s>` and `</s>` between turns: each is
    its id, and the text after it is prefixed with "▁" or not as the
    checkpoint's tokenizer.json says (the ids of
    test_sentencepiece_tokenizer's `split_reference`, sentencepiece's ids
    text by text)."""
    from tests.tfformer.preprocessing.test_sentencepiece_tokenizer import (
        split_reference,
        without_dummy_prefix,
    )
    from tests.training.convert.huggingface.test_llama import converted_llama2_text

    processor, source, _, _ = converted_llama2_text(tmp_path / "first")
    (source / "tokenizer_config.json").write_text(
        json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA2_TEMPLATE}
        )
    )
    if tokenizer_json is not None:
        (source / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("replies stop at ['</s>']" in s for s in said), said
    model = tfformer.load(run)
    messages = [
        {"role": "user", "content": "the fox"},
        {"role": "assistant", "content": "jumps over"},
        {"role": "user", "content": "and then?"},
    ]
    text = model.chat_template.render(messages)
    assert text.count("<s>") == 2 and text.count("</s>") == 1
    bare = without_dummy_prefix(processor)
    want = split_reference(processor, bare, text, after_special, before_space)
    assert [i - 1 for i in model.chat_ids(messages)] == want
    # The run's tokenizer keeps the files' rule: on a text where each rule
    # gives other ids (after its own start token), it gives this one's.
    probe = " y" + text + "</s> x"
    ids = model.tokenizer.tokenize([probe], special=True)[0].numpy().tolist()
    got = [i - 1 for i in ids[1:]]
    assert got == split_reference(processor, bare, probe, after_special, before_space)
    for other in [(True, True), (False, True), (True, False), (False, False)]:
        if other != (after_special, before_space):
            assert got != split_reference(processor, bare, probe, *other), other


@pytest.mark.parametrize(
    "tokenizer_json",
    [
        {"normalizer": None},
        # Untrusted odd values read as no component, not as a crash.
        {"normalizer": {"type": "Sequence", "normalizers": 5}, "pre_tokenizer": [1]},
    ],
)
def test_a_sentencepiece_chat_template_whose_files_disagree_is_left_out(
    tmp_path, tokenizer_json
):
    """tokenizer.json without a dummy prefix for a tokenizer.model with one:
    which ids transformers would give is unclear, so no chat template."""
    from tests.training.convert.huggingface.test_llama import converted_llama2_text

    _, source, _, _ = converted_llama2_text(tmp_path / "first")
    (source / "tokenizer_config.json").write_text(
        json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA2_TEMPLATE}
        )
    )
    (source / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("disagree with tokenizer.model's add_dummy_prefix" in s for s in said)
    assert any("The chat template is not converted." in s for s in said)
    assert tfformer.load(run).directory.chat_template() is None
