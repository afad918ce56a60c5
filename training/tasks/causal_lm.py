"""Causal language modelling: a GPT-style decoder trained on plain text.

Data: one text file; its last `holdout_fraction` is split into validation and
test halves. Examples are non-overlapping windows of the token stream.
Evaluation: test loss in nats per token, and bits per byte. Prediction:
continues prompts (greedy or sampled).
"""

import dataclasses
import math

import numpy as np

from tfformer.training.tasks.base import (
    PreparedData,
    Task,
    TextDataConfig,
    check_holdout_fraction,
    token_compile_arguments,
)


@dataclasses.dataclass
class CausalLMData(TextDataConfig):
    """The text file (plus `TextDataConfig`'s text settings)."""

    # One plain or .gz UTF-8 file; its last holdout_fraction is validation
    # (first half) and test (second half).
    text_path: str | None = None
    holdout_fraction: float = 0.1


class CausalLMTask(Task):
    name = "causal_lm"
    DataConfig = CausalLMData
    builder_name = "gpt_decoder"
    default_preset = "gpt_tiny"

    def validate(self, config):
        super().validate(config)
        check_holdout_fraction(config.data)

    def raw_splits(self, data_config):
        from tfformer.training.sources.text_files import read_text

        # Checked here, when text is needed: a converted checkpoint's run
        # generates without one.
        if not data_config.text_path:
            raise ValueError("task 'causal_lm' needs data.text_path.")
        text = read_text(data_config.text_path)
        cut = int(len(text) * (1 - data_config.holdout_fraction))
        middle = cut + (len(text) - cut) // 2
        return {
            "train": text[:cut],
            "validation": text[cut:middle],
            "test": text[middle:],
        }

    def prepare(self, config, raw, directory, progress=print):
        from tfformer.training import pipeline
        from tfformer.training.text.vocabulary import learn_or_load

        data_config = config.data
        lines = raw["train"].split("\n")
        tokenizer = learn_or_load(data_config, lines, directory, "text", progress)
        examples = {}
        for split, text in raw.items():
            ids = tokenizer.tokenize([text]).flat_values.numpy()
            examples[split] = pipeline.language_model_examples(
                ids, sequence_length=data_config.max_length
            )
        return PreparedData(
            {"text": tokenizer}, examples, raw, (data_config.max_length,)
        )

    def build_model(self, config, data):
        from tfformer.models import from_preset

        return from_preset(
            self.preset(config.model),
            data.tokenizers["text"].vocabulary_size,
            **{
                **self.model_sizes(config.model),
                "max_sequence_length": max(config.data.max_length, 8),
            },
        )

    def compile_arguments(self, config):
        return token_compile_arguments(config)

    # -- inference ---------------------------------------------------------------

    def add_predict_arguments(self, parser):
        parser.add_argument(
            "--search",
            default="greedy",
            choices=["greedy", "sample", "beam"],
            help="greedy and sample stream their tokens as they are made; "
            "beam prints its best hypothesis at the end",
        )
        parser.add_argument(
            "--max-new-tokens",
            type=int,
            default=64,
            help="tokens to generate (0 to the context minus one)",
        )
        parser.add_argument("--temperature", type=float, default=1.0)
        parser.add_argument("--top-k", type=int, help="0 or none: no top-k filter")
        parser.add_argument("--top-p", type=float, help="in (0, 1]; none: no filter")
        parser.add_argument(
            "--seed", type=int, help="sampling seed: the same seed, the same text"
        )
        parser.add_argument("--beam-width", type=int, default=4)
        parser.add_argument("--length-penalty", type=float, default=0.6)

    def predict(self, run_dir, args, inputs):
        """Continues each prompt; greedy and sampled tokens are yielded as
        `Piece`s while they are made. The prompt's tokens come first (cut
        from the left, with a warning, to leave `--max-new-tokens` of the
        context); an empty prompt starts from the start token."""
        import sys

        from tfformer.decoding import Generator
        from tfformer.decoding.sampling import check_sampling_arguments

        if args.max_new_tokens < 0:
            raise ValueError(
                f"--max-new-tokens must be >= 0. Received: {args.max_new_tokens}"
            )
        if args.top_k is not None and args.top_k < 0:
            raise ValueError(f"--top-k must be >= 0. Received: {args.top_k}")
        if args.beam_width < 1:
            raise ValueError(f"--beam-width must be >= 1. Received: {args.beam_width}")
        if not args.length_penalty >= 0:
            raise ValueError(
                f"--length-penalty must be >= 0. Received: {args.length_penalty}"
            )
        top_k = args.top_k or None
        try:
            check_sampling_arguments(args.temperature, top_k, args.top_p)
        except ValueError as e:
            raise ValueError(f"--{str(e).replace('_', '-')}") from None
        run = self.load(run_dir, args.model)
        tokenizer = run.tokenizers["text"]
        context = run.directory.setting("max_length")
        if args.max_new_tokens >= context:
            raise ValueError(
                f"--max-new-tokens must be in [0, {context - 1}] (the context is "
                f"{context} tokens). Received: {args.max_new_tokens}"
            )
        keep = context - args.max_new_tokens
        for prompt in inputs:
            ids = tokenizer.tokenize([prompt])[0].numpy().tolist()
            if len(ids) > keep:
                print(
                    f"warning: the prompt has {len(ids)} tokens; kept its last "
                    f"{keep} (the context is {context} tokens, "
                    f"{args.max_new_tokens} of them for new tokens)",
                    file=sys.stderr,
                    flush=True,
                )
                ids = ids[-keep:]
            ids = ids or [tokenizer.start_id]
            if args.max_new_tokens == 0:
                yield detokenize(tokenizer, ids, len(ids))
                continue
            generator = Generator(
                run.model,
                max_length=len(ids) + args.max_new_tokens,
                search=args.search,
                temperature=args.temperature,
                top_k=top_k,
                top_p=args.top_p,
                seed=args.seed,
                beam_width=args.beam_width,
                length_penalty=args.length_penalty,
                start_id=tokenizer.start_id,
                end_id=tokenizer.end_id,
                pad_id=tokenizer.pad_id,
            )
            prompt_ids = np.array([ids], "int32")
            if args.search == "beam":
                out = generator(prompt_ids)["token_ids"]
                yield detokenize(tokenizer, np.asarray(out)[0], len(ids))
                continue
            yield from stream_text(tokenizer, ids, generator.stream(prompt_ids))

    def add_evaluate_arguments(self, parser):
        parser.add_argument(
            "--split",
            default="test",
            choices=["validation", "test"],
            help="which half of the held-out tail to score",
        )

    def evaluate(self, run_dir, args, progress=print):
        """Loss in nats per token on the test (or validation) half of the
        held-out tail (the summed negative log-likelihood of every token over
        their count), and bits per byte of the text those tokens cover."""
        run = self.load(run_dir, args.model)
        config = run.config
        split = getattr(args, "split", "test")
        text = self.raw_splits(config.data)[split]
        scores = score_text(
            run.model,
            run.tokenizers["text"],
            text,
            config.data.max_length,
            limit=args.limit,
            progress=progress,
        )
        return {"split": split, **scores}


