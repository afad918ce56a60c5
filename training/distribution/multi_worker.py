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

All of that goes through private Keras APIs (`keras.src`,
`Model._symbolic_build`, `Model._distribute_strategy`, the module function
`reduce_per_replica`), which change between releases without notice. Each is
checked with `require_private` before anything is changed, so a Keras that
moved one fails at once with its version named, not deep inside `fit` or,
worse, by training with logs that are silently reduced the old way.
"""

import contextlib
import importlib
import inspect

import keras
import tensorflow as tf


def require_private(owner, name, why, *, check=None):
    """`getattr(owner, name)` for a private Keras/TF API, checked.

    Args:
        owner: the module, class or object that holds `name`.
        name: the private attribute, e.g. `"_symbolic_build"`.
        why: what training needs it for; goes into the error.
        check: optional predicate on the value: False means the attribute is
            there but no longer what training relies on.

    Raises:
        RuntimeError: naming the attribute, the reason and the installed
            Keras and TensorFlow versions.
    """
    missing = object()
    value = getattr(owner, name, missing)
    if value is not missing and (check is None or check(value)):
        return value
    problem = "is missing" if value is missing else "has changed"
    raise private_api_error(f"{_describe(owner)}.{name}", problem, why)


def import_private(module, why):
    """`importlib.import_module(module)` for a private module, checked."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise private_api_error(module, f"cannot be imported ({error})", why) from error


def private_api_error(what, problem, why):
    """The error for a private API that the installed Keras changed."""
    return RuntimeError(
        f"{what} {problem} in keras {keras.__version__} (tensorflow "
        f"{tf.__version__}). Training uses this private API to {why}; "
        "training/distribution/multi_worker.py must be updated for this version."
    )


def accepts(*parameters):
    """A `check` for `require_private`: a callable taking these parameters."""

    def check(function):
        try:
            names = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return False
        return all(name in names for name in parameters)

    return check


def _describe(owner):
    if inspect.ismodule(owner):
        return owner.__name__
    if inspect.isclass(owner):
        return f"{owner.__module__}.{owner.__qualname__}"
    return f"{type(owner).__name__} instance"


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
    # Every private API is checked before anything is changed.
    keras_tf_trainer = import_private(
        "keras.src.backend.tensorflow.trainer", "replace how fit reduces its logs"
    )
    original = require_private(
        keras_tf_trainer,
        "reduce_per_replica",
        "reduce the logs of fit across workers with axis=None",
        check=accepts("values", "strategy", "reduction"),
    )
    symbolic_build = require_private(
        model,
        "_symbolic_build",
        "build the model from the data's element spec",
        check=accepts("data_batch"),
    )
    hide_strategy = "hide the strategy from fit, which then skips its symbolic build"
    # The strategy whose scope the model was created in.
    saved_strategy = require_private(
        model, "_distribute_strategy", hide_strategy, check=lambda s: s is strategy
    )
    with strategy.scope():
        # Builds model, loss, metrics and optimizer state from shapes only.
        symbolic_build(data_batch=element_spec)
        model.optimizer.build(model.trainable_variables)
    model._distribute_strategy = None
    with strategy.scope():
        follows_scope = model.distribute_strategy is strategy
    if not follows_scope:
        model._distribute_strategy = saved_strategy
        raise private_api_error(
            f"{_describe(model)}._distribute_strategy",
            "has changed (set to None, the model no longer takes the scope's strategy)",
            hide_strategy,
        )
    keras_tf_trainer.reduce_per_replica = _fixed_reduce_per_replica(original)
    try:
        with strategy.scope():
            yield model
    finally:
        keras_tf_trainer.reduce_per_replica = original
        model._distribute_strategy = saved_strategy
