"""Causal language modelling: a GPT-style decoder trained on plain text.

Data: one text file; its last `holdout_fraction` is split into validation and
test halves. Examples are non-overlapping windows of the token stream.
`tfformer.training.evaluation.language_model.score_text` scores a text cut
the same way (nats per token, bits per byte); the predictor
(`tfformer.training.predictors.causal_lm`) continues prompts and evaluates
with it.
"""

import dataclasses
import re

from tfformer.errors import InputError
from tfformer.training.tasks.base import (
    INITIAL_RUN_KEYS,
    ModelConfig,
    PreparedData,
    TextDataConfig,
    TrainingTask,
    check_holdout_fraction,
    check_initial_tokenizer,
    initial_hidden_dropout,
    initial_tokenizer,
    token_compile_arguments,
    tokenizer_entries,
)

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


class CausalLMTask(TrainingTask):
    name = "causal_lm"
    DataConfig = CausalLMData
    ModelConfig = CausalLMModel
    backbone_name = "GPTBackbone"
    default_preset = "gpt_tiny"

    def __init__(self):
        # The last model.init_from model read: {(path, mtime): model}.
        self._initial_models = {}

    def validate(self, config):
        super().validate(config)
        check_holdout_fraction(config.data)

    def raw_splits(self, data_config):
        from tfformer.training.sources.text_files import read_text

        # Checked here, when text is needed: a converted checkpoint's run
        # generates without one.
        if not data_config.text_path:
            raise InputError("task 'causal_lm' needs data.text_path.")
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
                raise InputError(
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
        # (GPT-2's 1,024 positions after fine-tuning on shorter windows)
        # and a converted checkpoint's end ids.
        context, ends = config.data.max_length, None
        if config.model.init_from is not None:
            run, _, _ = self.initial_run(config)
            context, ends = run.manifest.max_length, run.manifest.end_ids
        return CausalLMManifest(
            tokenizers=tokenizer_entries(config, data), max_length=context, end_ids=ends
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
                raise InputError(
                    f"it holds a {run.task!r} run; a causal_lm run starts from "
                    "a causal_lm run (trained, or converted from a GPT-2 or "
                    "Llama checkpoint)"
                )
            spec = run.tokenizer("text")
            context = run.manifest.max_length
            run.checkpoint_path()
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        d = config.data
        check_initial_tokenizer(where, spec, d)
        for key in INITIAL_RUN_KEYS:
            value = getattr(config.model, key)
            if value is not None:
                raise InputError(
                    f"{where}: model.{key} comes from that run; leave it unset. "
                    f"Received: model.{key}={value!r}"
                )
        if d.max_length > context:
            raise InputError(
                f"{where}: its decoder's context is {context} tokens; "
                f"data.max_length must be <= {context}. Received: "
                f"data.max_length={d.max_length}"
            )
        # Read once per process and model file (prepare and build_model
        # both ask); the checks above run every time.
        key = (path, os.path.getmtime(run.checkpoint_path()))
        if key not in self._initial_models:
            self._initial_models = {key: run.load_model()}
        return run, spec, self._initial_models[key]

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


TASK = CausalLMTask()
