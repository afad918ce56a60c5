"""A checkpoint's chat template, converted with its text tokenizer: the
Jinja source (`chat_template.jinja`, else `tokenizer_config.json`'s
`chat_template`), the special tokens it may use, and the ids a reply stops
at (the end-of-turn token as tokenizer_config.json's `eos_token`, and the
end ids of config.json and generation_config.json)."""

import os

from tfformer.errors import InputError
from tfformer.preprocessing.chat_template import ChatTemplate
from tfformer.preprocessing.sentencepiece_tokenizer import SentencePieceTokenizer
from tfformer.training.convert.huggingface.checkpoint import read_json
from tfformer.training.convert.huggingface.decoders import ID_OFFSET
from tfformer.training.convert.huggingface.tokenizers import (
    TOKENIZER_CONFIG,
    dummy_prefix_rule,
    special_token,
)

# tokenizer_config.json's special tokens that transformers hands a template.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
# A conversation every chat template should render; a template that fails
# on it is not converted.
PROBE = [
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "How are you?"},
]


def template_source(source, settings):
    """(the template's Jinja source or None, the file it came from)."""
    path = os.path.join(source, "chat_template.jinja")
    if os.path.isfile(path):  # transformers >= 4.43 saves it there
        try:
            with open(path, encoding="utf-8") as f:
                return f.read(), path
        except UnicodeDecodeError as e:
            raise InputError(f"{path} is not UTF-8 text: {e}") from None
    where = f"{source}/tokenizer_config.json: chat_template"
    template = settings.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {
            entry.get("name"): entry.get("template")
            for entry in template
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
        }
        if "default" not in named:
            raise InputError(
                f"{where}: a list of named templates needs one named 'default'. "
                f"Received names: {sorted(map(str, named))}"
            )
        template, where = named["default"], f"{where}[name=default]"
    return template, where


def stop_ids(source, config, settings, tokenizer):
    """The model's ids a reply stops at: the tokenizer's end token,
    tokenizer_config.json's eos_token, and every eos_token_id of config.json
    and generation_config.json (ints or lists), in that order, once each."""
    generation = read_json(source, "generation_config.json", required=False) or {}
    ids = [tokenizer.end_id]
    eos = special_token(settings, "eos_token", None)
    index = {token: i for i, token in enumerate(tokenizer.vocabulary)}
    if eos is not None:
        if eos not in index:
            raise InputError(
                f"{source}/tokenizer_config.json: eos_token {eos!r} is not a token "
                "of the tokenizer."
            )
        ids.append(index[eos] + ID_OFFSET)
    for name, values in (
        ("config.json", config),
        ("generation_config.json", generation),
    ):
        value = values.get("eos_token_id")
        for i in value if isinstance(value, list) else [value]:
            if i is None:
                continue
            if isinstance(i, bool) or not isinstance(i, int):
                raise InputError(
                    f"{name}: eos_token_id must be ids. Received: {value!r}"
                )
            if not 0 <= i < len(tokenizer.vocabulary):
                raise InputError(
                    f"{name}: eos_token_id {i} is not an id of the tokenizer's "
                    f"{len(tokenizer.vocabulary)} tokens."
                )
            ids.append(i + ID_OFFSET)
    return list(dict.fromkeys(ids))


def check_special_split(source, settings, tokenizer):
    """ValueError unless a SentencePiece `tokenizer` splits a rendered
    template's special tokens out as the checkpoint's Hugging Face
    tokenizer does (`dummy_prefix_rule`); a byte-level BPE always does."""
    if not isinstance(tokenizer, SentencePieceTokenizer):
        return
    if tokenizer.remove_extra_whitespaces:
        raise InputError(
            f"{source}/tokenizer.model removes extra whitespace, which tfformer "
            "does not reproduce around a chat template's special tokens."
        )
    if dummy_prefix_rule(source, settings, tokenizer.add_dummy_prefix) is None:
        raise InputError(
            f"{source}/tokenizer.json's normalizer and pre-tokenizer disagree "
            f"with tokenizer.model's add_dummy_prefix "
            f"({tokenizer.add_dummy_prefix}) on the dummy prefix."
        )


def chat_template(source, config, tokenizer, progress):
    """The checkpoint's `ChatTemplate` for a run of `tokenizer` (a byte-level
    or SentencePiece BPE in the model's ids), or None when it has none or
    one tfformer does not render (`progress` says why; the run then
    continues text without chat). ValueError for malformed files."""
    settings = read_json(source, TOKENIZER_CONFIG, required=False) or {}
    template, where = template_source(source, settings)
    if template is None:
        return None
    special = {
        name: token
        for name in SPECIAL_TOKENS
        for token in [special_token(settings, name, None)]
        if token is not None
    }
    stops = stop_ids(source, config, settings, tokenizer)
    try:
        chat = ChatTemplate(
            template, special_tokens=special, stop_ids=stops, where=where
        )
        chat.render(PROBE)
        check_special_split(source, settings, tokenizer)
    except ValueError as e:
        progress(f"{e}\nThe chat template is not converted.")
        return None
    names = [tokenizer.vocabulary[i - ID_OFFSET] for i in chat.stop_ids]
    progress(f"Chat template: from {where}; replies stop at {names}")
    return chat
