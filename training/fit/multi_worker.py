"""Makes Keras 3 `model.fit` work under `MultiWorkerMirroredStrategy`.

keras-team/keras#20585: with Keras 3.x and MultiWorkerMirroredStrategy,
`fit` fails with "Attempt to convert a value (PerReplica...) with an
unsupported type". There are two causes, both in
`keras/src/backend/tensorflow/trainer.py`:

1. Before training, `_maybe_symbolic_build` takes one batch from the
   distributed iterator and calls `strategy.reduce("MEAN", batch)` on the
   whole nested (features, labels) structure, only to learn its shapes.
   The collective all-reduce of MultiWorkerMirroredStrategy cannot take a
   nested structure (MirroredStrategy happens to accept it), hence the error.
2. After each step, `reduce_per_replica` averages the scalar logs of the
   workers with `strategy.reduce("MEAN", v, axis=0)`; axis 0 does not exist
   on a scalar ("Invalid reduction dimension 0 for input with 0 dimensions").

`multi_worker_fit` avoids both: it builds the model from the dataset's
element spec (no data needed), lets `fit` see the strategy through the
scope only (so the faulty symbolic build is skipped), and, while `fit` runs,
reduces scalar logs across workers with `axis=None`. Gradients are reduced
by the optimizer as before; this only changes how the model is built and how
logs are averaged.
"""

import contextlib

import tensorflow as tf
from keras.src.backend.tensorflow import trainer as keras_tf_trainer


def _fixed_reduce_per_replica(original):
    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy
        ):
            return tf.nest.map_structure(
                lambda v: strategy.reduce("MEAN", v, axis=None), values
            )
        return original(values, strategy, reduction)

    return reduce_per_replica


@contextlib.contextmanager
def multi_worker_fit(model, strategy, element_spec):
    """Context in which `model.fit` / `model.evaluate` run under `strategy`.

    Args:
        model: a compiled Keras model whose variables were created under
            `strategy.scope()`.
        strategy: a `tf.distribute.MultiWorkerMirroredStrategy`.
        element_spec: the per-replica `element_spec` of the training data
            (`(features, labels[, sample_weight])`).
    """
    with strategy.scope():
        # Builds model, loss, metrics and optimizer state from shapes only.
        model._symbolic_build(data_batch=element_spec)
        model.optimizer.build(model.trainable_variables)
    saved_strategy = model._distribute_strategy
    original = keras_tf_trainer.reduce_per_replica
    model._distribute_strategy = None
    keras_tf_trainer.reduce_per_replica = _fixed_reduce_per_replica(original)
    try:
        with strategy.scope():
            yield model
    finally:
        keras_tf_trainer.reduce_per_replica = original
        model._distribute_strategy = saved_strategy
