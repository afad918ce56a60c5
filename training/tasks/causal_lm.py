"""Causal language modelling: a GPT-style decoder trained on plain text.

Data: one text file; its last `holdout_fraction` is split into validation and
test halves. Examples are non-overlapping windows of the token stream.
Evaluation: test loss in nats per token, and bits per byte. Prediction:
continues prompts (greedy or sampled).
"""

import dataclasses
import math
import re

import numpy as np

from tfformer.training.tasks.base import (
    INITIAL_RUN_KEYS,
    ModelConfig,
    PreparedData,
    Task,
    TextDataConfig,
    check_holdout_fraction,
    check_initial_tokenizer,
    initial_hidden_dropout,
    initial_tokenizer,
    token_compile_arguments,
)

# Model keys that come from model.init_from's decoder and must stay unset.
INIT_SIZE_KEYS = INITIAL_RUN_KEYS
WHITESPACE = re.compile(r"\s")


@dataclasses.dataclass
class CausalLMData(TextDataConfig):
    """The text file (plus `TextDataConfig`'s text settings)."""

    # One plain or .gz UTF-8 file; its last holdout_fraction is validation
    # (first half) and test (second half).
    text_path: str | None = None
    holdout_fraction: float = 0.1


@dataclasses.dataclass
class CausalLMModel(ModelConfig):
    # A finished causal_lm run (trained, or converted from a GPT-2 or Llama
    # checkpoint) whose decoder and tokenizer this run fine-tunes; its
    # sizes come from it. `dropout` (None: the run's) is set in every
    # dropout of the copy. A converted Llama reads token ids: data.text_path
    # then holds the checkpoint's ids, whitespace-separated, and
    # data.tokenizer is "ids".
    init_from: str | None = None


def next_space(text, i):
    """The first index >= i of whitespace in `text` (or its length)."""
    match = WHITESPACE.search(text, i)
    return match.start() if match else len(text)


