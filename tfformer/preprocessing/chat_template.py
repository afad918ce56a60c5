"""Chat templates: a checkpoint's Jinja template that turns a list of
messages into the text of a prompt, as Hugging Face's transformers renders
it (`apply_chat_template`).

A template comes from a downloaded file (`tokenizer_config.json`'s
`chat_template`, or `chat_template.jinja`), so it is untrusted input: it is
rendered in Jinja's immutable sandbox, as transformers does (no attribute
access outside the sandbox's allow-list, no mutation of the messages, ranges
capped), with transformers' helpers `raise_exception`, `strftime_now` and the
`tojson` filter, `trim_blocks` and `lstrip_blocks` on. A template that does
not compile, or fails while rendering (its own `raise_exception`, an
undefined operation, a sandbox violation), gives a ValueError naming the
file. Templates that use transformers' `{% generation %}` tag (for training
masks) do not compile here.

Pure Python and Jinja2; no TensorFlow.
"""

import json
import os

from tfformer.errors import InputError

# The roles a message may have. Hugging Face passes any role through; these
# are the ones chat templates handle (and LiteRT-LM's Conversation takes).
ROLES = ("system", "user", "assistant")
# The most text a rendered conversation may hold: rendering stops there (a
# template that loops to make more is refused, not rendered out of memory),
# and so does a string or list repeated past it, or a power past
# MAX_EXPONENT.
MAX_RENDERED_CHARACTERS = 4 << 20
MAX_EXPONENT = 1024


def check_messages(messages):
    """`messages` as a list of {"role", "content"} dicts, or ValueError
    naming the first bad message (its index and what it holds)."""
    if isinstance(messages, dict | str) or not isinstance(messages, list | tuple):
        raise InputError(
            "messages must be a list of {'role': ..., 'content': ...} dicts. "
            f"Received: {type(messages).__name__}"
        )
    if not messages:
        raise InputError("messages is empty: a conversation needs one message.")
    checked = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InputError(
                f"{where} must be a dict with 'role' and 'content'. "
                f"Received: {message!r:.200}"
            )
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            raise InputError(
                f"{where} has keys {extra}; a message has only 'role' and "
                "'content' (tool calls and images are not supported)."
            )
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise InputError(
                f"{where}: role must be one of {list(ROLES)}. Received: {role!r:.200}"
            )
        if not isinstance(content, str):
            raise InputError(
                f"{where}: content must be a string. Received: {content!r:.200}"
            )
        checked.append({"role": role, "content": content})
    return checked


def _environment():
    """Jinja's immutable sandbox set up as transformers sets it up, with
    repetition and powers capped."""
    import datetime

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Sandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for items, times in ((left, right), (right, left)):
                    if (
                        isinstance(items, str | list | tuple)
                        and isinstance(times, int)
                        and len(items) * times > MAX_RENDERED_CHARACTERS
                    ):
                        raise jinja2.sandbox.SecurityError(
                            f"a repetition of {len(items) * times} items (more "
                            f"than {MAX_RENDERED_CHARACTERS})"
                        )
            if (
                operator == "**"
                and isinstance(right, int | float)
                and abs(right) > MAX_EXPONENT
            ):
                raise jinja2.sandbox.SecurityError(
                    f"a power of {right} (more than {MAX_EXPONENT})"
                )
            return super().call_binop(context, operator, left, right)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    environment = Sandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    return environment