def score_text(model, tokenizer, text, window, *, limit=None, progress=print):
    """Nats per token and bits per byte of `text`, cut into non-overlapping
    `window`-token pieces as in training (each predicts its tokens after the
    first from the ones before, within the window)."""
    from keras import ops

    from tfformer.training import pipeline

    ids = tokenizer.tokenize([text]).flat_values.numpy()
    examples = pipeline.language_model_examples(ids, sequence_length=window)
    inputs = examples.features["token_ids"].to_tensor().numpy()
    labels = examples.labels.to_tensor().numpy()
    if limit:
        inputs, labels = inputs[:limit], labels[:limit]
    nats = 0.0
    for start in range(0, len(inputs), 32):
        logits = model(inputs[start : start + 32], training=False)
        log_p = ops.convert_to_numpy(ops.log_softmax(logits, axis=-1))
        picked = np.take_along_axis(log_p, labels[start : start + 32, :, None], axis=-1)
        nats -= float(picked.sum())
        progress(f"scored {min(start + 32, len(inputs))}/{len(inputs)} windows")
    tokens = labels.size
    # The bytes the scored tokens stand for (their detokenized text).
    covered = tokenizer.detokenize(labels.reshape(1, -1)).numpy()[0]
    return {
        "tokens": int(tokens),
        "bytes": len(covered),
        "nats_per_token": round(nats / tokens, 4),
        "bits_per_byte": round(nats / math.log(2) / max(len(covered), 1), 4),
    }


def detokenize(tokenizer, ids, prompt_length=0):
    """The text of `ids` (padding and everything from the first end token
    after the prompt's `prompt_length` left out; the tokenizers drop their
    reserved tokens, the token-id tokenizer keeps an end id in the prompt:
    GPT-2's prompts often start with it)."""
    ids = [int(i) for i in ids]
    if tokenizer.end_id in ids[prompt_length:]:
        ids = ids[: ids.index(tokenizer.end_id, prompt_length)]
    ids = [i for i in ids if i != tokenizer.pad_id]
    if not ids:
        return ""
    text = tokenizer.detokenize(np.array([ids], "int32")).numpy()[0]
    return text.decode("utf-8", "replace")


def stream_text(tokenizer, prompt_ids, steps):
    """`Piece`s of the text of `prompt_ids` and then of each generated token
    from `steps` (`Generator.stream` of one prompt), ended by "".

    What is printed is never taken back: it is a prefix of the text of every
    longer run of tokens. A byte that ends inside a UTF-8 character (U+FFFD
    for now) waits for the next one; with WordPiece the text of the last two
    tokens waits, because the join rules can rewrite it ("it" "'" then "s"
    is "it's"; "well" "-" then "known" is "well-known"); the rest comes at
    the end.
    """
    from tfformer.rundir.text import ByteTokenizer
    from tfformer.training.tasks.base import Piece

    hold = 0 if isinstance(tokenizer, ByteTokenizer) else 2
    ids = list(prompt_ids)
    prompt = len(ids)
    shown = ""

    def news(final=False):
        nonlocal shown
        text = detokenize(tokenizer, ids, prompt)
        if final:
            settled = text
        else:
            settled = detokenize(
                tokenizer, ids[: len(ids) - hold], min(prompt, len(ids) - hold)
            ).rstrip("\ufffd")
        if not (text.startswith(settled) and settled.startswith(shown)):
            return None
        if len(settled) == len(shown):
            return None
        piece, shown = settled[len(shown) :], settled
        return Piece(piece)

    piece = news()
    if piece:
        yield piece
    for _, token, generated in steps:
        if not generated[0]:  # a prompt token
            continue
        ids.append(int(token[0]))
        piece = news()
        if piece:
            yield piece
        if int(token[0]) == tokenizer.end_id:
            break
    piece = news(final=True)
    if piece:
        yield piece
    elif not detokenize(tokenizer, ids, prompt).startswith(shown):
        # Cannot happen with the held-back tokens; kept as a guard.
        yield Piece("\n" + detokenize(tokenizer, ids, prompt))
    yield ""


TASK = CausalLMTask()
