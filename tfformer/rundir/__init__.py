"""The run directory: the one contract between training and export.

`tfformer-train` writes a run directory; `tfformer-predict`,
`tfformer-evaluate` and `tfformer-export` read it. Both sides import this
small package and never each other: the file layout and manifest
(`run.RunDirectory`), the reserved ids, WordPiece conventions, punctuation
rules and the core-op byte tokenizer (`text`), and atomic file writes
(`files`).

Not part of the backend-neutral model library (`tfformer.layers`,
`tfformer.models`, `tfformer.decoding` never import it): it uses TensorFlow.
"""
