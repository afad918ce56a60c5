"""The predictor of causal language-model runs (trained, or converted from
GPT-2 or Llama): prompts continued, texts scored.

    writer = tfformer.load("runs/shakespeare_gpt_10min")
    writer.generate(["ROMEO:"], max_new_tokens=40)          # greedy
    for piece in writer.stream("ROMEO:", search="sample", seed=1):
        print(piece, end="", flush=True)
    writer.score(["To be, or not to be"])["log_likelihood"]
"""

import math
import sys

import numpy as np

from tfformer.errors import InputError, InputTypeError
from tfformer.training.predictors.base import Option, Predictor


class TextGeneration:
    """Prompts continued with a causal LM: what `CausalLMPredictor` (a run)
    and `tfformer.training.string_models.StringCausalLM` (a Keras model
    with its preprocessor) share. The class using it has `model` (a
    `tfformer.models.CausalLM`), `tokenizer` (the product's tokenizer),
    `context` (tokens) and `end_ids`.

    Generation settings, as keywords of `generate` and `stream`:
    `max_new_tokens` (0 to the context minus one), `search` ("greedy",
    "sample" or "beam"), `temperature`, `top_k` (None or 0: no filter),
    `top_p` (None: no filter), `seed` (sampling: the same seed, the same
    text; None: a random one), `beam_width`, `length_penalty` (beam search:
    GNMT's alpha). The prompt's tokens come first, cut from the left (with
    a warning on stderr) to leave `max_new_tokens` of the context; an empty
    prompt starts from the start token.
    """

    def generate(self, prompts, **settings):
        """The text of each prompt continued (the prompt's text, then the
        continuation's), a list of str."""
        if isinstance(prompts, str):
            raise InputTypeError("prompts must be a list of strings, not one string.")
        return [
            generated_text(
                self.tokenizer, *self._generator(prompt, settings), self.end_ids
            )
            for prompt in prompts
        ]

    def stream(self, prompt, **settings):
        """The text of `prompt` continued, yielded in pieces as the tokens
        are made (greedy and sampling; beam search yields its best
        hypothesis at the end): the pieces together are `generate`'s text,
        and a piece is never taken back."""
        ids, generator = self._generator(prompt, settings)
        if generator is None or generator.search == "beam":
            yield generated_text(self.tokenizer, ids, generator, self.end_ids)
            return
        yield from stream_text(
            self.tokenizer,
            ids,
            generator.stream(np.array([ids], "int32")),
            stop_ids=self.end_ids,
        )

    def _generator(self, prompt, settings):
        """(the prompt's ids, a `Generator` for them; None for no new
        tokens), or ValueError naming a bad setting."""
        settings = check_generation_settings(self.context, **settings)
        new_tokens = settings.pop("max_new_tokens")
        ids = self.prompt_ids(prompt, new_tokens)
        if new_tokens == 0:
            return ids, None
        return ids, self.new_generator(len(ids) + new_tokens, settings)

    def new_generator(self, max_length, settings):
        """A `Generator` of `max_length` tokens with `settings` (`Generator`
        keywords)."""
        from tfformer.decoding import Generator

        tokenizer = self.tokenizer
        return Generator(
            self.model,
            max_length=max_length,
            start_id=tokenizer.start_id,
            end_id=self.end_ids,
            pad_id=tokenizer.pad_id,
            **settings,
        )

    def prompt_ids(self, prompt, max_new_tokens):
        """The token ids a prompt starts from: its tokens, cut from the left
        (with a warning on stderr) to leave `max_new_tokens` of the context
        and at most context - 1 ids; the start token alone for an empty
        prompt. A prompt that starts with the start token keeps it first
        (Llama 3's tokenizer puts it there, and a prompt of ids may): the
        model never saw a text without it."""
        if not isinstance(prompt, str):
            raise InputTypeError(f"A prompt must be a string. Received: {prompt!r}")
        # At most context - 1, as the SavedModel and the device runtime keep
        # (the generator needs a free column), with no new tokens too.
        keep = min(self.context - max_new_tokens, self.context - 1)
        ids = self.tokenizer.tokenize([prompt])[0].numpy().tolist()
        if len(ids) > keep:
            pinned = ids[0] == self.tokenizer.start_id
            kept = (
                f"its start token and last {keep - 1}" if pinned else f"its last {keep}"
            )
            print(
                f"warning: the prompt has {len(ids)} tokens; kept {kept} (the "
                f"context is {self.context} tokens, {max_new_tokens} of them for "
                "new tokens)",
                file=sys.stderr,
                flush=True,
            )
            ids = ids[:1] + ids[len(ids) - keep + 1 :] if pinned else ids[-keep:]
        return ids or [self.tokenizer.start_id]