class ChatTemplate:
    """A chat template, ready to render conversations.

    Args:
        template: the Jinja source.
        special_tokens: {name: token text} the template may use
            (`bos_token`, `eos_token`, ...; transformers passes the
            tokenizer's special tokens by these names).
        stop_ids: the model's ids at which a reply ends (the end-of-turn
            token and the checkpoint's end tokens), in order.
        where: what to name in errors (the file the template came from).

    Raises:
        ValueError: a template that is not a string or does not compile, or
            special tokens or stop ids of the wrong types.
    """

    def __init__(self, template, *, special_tokens=None, stop_ids=(), where="chat"):
        import jinja2

        if not isinstance(template, str) or not template.strip():
            raise InputError(
                f"{where}: the chat template must be a non-empty string. "
                f"Received: {template!r:.200}"
            )
        special_tokens = dict(special_tokens or {})
        for name, token in special_tokens.items():
            if not (
                isinstance(name, str)
                and name.endswith("_token")
                and isinstance(token, str)
            ):
                raise InputError(
                    f"{where}: special tokens must map names ending in _token "
                    f"to strings. Received: {name!r:.100}: {token!r:.200}"
                )
        stop_ids = list(stop_ids)
        if not stop_ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in stop_ids
        ):
            raise InputError(
                f"{where}: stop_ids must be a non-empty list of token ids. "
                f"Received: {stop_ids!r:.200}"
            )
        self.template, self.where = template, where
        self.special_tokens, self.stop_ids = special_tokens, stop_ids
        try:
            self._compiled = _environment().from_string(template)
        except jinja2.TemplateError as e:
            raise InputError(
                f"{where}: the chat template does not compile: {e}"
            ) from None

    def render(self, messages, *, add_generation_prompt=True):
        """The prompt text of `messages` (see `check_messages`), ending with
        the template's opening of the assistant's turn when
        `add_generation_prompt`.

        Raises:
            ValueError: a bad message (named), or a template that fails on
                these messages (its message, and the file)."""
        import jinja2

        messages = check_messages(messages)
        pieces, length = [], 0
        try:
            for piece in self._compiled.generate(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                tools=None,
                documents=None,
                **self.special_tokens,
            ):
                pieces.append(piece)
                length += len(piece)
                if length > MAX_RENDERED_CHARACTERS:
                    break
        except jinja2.TemplateError as e:
            raise InputError(
                f"{self.where}: the chat template failed on these messages: {e}"
            ) from None
        except Exception as e:  # anything a template's Python operations raise
            raise InputError(
                f"{self.where}: the chat template failed on these messages: "
                f"{type(e).__name__}: {e}"
            ) from None
        if length > MAX_RENDERED_CHARACTERS:
            raise InputError(
                f"{self.where}: the chat template rendered more than "
                f"{MAX_RENDERED_CHARACTERS} characters."
            )
        return "".join(pieces)

    def prompt_ids(self, messages, tokenizer):
        """The token ids of `messages` rendered with the assistant's turn
        opened, as transformers' `apply_chat_template` tokenizes them: the
        special tokens the text holds are theirs (a SentencePiece
        `tokenizer` is asked to split them out; a byte-level BPE always
        does), and no start token is added to the text (a template that
        wants one writes it, Llama 3's and Gemma's `bos_token`).

        Raises:
            ValueError: a bad message, a template that fails on the
                messages or renders no tokens."""
        from tfformer.preprocessing.sentencepiece_tokenizer import (
            SentencePieceTokenizer,
        )

        text = self.render(messages)
        if isinstance(tokenizer, SentencePieceTokenizer):
            ids = tokenizer.tokenize([text], special=True)
        else:
            ids = tokenizer.tokenize([text])
        ids = ids[0].numpy().tolist()
        if getattr(tokenizer, "add_start_token", False):
            ids = ids[1:]
        if not ids:
            raise InputError(
                f"messages: the chat template rendered {text!r:.100}, no tokens."
            )
        return ids

    # -- the file --------------------------------------------------------------

    def to_json(self):
        return {
            "template": self.template,
            "special_tokens": self.special_tokens,
            "stop_ids": self.stop_ids,
        }

    def save(self, path):
        from tfformer.runs.files import atomic_write_text

        atomic_write_text(
            os.fspath(path), json.dumps(self.to_json(), ensure_ascii=False, indent=1)
        )

    @classmethod
    def load(cls, path):
        """The template `save` wrote to `path`; ValueError naming the file
        when it is missing, not JSON or lacks a key."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
        except FileNotFoundError:
            raise InputError(f"{path} is missing (the run's chat template).") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path} is not a JSON chat template: {e}") from None
        if not isinstance(spec, dict) or sorted(spec) != sorted(
            ["template", "special_tokens", "stop_ids"]
        ):
            keys = sorted(spec) if isinstance(spec, dict) else type(spec).__name__
            raise InputError(
                f"{path} must hold template, special_tokens and stop_ids. "
                f"Received: {keys}"
            )
        if not isinstance(spec["special_tokens"], dict) or not isinstance(
            spec["stop_ids"], list
        ):
            raise InputError(
                f"{path}: special_tokens must be an object and stop_ids a list. "
                f"Received: {spec['special_tokens']!r:.100}, {spec['stop_ids']!r:.100}"
            )
        return cls(
            spec["template"],
            special_tokens=spec["special_tokens"],
            stop_ids=spec["stop_ids"],
            where=path,
        )
