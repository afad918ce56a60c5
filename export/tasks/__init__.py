"""Exporters, one per task, registered by task name.

Each is an `tfformer.export.exporter.Exporter` subclass (the protocol and
its defaults are documented there), imported when its task is first
exported. The generic parts (versioned atomic SavedModel directories, the
LiteRT converter and quantization) live in `tfformer.export.saved_model`
and `tfformer.export.tflite`; `bert_text` holds what the text classifier
and the sentence embedder share.
"""

import importlib

from tfformer.errors import InputError

_MODULES = {
    "translation": "tfformer.export.tasks.translation",
    "causal_lm": "tfformer.export.tasks.causal_lm",
    "text_classification": "tfformer.export.tasks.text_classification",
    "image_classification": "tfformer.export.tasks.image_classification",
    "sentence_embedding": "tfformer.export.tasks.sentence_embedding",
}
EXPORTABLE_TASKS = tuple(_MODULES)


def get_exporter(task):
    """The `Exporter` of `task` (a run directory's task name)."""
    if task not in _MODULES:
        raise InputError(
            f"tfformer-export has no exporter for task {task!r} yet "
            f"(exportable: {list(EXPORTABLE_TASKS)})."
        )
    exporter = importlib.import_module(_MODULES[task]).EXPORTER
    if exporter.task != task:
        raise RuntimeError(
            f"{_MODULES[task]}.EXPORTER exports {exporter.task!r} runs, "
            f"not {task!r} ones."
        )
    return exporter
