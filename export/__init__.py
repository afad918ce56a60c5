"""tfformer export: a trained translator as a TF Serving SavedModel (strings in,
translations out, core TensorFlow ops only) or a LiteRT model (ids in, ids
out, the greedy decoding loop inside, builtin ops only).

This package imports `tfformer`, never `training`: it reads the run
directory `tfformer-train` writes (see `export.run`).
"""

__all__ = ["export_saved_model", "export_tflite", "read_run"]


def __getattr__(name):
    # Lazy, so `import export` stays cheap.
    if name == "export_saved_model":
        from export.saved_model import export_saved_model

        return export_saved_model
    if name == "export_tflite":
        from export.tflite import export_tflite

        return export_tflite
    if name == "read_run":
        from export.run import read_run

        return read_run
    raise AttributeError(name)
