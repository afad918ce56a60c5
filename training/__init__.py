"""tfformer training: data, tokenizers, tf.data pipelines and `model.fit`.

Not built yet (see the "Training pipeline" issue). This package may import
`tfformer` but never `export`.
"""
