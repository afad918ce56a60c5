"""Predictors: a finished run (trained or converted) used from Python, one
module per task, registered here by the manifest's task name.

    import tfformer
    translator = tfformer.load("runs/number_words")
    translator.translate(["twenty-one"])           # ['einundzwanzig']

`load` opens any run directory and returns its task's predictor
(`base.Predictor`: `predict`, `evaluate`, `.model`, `.backbone`,
`.tokenizers`, `.manifest`, `.config`, and the task's own methods).
`tfformer-predict`, `tfformer-evaluate` and `tfformer-translate` are shells
over them.
"""

import importlib

from tfformer.errors import InputError

# The manifest's task name -> the predictor class in the module of that name.
_PREDICTORS = {
    "translation": "TranslationPredictor",
    "causal_lm": "CausalLMPredictor",
    "text_classification": "TextClassificationPredictor",
    "masked_lm": "MaskedLMPredictor",
    "sentence_embedding": "SentenceEmbeddingPredictor",
    "image_classification": "ImageClassificationPredictor",
}
PREDICTOR_TASKS = tuple(_PREDICTORS)


def predictor_class(task):
    """The `Predictor` subclass of runs of `task` (the manifest's name)."""
    if task not in _PREDICTORS:
        raise InputError(
            f"task must be one of {list(PREDICTOR_TASKS)}. Received: {task!r}"
        )
    module = importlib.import_module(f"tfformer.training.predictors.{task}")
    return getattr(module, _PREDICTORS[task])


def load(path, checkpoint="model.keras"):
    """The predictor of the run directory `path`, trained or converted.

    Args:
        path: a directory `tfformer-train` or `tfformer-convert` wrote.
        checkpoint: "model.keras" (final) or "best.keras" (lowest
            validation loss).

    Raises:
        ValueError: `path` is not a finished run (the message names the
            file and what is wrong).
    """
    from tfformer.runs.directory import RunDirectory

    directory = RunDirectory(path)
    return predictor_class(directory.task)(directory, checkpoint=checkpoint)
