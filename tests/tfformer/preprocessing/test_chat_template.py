"""Chat templates rendered as transformers renders them (hand-written
expected prompts for Llama 3's and ChatML's templates), inside Jinja's
sandbox, with errors that name the message or the template's file."""

import json

import pytest

from tfformer.preprocessing.chat_template import ChatTemplate, check_messages

# Qwen2.5's ChatML form, without its tool branches.
CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Gemma's (google/gemma-2b-it): no system role, "model" for the assistant.
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
    "'<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)
# Block tags on lines of their own, indented: trim_blocks and lstrip_blocks
# (transformers' settings) leave only the expression lines.
LAYOUT = """{% for message in messages %}
    {% if message['role'] == 'user' %}
U:{{ message['content'] | trim }}
    {% endif %}
{% endfor %}
"""
CONVERSATION = [
    {"role": "user", "content": " Hi there \n"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "日本語 😀?"},
]


def test_chatml_renders_as_written_by_hand():
    template = ChatTemplate(CHATML, stop_ids=[3])
    expected = (
        "<|im_start|>user\n Hi there \n<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\n日本語 😀?<|im_end|>\n"
    )
    assert template.render(CONVERSATION, add_generation_prompt=False) == expected
    assert template.render(CONVERSATION) == expected + "<|im_start|>assistant\n"


def test_block_layout_is_trimmed_as_transformers_trims_it():
    template = ChatTemplate(LAYOUT, stop_ids=[1])
    assert template.render(CONVERSATION) == "U:Hi there\nU:日本語 😀?\n"


def test_gemmas_template_and_its_exceptions():
    """Gemma's renders as written out by hand; its raise_exception reaches
    the caller with the template's words and the file."""
    template = ChatTemplate(
        GEMMA, special_tokens={"bos_token": "<bos>"}, stop_ids=[1], where="gemma.json"
    )
    assert template.render(CONVERSATION) == (
        "<bos><start_of_turn>user\nHi there<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\n日本語 😀?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    with pytest.raises(ValueError, match=r"gemma.json: .*System role not supported"):
        template.render([{"role": "system", "content": "x"}, *CONVERSATION])
    with pytest.raises(ValueError, match=r"gemma.json: .*roles must alternate"):
        template.render(CONVERSATION[:1] * 2)


@pytest.mark.parametrize(
    "source, message",
    [
        # Attribute access outside the sandbox's allow-list.
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "failed on these messages"),
        # The messages cannot be changed from the template.
        ("{{ messages.append(1) }}", "failed on these messages"),
        ("{% for x in range(10**7) %}{% endfor %}", "Range too big"),
        ("{{ 'x' * 10**7 }}", "a repetition of 10000000 items"),
        ("{{ [1, 2] * 10**7 }}", "a repetition of 20000000 items"),
        ("{{ 2 ** 100000 }}", "a power of 100000"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        (
            "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
            "rendered more than 4194304 characters",
        ),
    ],
)
def test_the_sandbox_refuses_what_a_downloaded_template_must_not_do(source, message):
    with pytest.raises(ValueError, match=f"t.jinja: .*{message}"):
        ChatTemplate(source, stop_ids=[1], where="t.jinja").render(CONVERSATION)


@pytest.mark.parametrize(
    "source, settings, message",
    [
        ("{% for %}", {}, "does not compile"),
        ("{% generation %}{% endgeneration %}", {}, "does not compile"),
        (3, {}, "must be a non-empty string"),
        ("x", {"special_tokens": {"messages": "x"}}, "names ending in _token"),
        ("x", {"special_tokens": {"bos_token": 1}}, "names ending in _token"),
        ("x", {"stop_ids": []}, "stop_ids must be a non-empty list"),
        ("x", {"stop_ids": [True]}, "stop_ids must be a non-empty list"),
    ],
)
def test_bad_templates_are_refused_naming_the_file(source, settings, message):
    settings = {"stop_ids": [1], **settings}
    with pytest.raises(ValueError, match=f"t.jinja: .*{message}"):
        ChatTemplate(source, where="t.jinja", **settings)


def test_check_messages_names_the_bad_one():
    assert check_messages(CONVERSATION) == CONVERSATION
    with pytest.raises(ValueError, match=r"messages\[2\]: role must be"):
        check_messages([*CONVERSATION[:2], {"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match=r"messages\[0\]: content must be a string"):
        check_messages([{"role": "user", "content": ["a"]}])
    with pytest.raises(ValueError, match=r"messages\[0\] must be a dict"):
        check_messages(["hi"])
    with pytest.raises(ValueError, match="messages must be a list"):
        check_messages("hi")


def test_the_file_round_trips_and_a_damaged_one_is_named(tmp_path):
    template = ChatTemplate(
        CHATML, special_tokens={"eos_token": "<|im_end|>"}, stop_ids=[5, 7]
    )
    path = tmp_path / "chat_template.json"
    template.save(path)
    again = ChatTemplate.load(path)
    assert again.to_json() == template.to_json()
    assert again.render(CONVERSATION) == template.render(CONVERSATION)
    for text, message in [
        ("{", "is not a JSON chat template"),
        (json.dumps({"template": CHATML}), "must hold template, special_tokens"),
        (
            json.dumps({"template": 1, "special_tokens": {}, "stop_ids": [1]}),
            "must be a non-empty string",
        ),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=f"{path}.*{message}"):
            ChatTemplate.load(path)
    with pytest.raises(ValueError, match="is missing"):
        ChatTemplate.load(tmp_path / "none.json")
