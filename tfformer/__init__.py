"""tfformer: Transformer layers and models for Keras 3.

`tfformer.layers` holds the building blocks, `tfformer.models` the backbones
(encoder-decoder, BERT, GPT, Llama, ViT), the task models on them and their
ready-made sizes, `tfformer.decoding` KV-cached greedy/beam/sampled
generation. These are the backend-neutral model library.

`tfformer.training` (from the repository's `training/` folder) and
`tfformer.export` (from `export/`) are the training program and the
exporters; `tfformer.runs` is the run-directory format both of them use and
`tfformer.preprocessing` the core-op tokenizers and image decoding both run.
None of these is imported by the model library.

`tfformer.load(path)` opens a finished run (trained or converted) for use
from Python:

    translator = tfformer.load("runs/number_words")
    translator.translate(["twenty-one"])
"""

__version__ = "0.1.0"

# tfformer's commands import TensorFlow without its C++ start-up lines
# (`tfformer.startup`; TFFORMER_VERBOSE=1 keeps them). User code that
# imports tfformer is not touched.
from tfformer import startup as _startup
from tfformer.errors import InputError, InputTypeError

_help_only = _startup.help_only()
if _startup.is_command() and not _help_only:
    _startup.quiet_tensorflow()

# Imported eagerly: importing them registers every layer with Keras, so that
# `import tfformer` is enough for `keras.saving.load_model` to read a model.
# A command asked only for its help skips them: it loads no model.
if not _help_only:
    from tfformer import layers, models

__all__ = ["InputError", "InputTypeError", "layers", "load", "models"]


def load(path, checkpoint="model.keras"):
    """The predictor of a run directory, trained or converted: an object with
    its task's methods on raw inputs (`translate`, `generate`, `classify`,
    `embed`, `fill_mask`, ...), a common `predict` and `evaluate`, and
    `.model`, `.backbone`, `.tokenizers`, `.manifest`, `.config`.

    Args:
        path: a directory that `tfformer-train` or `tfformer-convert` wrote.
        checkpoint: "model.keras" (final) or "best.keras" (lowest validation
            loss).

    Raises:
        ValueError: `path` is not a finished run (the message names the file
            and what is wrong).

    Example:

    >>> classifier = tfformer.load("runs/polarity_finetune")
    >>> labels, probabilities = classifier.classify(["a gripping film"])
    """
    # The training program is imported here, when a run is opened, so that
    # `import tfformer` stays the model library alone.
    from tfformer.training.predictors import load as load_run

    return load_run(path, checkpoint)
