"""Input preprocessing in core TensorFlow ops, shared by the training
pipelines and the exported SavedModels: text conventions (reserved ids,
normalization, WordPiece's join rules: `text.py`), the byte, token-id and
byte-level BPE tokenizers, and image decoding (`images.py`).

TensorFlow directly, not `keras.ops`: this code must run inside `tf.data`
and inside a SavedModel graph that TF Serving loads with no Python. The
backend-neutral model library (`tfformer.layers`, `tfformer.models`,
`tfformer.decoding`) never imports it.
"""
