"""Exporters, one module per task, registered by task name.

An exporter reads its task's run directory and writes that task's SavedModel
signatures and TFLite model (see `translation.TranslationExporter` for the
methods `tfformer-export` calls). The generic parts (versioned atomic
SavedModel directories, the LiteRT converter and quantization) live in
`tfformer.export.saved_model` and `tfformer.export.tflite`.
"""

import importlib

_MODULES = {
    "translation": "tfformer.export.tasks.translation",
    "causal_lm": "tfformer.export.tasks.causal_lm",
    "text_classification": "tfformer.export.tasks.text_classification",
    "image_classification": "tfformer.export.tasks.image_classification",
    "sentence_embedding": "tfformer.export.tasks.sentence_embedding",
}
EXPORTABLE_TASKS = tuple(_MODULES)


def get_exporter(task):
    """The exporter of `task` (a run directory's task name)."""
    if task not in _MODULES:
        raise ValueError(
            f"tfformer-export has no exporter for task {task!r} yet "
            f"(exportable: {list(EXPORTABLE_TASKS)})."
        )
    return importlib.import_module(_MODULES[task]).EXPORTER
