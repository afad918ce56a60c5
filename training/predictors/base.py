"""The predictor interface: a finished run, trained or converted, ready to
predict and evaluate on raw inputs.

A predictor is built from a run directory (`tfformer.load(path)` picks the
class from the manifest's task). Its task methods (`translate`, `generate`,
`classify`, `embed`, ...) take raw inputs and return plain Python and NumPy
values; `predict` gives each input's result as `tfformer-predict` shows it,
as data, and `evaluate` the scores `tfformer-evaluate` prints. The commands
are shells over these methods: a predictor declares its command-line
options (`Option`) and how a result is printed (`describe`).
"""

import re

from tfformer.errors import InputError
from tfformer.runs.directory import RunDirectory


class Option:
    """A command-line option of `tfformer-predict` or `tfformer-evaluate`.

    Args:
        flag: the option, e.g. "--max-new-tokens".
        **settings: keywords of `argparse.ArgumentParser.add_argument`.

    Its `dest` (the flag's name with underscores, unless `settings` names
    another) is the keyword argument of `predict` or `evaluate` it sets.
    """

    def __init__(self, flag, **settings):
        self.flag = flag
        self.settings = settings

    @property
    def dest(self):
        return self.settings.get("dest", self.flag.lstrip("-").replace("-", "_"))


def as_flags(message, options):
    """`message` (an error of a predictor) in the command's words: the
    keyword arguments of `options` become their flags. `name=` anywhere
    ("give pairs_path=TSV" -> "give --pairs TSV"); a name with an underscore
    wherever it stands as a word ("max_new_tokens must ..." ->
    "--max-new-tokens must ..."); a plain word ("search", "text") only where
    it starts the message."""
    for option in options:
        name = re.escape(option.dest)
        message = re.sub(rf"(?<![\w.]){name}=", option.flag + " ", message)
        if "_" in option.dest:
            message = re.sub(rf"(?<![\w.-]){name}\b", option.flag, message)
        else:
            message = re.sub(rf"^{name}\b", option.flag, message)
    return message


def training_config(directory):
    """The training `Config` of a run directory (its `config.json`)."""
    from tfformer.training.config import config_from_dict

    try:
        return config_from_dict(directory.read_config())
    except InputError as e:
        raise InputError(f"{directory.file('config.json')}: {e}") from None


class Predictor:
    """A finished run of one task, ready to predict and evaluate.

    Args:
        run: the run directory (a path or a `RunDirectory`) that
            `tfformer-train` or `tfformer-convert` wrote.
        checkpoint: the model file, "model.keras" (final) or "best.keras"
            (lowest validation loss).

    Attributes:
        directory: the `RunDirectory`.
        manifest: its typed manifest (`tfformer.runs.manifest`).
        config: the run's training `Config` (a converted run's records the
            checkpoint's settings).
        model: the `tfformer.models.TaskModel`.
        backbone: the model's backbone.
        tokenizers: {role: tokenizer} ("text", or "source" and "target").

    Raises:
        ValueError: `run` is not a finished run of this predictor's task
            (the message names the file and what is wrong).
    """

    # The manifest's task name.
    task = None
    # Options of `tfformer-predict` (keywords of `predict`) and of
    # `tfformer-evaluate` (keywords of `evaluate`).
    predict_options = ()
    evaluate_options = ()
    # Whether `tfformer-predict`'s inputs are file paths (kept as the
    # system gives them) rather than text.
    inputs_are_paths = False

    def __init__(self, run, *, checkpoint="model.keras"):
        from tfformer.training.text.vocabulary import load_tokenizer

        directory = run if isinstance(run, RunDirectory) else RunDirectory(run)
        if directory.task != self.task:
            raise InputError(
                f"{directory.path} holds a {directory.task!r} run, not {self.task!r}."
            )
        self.directory = directory
        self.manifest = directory.manifest
        self.tokenizers = {
            role: load_tokenizer(directory.tokenizer(role))
            for role in self.manifest.tokenizers
        }
        self.config = training_config(directory)
        self.checkpoint = checkpoint
        self.model = directory.load_model(checkpoint)

    @property
    def backbone(self):
        return self.model.backbone

    def __repr__(self):
        return f"<{type(self).__name__} of {self.directory.path}>"

    def predict(self, inputs, **options):
        """The result for each of `inputs` (raw inputs as `tfformer-predict`
        reads them), as data: a list, one item per input."""
        raise NotImplementedError

    def evaluate(self, *, limit=None, progress=print, **options):
        """The run's scores in its task's units (a JSON-ready dict), on its
        test split or the data `options` name; `limit`: the first N
        examples only; `progress`: called with progress messages."""
        raise NotImplementedError

    def string_model(self, **options):
        """This run as a Keras model that takes strings
        (`tfformer.training.string_models`): `fit`, `evaluate` and `predict`
        on raw text, saved with its preprocessor. `options` are its
        `from_run` keywords (`labels` for a new head on an encoder run,
        `strategy`, `precision`, `dropout`, ...)."""
        from tfformer.training import string_models

        kinds = {
            "text_classification": string_models.StringClassifier,
            "masked_lm": string_models.StringClassifier,
            "sentence_embedding": string_models.StringClassifier,
            "causal_lm": string_models.StringCausalLM,
            "translation": string_models.StringTranslator,
        }
        if self.task not in kinds:
            raise InputError(
                f"A {self.task} run has no model on strings (it reads "
                f"{'images' if self.task == 'image_classification' else 'ids'})."
            )
        return kinds[self.task].from_run(
            self.directory.path, checkpoint=self.checkpoint, **options
        )

    def describe(self, result):
        """One result of `predict` as `tfformer-predict` prints it (a line,
        or a block of lines)."""
        return str(result)

    def printed(self, inputs, **options):
        """What `tfformer-predict` prints for `inputs`: text, in pieces
        printed as they come (newlines included). By default each result of
        `predict`, described, on its own line."""
        for result in self.predict(inputs, **options):
            yield self.describe(result) + "\n"