class CausalLMPredictor(TextGeneration, Predictor):
    """Continues prompts and scores texts (see `Predictor` for the arguments
    and attributes, `TextGeneration` for the generation settings, which
    `generate`, `stream` and `predict` take as keywords)."""

    task = "causal_lm"
    predict_options = (
        Option(
            "--search",
            default="greedy",
            choices=["greedy", "sample", "beam"],
            help="greedy and sample stream their tokens as they are made; "
            "beam prints its best hypothesis at the end",
        ),
        Option(
            "--max-new-tokens",
            type=int,
            default=64,
            help="tokens to generate (0 to the context minus one)",
        ),
        Option("--temperature", type=float, default=1.0),
        Option("--top-k", type=int, help="0 or none: no top-k filter"),
        Option("--top-p", type=float, help="in (0, 1]; none: no filter"),
        Option("--seed", type=int, help="sampling seed: the same seed, the same text"),
        Option("--beam-width", type=int, default=4),
        Option("--length-penalty", type=float, default=0.6),
        Option(
            "--chat",
            nargs="?",
            const="",
            metavar="MESSAGES_JSON",
            help="chat with a converted chat model through its chat template: "
            'the reply to the messages in a JSON file ([{"role": "user", '
            '"content": "..."}, ...]), or, with no file, a conversation on '
            "stdin, one user message per line",
        ),
    )
    evaluate_options = (
        Option(
            "--split",
            default="test",
            choices=["validation", "test"],
            help="which half of the held-out tail to score",
        ),
        Option(
            "--text",
            dest="text_path",
            help="score this UTF-8 text file (plain or .gz) instead of the "
            "run's held-out text (a converted checkpoint has none)",
        ),
        Option(
            "--window",
            type=int,
            help="tokens per scored window, up to the run's context (default: "
            "the training window, data.max_length)",
        ),
    )

    @property
    def tokenizer(self):
        return self.tokenizers["text"]

    @property
    def context(self):
        """The decoder's context in tokens."""
        return self.manifest.max_length

    @property
    def end_ids(self):
        """The ids generation ends at: the tokenizer's end token, and a
        converted checkpoint's further eos ids (the manifest's `end_ids`)."""
        return self.manifest.ends(self.tokenizer.end_id)

    def predict(self, inputs, **settings):
        """`generate(inputs)`: one text per prompt."""
        return self.generate(inputs, **settings)

    def printed(self, inputs, chat=None, **settings):
        """Each prompt's text streamed as `stream` makes it, then a newline;
        with `chat` (a JSON file of messages, or "" for a conversation on
        stdin), the replies `stream_chat` makes."""
        check_generation_settings(self.context, **settings)  # before any input
        if chat is not None:
            yield from self._printed_chat(inputs, chat, settings)
            return
        for prompt in inputs:
            yield from self.stream(prompt, **settings)
            yield "\n"

    def _printed_chat(self, inputs, path, settings):
        if inputs:
            raise InputError(
                "chat takes its messages from a JSON file or stdin, not as "
                f"arguments. Received: {inputs[:3]!r}"
            )
        self.chat_template  # noqa: B018 (a run without one: refused before any input)
        check_chat_search(settings)
        if path:
            messages = read_messages(path)
            try:
                yield from self.stream_chat(messages, **settings)
            except InputError as e:
                raise InputError(f"chat: {path}: {e}") from None
            yield "\n"
            return
        conversation = self.conversation(**settings)
        for line in stdin_lines():
            if not line.strip():
                continue
            yield from conversation.stream(line)
            yield "\n"

    def conversation(self, messages=(), **settings):
        """A `Conversation`: messages sent one at a time, each reply made
        with the model's key/value cache kept from the turns before (it
        reads only the new message's tokens). `messages`: the conversation
        so far; `settings` as `chat` takes them, for every reply."""
        from tfformer.training.predictors.conversation import Conversation

        return Conversation(self, messages, **settings)

    def fitting(self, messages, new_tokens):
        """(`messages` without their oldest exchanges until the conversation
        leaves `new_tokens` of the context, its `chat_prompt` ids): a
        system message first stays, and so does the last message; what was
        left out is said on stderr. ValueError when even that does not fit.
        """
        first = messages[0] if messages else None
        head = (
            messages[:1]
            if isinstance(first, dict) and first.get("role") == "system"
            else []
        )
        rest = messages[len(head) :]
        ids = self.chat_ids(head + rest)
        while len(rest) > 1 and len(ids) + new_tokens > self.context:
            rest = rest[2:] if len(rest) > 2 else rest[-1:]
            ids = self.chat_ids(head + rest)
        ids = self.chat_prompt(head + rest, new_tokens, ids)
        if len(head + rest) < len(messages):
            print(
                f"(the conversation outgrew the context of {self.context} "
                f"tokens: its {len(messages) - len(head + rest)} oldest "
                "messages are left out)",
                file=sys.stderr,
                flush=True,
            )
        return head + rest, ids

    # -- chat --------------------------------------------------------------------

    @property
    def chat_template(self):
        """The run's `ChatTemplate`; ValueError for a run without one."""
        if getattr(self, "_chat_template", None) is None:
            self._chat_template = self.directory.chat_template()
        template = self._chat_template
        if template is None:
            raise InputError(
                f"chat needs a chat template: the run {self.directory.path} has "
                "none (only converted checkpoints with a chat_template have one; "
                "tfformer-convert says when it cannot take a checkpoint's)."
            )
        return template

    def chat(self, messages, **settings):
        """The model's reply to `messages` ([{"role": "system" | "user" |
        "assistant", "content": str}, ...]): the conversation rendered by the
        run's chat template with the assistant's turn opened, continued up to
        the first of the template's stop tokens (left out) or
        `max_new_tokens`. Greedy by default; `search="sample"` with its
        settings as `generate` takes them (beam search is not offered).

        Raises:
            ValueError: a run without a chat template, a bad message (named),
                a template that fails on the messages, a conversation longer
                than the context leaves room for, or a bad setting."""
        return "".join(self.stream_chat(messages, **settings))

    def chat_ids(self, messages):
        """The token ids of `messages` rendered by the chat template, with
        the assistant's turn opened (`ChatTemplate.prompt_ids`).

        Raises:
            ValueError: a bad message, a template that fails on the
                messages or renders no tokens."""
        return self.chat_template.prompt_ids(messages, self.tokenizer)

    def stream_chat(self, messages, **settings):
        """`chat`'s reply, yielded in pieces as the tokens are made."""
        settings = check_generation_settings(self.context, **settings)
        check_chat_search(settings)
        new_tokens = settings.pop("max_new_tokens")
        ids = self.chat_prompt(messages, new_tokens)
        if new_tokens == 0:
            return
        generator = self.new_generator(len(ids) + new_tokens, settings)
        yield from self.reply_text(generator.stream(np.array([ids], "int32")))

    def chat_prompt(self, messages, new_tokens, ids=None):
        """`chat_ids(messages)` (or `ids`, when they are already known),
        ValueError when they and `new_tokens` do not fit the context."""
        ids = self.chat_ids(messages) if ids is None else ids
        if len(ids) + new_tokens > self.context:
            raise InputError(
                f"messages: the conversation is {len(ids)} tokens; with "
                f"max_new_tokens={new_tokens} it does not fit the context of "
                f"{self.context} tokens (drop earlier messages)."
            )
        return ids

    def reply_text(self, steps):
        """A reply's text in pieces from the generator `steps`, up to the
        first of the chat template's stop tokens (left out)."""
        return stream_text(
            self.tokenizer, [], steps, stop_ids=self.chat_template.stop_ids
        )

    # -- scores ------------------------------------------------------------------

    def score(self, texts, *, window=None):
        """The log-likelihood of each text under the model, as the
        SavedModel's `score` signature computes it: the sum of log P of
        every token after the first, each given the tokens before it in its
        window (windows of `window` + 1 tokens overlapping by one; None: the
        context), the last partial window included.

        Returns:
            {"log_likelihood": float64 `(n,)`, "num_tokens": int `(n,)`
            (the tokens scored: each text's tokens minus one)}.
        """
        from keras import ops

        if isinstance(texts, str):
            raise InputTypeError("texts must be a list of strings, not one string.")
        window = self._checked_window(window if window is not None else self.context)
        likelihoods, counts = [], []
        for text in texts:
            ids = self.tokenizer.tokenize([text])[0].numpy()
            scored = max(len(ids) - 1, 0)
            windows = max(math.ceil(scored / window), 1)
            padded = np.zeros(windows * window + 1, "int32")
            padded[: len(ids)] = ids
            inputs = padded[:-1].reshape(windows, window)
            labels = padded[1:].reshape(windows, window)
            logits = self.model({"token_ids": inputs}, training=False)
            log_p = ops.convert_to_numpy(ops.log_softmax(logits, axis=-1))
            picked = np.take_along_axis(log_p, labels[..., None], axis=-1)
            likelihoods.append(float(picked.reshape(-1)[:scored].sum(dtype="float64")))
            counts.append(scored)
        return {
            "log_likelihood": np.array(likelihoods, "float64"),
            "num_tokens": np.array(counts, int),
        }

    def evaluate(
        self, *, split="test", text_path=None, window=None, limit=None, progress=print
    ):
        """Loss in nats per token on the `split` half ("test" or
        "validation") of the held-out tail, or on the file `text_path` (the
        summed negative log-likelihood of every token over their count), and
        bits per byte of the text those tokens cover; windows of `window`
        tokens (None: the training window, `data.max_length`), cut as in
        training (`tfformer.training.evaluation.language_model.score_text`)."""
        from tfformer.training.evaluation.language_model import score_text
        from tfformer.training.sources.text_files import read_text
        from tfformer.training.tasks.causal_lm import TASK

        data = self.config.data
        if window is None:
            # The training window (a decoder fine-tuned from GPT-2 trains on
            # shorter windows than its context).
            window = min(data.max_length, self.context)
        window = self._checked_window(window)
        if text_path is not None:
            try:
                text = read_text(text_path)
            except ValueError as e:
                raise InputError(f"text_path: {e}") from None
            where = {"text": text_path}
        elif not data.text_path:
            raise InputError(
                f"{self.directory.path} has no held-out text (data.text_path is "
                "not set: a converted checkpoint); score a file: text_path=FILE."
            )
        else:
            text, where = TASK.raw_splits(data)[split], {"split": split}
        scores = score_text(
            self.model, self.tokenizer, text, window, limit=limit, progress=progress
        )
        return {**where, "window": window, **scores}

    def _checked_window(self, window):
        if not 1 <= window <= self.context:
            raise InputError(
                f"window must be in [1, {self.context}] (the run's context). "
                f"Received: {window}"
            )
        return window


