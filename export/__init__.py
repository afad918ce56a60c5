"""tfformer.export: a training run as a TF Serving SavedModel (raw inputs in,
predictions out, core TensorFlow ops only) or a LiteRT model (builtin ops
only), for every task with an exporter in `tasks/`.

Each task's exporter is an `exporter.Exporter` (the protocol and its
defaults), registered by task name in `tasks/`; `runtimes/` holds the
portable scripts shipped next to a `.tflite`.

This package imports `tfformer` (the model library, `tfformer.runs`, the run
directory format, and `tfformer.preprocessing`), never `tfformer.training`.
"""

__all__ = ["export_saved_model", "export_tflite"]


def __getattr__(name):
    # Lazy, so `import tfformer.export` stays cheap.
    if name == "export_saved_model":
        from tfformer.export.saved_model import export_saved_model

        return export_saved_model
    if name == "export_tflite":
        from tfformer.export.tflite import export_tflite

        return export_tflite
    raise AttributeError(name)