class CausalLMTask(Task):
    name = "causal_lm"
    DataConfig = CausalLMData
    ModelConfig = CausalLMModel
    backbone_name = "GPTBackbone"
    default_preset = "gpt_tiny"

    def __init__(self):
        # The last model.init_from model read: {(path, mtime): model}.
        self._initial = {}

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
        if data_config.tokenizer == "ids":
            # A file of token ids: cut between ids, never inside one.
            cut, middle = (next_space(text, i) for i in (cut, middle))
        return {
            "train": text[:cut],
            "validation": text[cut:middle],
            "test": text[middle:],
        }

    def prepare(self, config, raw, directory, progress=print):
        from tfformer.training import pipeline
        from tfformer.training.text.vocabulary import learn_or_load

        data_config = config.data
        if config.model.init_from is not None:
            _, spec, _ = self.initial_run(config)
            tokenizer = initial_tokenizer(
                spec, directory, f"model.init_from={config.model.init_from!r}"
            )
            progress(f"Tokenizer (text): from {config.model.init_from}")
        else:
            lines = raw["train"].split("\n")
            tokenizer = learn_or_load(data_config, lines, directory, "text", progress)
        examples = {}
        for split, text in raw.items():
            try:
                ids = tokenizer.tokenize([text]).flat_values.numpy()
            except ValueError as e:  # a file that is not token ids
                raise ValueError(
                    f"data.text_path={data_config.text_path!r}: {e}"
                ) from None
            examples[split] = pipeline.language_model_examples(
                ids, sequence_length=data_config.max_length
            )
        return PreparedData(
            {"text": tokenizer}, examples, raw, (data_config.max_length,)
        )

    def run_manifest(self, config, data):
        from tfformer.runs.manifest import CausalLMManifest

        # A decoder fine-tuned from another run keeps that run's context
        # (GPT-2's 1,024 positions after fine-tuning on shorter windows).
        context = config.data.max_length
        if config.model.init_from is not None:
            run, _, _ = self.initial_run(config)
            context = run.manifest.max_length
        return CausalLMManifest(
            tokenizers=self.tokenizer_entries(config, data), max_length=context
        )

    def build_model(self, config, data):
        from tfformer.models import from_preset

        if config.model.init_from is not None:
            return self.initialized_model(config)
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

    # -- starting from another run -----------------------------------------------

    def initial_run(self, config):
        """(RunDirectory, its tokenizer spec, its model) of `model.init_from`,
        checked at train time: a finished causal_lm run with a text
        tokenizer that `data.tokenizer` names, no size overridden, and a
        context that holds `data.max_length` (ValueError naming the key)."""
        import os

        from tfformer.runs.directory import RunDirectory

        path = os.path.abspath(config.model.init_from)
        where = f"model.init_from={config.model.init_from!r}"
        try:
            run = RunDirectory(path)
            if run.task != self.name:
                raise ValueError(
                    f"it holds a {run.task!r} run; a causal_lm run starts from "
                    "a causal_lm run (trained, or converted from a GPT-2 or "
                    "Llama checkpoint)"
                )
            spec = run.tokenizer("text")
            context = run.manifest.max_length
            run.checkpoint_path()
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        d = config.data
        check_initial_tokenizer(where, spec, d)
        for key in INIT_SIZE_KEYS:
            value = getattr(config.model, key)
            if value is not None:
                raise ValueError(
                    f"{where}: model.{key} comes from that run; leave it unset. "
                    f"Received: model.{key}={value!r}"
                )
        if d.max_length > context:
            raise ValueError(
                f"{where}: its decoder's context is {context} tokens; "
                f"data.max_length must be <= {context}. Received: "
                f"data.max_length={d.max_length}"
            )
        # Read once per process and model file (prepare and build_model
        # both ask); the checks above run every time.
        key = (path, os.path.getmtime(run.checkpoint_path()))
        if key not in self._initial:
            self._initial = {key: run.load_model()}
        return run, spec, self._initial[key]

    def initialized_model(self, config):
        """A copy of `model.init_from`'s decoder: its backbone rebuilt from
        its config (new variables, in the current distribution strategy's
        scope) with its weights, every dropout at `model.dropout` when that
        is set, and the feed-forward networks' hidden dropout at
        `initial_hidden_dropout` (the config's `model.activation_dropout`,
        else the source's: a converted GPT-2's or Llama's 0.0, a trained
        model's None, which follows the rest). The backbone keeps the
        source's dtype policy (float32 for a converted checkpoint) whatever
        `train.precision` says."""
        from tfformer.models import CausalLM

        _, _, source = self.initial_run(config)
        backbone_config = source.backbone.get_config()
        if config.model.dropout is not None:
            backbone_config["dropout"] = config.model.dropout
        backbone_config["activation_dropout"] = initial_hidden_dropout(
            config.model, backbone_config["activation_dropout"]
        )
        backbone = type(source.backbone).from_config(backbone_config)
        backbone.set_weights(source.backbone.get_weights())
        return CausalLM(backbone, name=source.name)

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
        context = run.directory.manifest.max_length
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
        parser.add_argument(
            "--text",
            help="score this UTF-8 text file (plain or .gz) instead of the "
            "run's held-out text (a converted checkpoint has none)",
        )
        parser.add_argument(
            "--window",
            type=int,
            help="tokens per scored window, up to the run's context (default: "
            "the training window, data.max_length)",
        )

    def evaluate(self, run_dir, args, progress=print):
        """Loss in nats per token on the test (or validation) half of the
        held-out tail, or on the file `--text` names (the summed negative
        log-likelihood of every token over their count), and bits per byte
        of the text those tokens cover; windows of `--window` tokens."""
        from tfformer.training.sources.text_files import read_text

        run = self.load(run_dir, args.model)
        config = run.config
        context = run.directory.manifest.max_length
        # By default the training window (a decoder fine-tuned from GPT-2
        # trains on shorter windows than its context).
        window = getattr(args, "window", None)
        if window is None:
            window = min(config.data.max_length, context)
        if not 1 <= window <= context:
            raise ValueError(
                f"--window must be in [1, {context}] (the run's context). "
                f"Received: {window}"
            )
        source = getattr(args, "text", None)
        if source is not None:
            try:
                text = read_text(source)
            except ValueError as e:
                raise ValueError(f"--text: {e}") from None
            where = {"text": source}
        elif not config.data.text_path:
            raise ValueError(
                f"{run.directory.path} has no held-out text (data.text_path is "
                "not set: a converted checkpoint); score a file with --text FILE."
            )
        else:
            split = getattr(args, "split", "test")
            text, where = self.raw_splits(config.data)[split], {"split": split}
        scores = score_text(
            run.model,
            run.tokenizers["text"],
            text,
            window,
            limit=args.limit,
            progress=progress,
        )
        return {**where, "window": window, **scores}


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
    from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
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