def check_chat_search(settings):
    if settings.get("search", "greedy") == "beam":
        raise InputError(
            "search='beam' is not offered in chat: use 'greedy' or 'sample'."
        )


def read_messages(path):
    """The messages of a JSON file (`--chat FILE`), ValueError naming it."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"chat: cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"chat: {path} is not a JSON list of messages: {e}") from None


def stdin_lines():
    """The lines of stdin as they come (U+FFFD for bytes that are not UTF-8),
    with a prompt on stderr when a person types them."""
    interactive = sys.stdin.isatty()
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            return
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        yield line.rstrip("\r\n")


def check_generation_settings(
    context,
    *,
    max_new_tokens=64,
    search="greedy",
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    beam_width=4,
    length_penalty=0.6,
):
    """The settings as `Generator` keywords plus `max_new_tokens` (top_k 0
    becomes None), or ValueError naming the first bad one."""
    from tfformer.decoding.sampling import check_sampling_arguments

    if max_new_tokens < 0:
        raise InputError(f"max_new_tokens must be >= 0. Received: {max_new_tokens}")
    if top_k is not None and top_k < 0:
        raise InputError(f"top_k must be >= 0. Received: {top_k}")
    if beam_width < 1:
        raise InputError(f"beam_width must be >= 1. Received: {beam_width}")
    if not length_penalty >= 0:
        raise InputError(f"length_penalty must be >= 0. Received: {length_penalty}")
    top_k = top_k or None
    check_sampling_arguments(temperature, top_k, top_p)
    if max_new_tokens >= context:
        raise InputError(
            f"max_new_tokens must be in [0, {context - 1}] (the context is "
            f"{context} tokens). Received: {max_new_tokens}"
        )
    return dict(
        max_new_tokens=max_new_tokens,
        search=search,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        beam_width=beam_width,
        length_penalty=length_penalty,
    )


def generated_text(tokenizer, prompt_ids, generator, stop_ids=None):
    """The text of `prompt_ids` continued by `generator`'s whole search (the
    prompt's text alone for no generator), up to the first end token or id
    of `stop_ids`."""
    if generator is None:
        return detokenize(tokenizer, prompt_ids, len(prompt_ids), stop_ids)
    out = generator(np.array([prompt_ids], "int32"))["token_ids"]
    return detokenize(tokenizer, np.asarray(out)[0], len(prompt_ids), stop_ids)


def detokenize(tokenizer, ids, prompt_length=0, stop_ids=None):
    """The text of `ids` (padding and everything from the first end token,
    or of `stop_ids` when given, after the prompt's `prompt_length` left
    out; the tokenizers drop their reserved tokens, the token-id tokenizer
    keeps an end id in the prompt: GPT-2's prompts often start with it)."""
    ids = [int(i) for i in ids]
    stops = {tokenizer.end_id, *(stop_ids or ())}
    # From the prompt's end (a negative length counts from the end, as in
    # list.index).
    for i in range(len(ids[:prompt_length]), len(ids)):
        if ids[i] in stops:
            ids = ids[:i]
            break
    ids = [i for i in ids if i != tokenizer.pad_id]
    if not ids:
        return ""
    text = tokenizer.detokenize(np.array([ids], "int32")).numpy()[0]
    return text.decode("utf-8", "replace")


def stream_text(tokenizer, prompt_ids, steps, stop_ids=None):
    """Pieces of the text of `prompt_ids` and then of each generated token
    from `steps` (`Generator.stream` of one prompt).

    What is yielded is never taken back: it is a prefix of the text of every
    longer run of tokens. A byte that ends inside a UTF-8 character (U+FFFD
    for now) waits for the next one; with WordPiece the text of the last two
    tokens waits, because the join rules can rewrite it ("it" "'" then "s"
    is "it's"; "well" "-" then "known" is "well-known"); the rest comes at
    the end. Generation stops at the end token, or at any of `stop_ids`
    when given (left out of the text).
    """
    from tfformer.preprocessing.byte_tokenizer import ByteTokenizer

    stops = {tokenizer.end_id, *(stop_ids or ())}

    held_back = 0 if isinstance(tokenizer, ByteTokenizer) else 2
    ids = list(prompt_ids)
    prompt = len(ids)
    shown = ""

    def settled_piece(final=False):
        """The text settled since the last piece ("" if none): all of it
        when `final`, else all but the held-back tokens' text."""
        nonlocal shown
        text = detokenize(tokenizer, ids, prompt, stop_ids)
        if final:
            settled = text
        else:
            kept = len(ids) - held_back
            settled = detokenize(tokenizer, ids[:kept], min(prompt, kept), stop_ids)
            settled = settled.rstrip("\ufffd")
        if not (text.startswith(settled) and settled.startswith(shown)):
            return ""
        piece, shown = settled[len(shown) :], settled
        return piece

    piece = settled_piece()
    if piece:
        yield piece
    for _, token, generated in steps:
        if not generated[0]:  # a prompt token
            continue
        ids.append(int(token[0]))
        piece = settled_piece()
        if piece:
            yield piece
        if int(token[0]) in stops:
            break
    piece = settled_piece(final=True)
    if piece:
        yield piece
    elif not detokenize(tokenizer, ids, prompt, stop_ids).startswith(shown):
        # Cannot happen with the held-back tokens; kept as a guard.
        yield "\n" + detokenize(tokenizer, ids, prompt, stop_ids)
