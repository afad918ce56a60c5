"""The run directory: the one contract between training and export.

`tfformer-train` and `tfformer-convert` write a run directory;
`tfformer-predict`, `tfformer-evaluate`, `tfformer-export` and
`tfformer.load` read it. Both sides import this small package and never
each other: the file layout (`directory.RunDirectory`), the typed manifest
of each task, and atomic file writes (`files`).

Not part of the backend-neutral model library (`tfformer.layers`,
`tfformer.models`, `tfformer.decoding` never import it).
"""
