"""A chat kept in memory: its messages and the model's key/value cache."""

from tfformer.decoding import DecodingSession
from tfformer.training.predictors.causal_lm import (
    check_chat_search,
    check_generation_settings,
)


class Conversation:
    """A conversation with a chat model, one message at a time, as
    `tfformer-predict --chat` holds it on stdin: each reply continues the
    whole conversation rendered by the run's chat template, and the model's
    keys and values of the turns before are kept (`DecodingSession`), so a
    reply reads only the ids after the longest prefix they share with what
    the cache holds (the reply is `chat`'s for the whole conversation, up
    to float round-off in the logits). When the conversation outgrows the
    context, its oldest exchanges are left out for good (said on stderr; a
    system message first stays) and it is read again from where it then
    departs from the cache.

    Made by `CausalLMPredictor.conversation`:

        chat = tfformer.load("runs/qwen").conversation(max_new_tokens=64)
        chat.send("Name a colour.")                  # the reply
        for piece in chat.stream("And another?"):    # the next, in pieces
            print(piece, end="", flush=True)
        chat.messages                                # both exchanges

    Attributes:
        messages: the conversation so far (each sent message and its reply,
            once the reply is complete; without the exchanges left out).
        session: the `DecodingSession` holding the cache.
    """

    def __init__(self, predictor, messages=(), **settings):
        predictor.chat_template  # noqa: B018 (a run without one is refused)
        settings = check_generation_settings(predictor.context, **settings)
        check_chat_search(settings)
        self.max_new_tokens = settings.pop("max_new_tokens")
        self.predictor = predictor
        self.messages = list(messages)
        self.session = DecodingSession(
            predictor.new_generator(predictor.context, settings)
        )

    def send(self, content, role="user"):
        """The reply to `content` sent as the next message (of `role`)."""
        return "".join(self.stream(content, role))

    def stream(self, content, role="user"):
        """`send`'s reply in pieces as its tokens are made. The exchange
        joins `messages` when the reply is complete.

        Raises:
            ValueError: a bad message (named), a template that fails on the
                conversation, or a message that alone does not fit the
                context with `max_new_tokens`.
        """
        predictor = self.predictor
        messages = [*self.messages, {"role": role, "content": content}]
        messages, ids = predictor.fitting(messages, self.max_new_tokens)
        reply = []
        if self.max_new_tokens:
            steps = self.session.stream(ids, max_new_tokens=self.max_new_tokens)
            for piece in predictor.reply_text(steps):
                reply.append(piece)
                yield piece
        self.messages = [*messages, {"role": "assistant", "content": "".join(reply)}]
