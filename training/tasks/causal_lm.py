"""Causal language modelling: a GPT-style decoder trained on plain text.

Data: one text file; its last `holdout_fraction` is split into validation and
test halves. Examples are non-overlapping windows of the token stream.
Evaluation: test loss in nats per token, and bits per byte. Prediction:
continues prompts (greedy or sampled).
"""

import dataclasses
import math

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
        d = config.data
        if not d.text_path:
            raise ValueError("task 'causal_lm' needs data.text_path.")
        check_holdout_fraction(d)

    def raw_splits(self, data_config):
        from tfformer.training.sources.text_files import read_text

        text = read_text(data_config.text_path)
        cut = int(len(text) * (1 - data_config.holdout_fraction))
        middle = cut + (len(text) - cut) // 2
        return {
            "train": text[:cut],
            "validation": text[cut:middle],
            "test": text[middle:],
        }

    def prepare(self, data_config, raw, directory, progress=print):
        from tfformer.training import pipeline
        from tfformer.training.text.vocabulary import learn_or_load

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
        parser.add_argument("--search", default="greedy", choices=["greedy", "sample"])
        parser.add_argument("--max-new-tokens", type=int, default=64)
        parser.add_argument("--temperature", type=float, default=1.0)
        parser.add_argument("--top-k", type=int)
        parser.add_argument("--top-p", type=float)
        parser.add_argument("--seed", type=int)

    def predict(self, run_dir, args, inputs):
        import numpy as np

        from tfformer.decoding import Generator

        run = self.load(run_dir, args.model)
        tokenizer = run.tokenizers["text"]
        context = run.directory.setting("max_length")
        if args.max_new_tokens < 1 or args.max_new_tokens >= context:
            raise ValueError(
                f"--max-new-tokens must be in [1, {context - 1}] (the context is "
                f"{context} tokens). Received: {args.max_new_tokens}"
            )
        generator = Generator(
            run.model,
            max_length=context,
            search=args.search,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            end_id=tokenizer.end_id,
        )
        keep = context - args.max_new_tokens
        for prompt in inputs:
            ids = tokenizer.tokenize([prompt])[0].numpy().tolist() or [
                tokenizer.start_id
            ]
            ids = ids[-keep:]  # the newest tokens that leave room to generate
            out = generator(np.array([ids], "int32"))["token_ids"].numpy()[0]
            # The prompt's kept tokens and the new ones, detokenized together
            # (WordPiece joins words with spaces and glues "##" pieces).
            text = tokenizer.detokenize(out[None, : len(ids) + args.max_new_tokens])
            yield text.numpy()[0].decode("utf-8", "replace")

    def evaluate(self, run_dir, args, progress=print):
        """Test loss in nats per token (the summed negative log-likelihood of
        every test token over their count), and bits per byte of the text
        those tokens cover."""
        import numpy as np
        from keras import ops

        from tfformer.training import pipeline

        run = self.load(run_dir, args.model)
        config = run.config
        text = self.raw_splits(config.data)["test"]
        tokenizer = run.tokenizers["text"]
        ids = tokenizer.tokenize([text]).flat_values.numpy()
        examples = pipeline.language_model_examples(
            ids, sequence_length=config.data.max_length
        )
        inputs = examples.features["token_ids"].to_tensor().numpy()
        labels = examples.labels.to_tensor().numpy()
        if args.limit:
            inputs, labels = inputs[: args.limit], labels[: args.limit]
        nats = 0.0
        for start in range(0, len(inputs), 32):
            logits = run.model(inputs[start : start + 32], training=False)
            log_p = ops.convert_to_numpy(ops.log_softmax(logits, axis=-1))
            picked = np.take_along_axis(
                log_p, labels[start : start + 32, :, None], axis=-1
            )
            nats -= float(picked.sum())
            progress(f"scored {min(start + 32, len(inputs))}/{len(inputs)} windows")
        tokens = labels.size
        # The bytes the scored tokens stand for (their detokenized text).
        covered = tokenizer.detokenize(labels.reshape(1, -1)).numpy()[0]
        return {
            "test_tokens": int(tokens),
            "test_bytes": len(covered),
            "nats_per_token": round(nats / tokens, 4),
            "bits_per_byte": round(nats / math.log(2) / max(len(covered), 1), 4),
        }


TASK = CausalLMTask()
