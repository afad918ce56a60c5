"""Private Keras/TF APIs fail loudly, naming the versions, and are used
nowhere else in `tfformer/`, `training/` and `export/`."""

import ast
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfformer.training.distribution.multi_worker import (
    accepts,
    multi_worker_fit,
    require_private,
)

VERSIONS = f"in keras {keras.__version__} (tensorflow {tf.__version__})"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = ("tfformer", "training", "export")
KERAS_TRAINER = "keras.src.backend.tensorflow.trainer"


def test_require_private_returns_the_attribute_or_names_the_versions():
    class Owner:
        _present = 3

        def _method(self, data_batch=None):
            return data_batch

    assert require_private(Owner, "_present", "count") == 3
    method = require_private(Owner(), "_method", "build", check=accepts("data_batch"))
    assert method(data_batch=5) == 5
    with pytest.raises(RuntimeError) as missing:
        require_private(Owner, "_gone", "build the model")
    message = str(missing.value)
    assert f"Owner._gone is missing {VERSIONS}" in message
    assert "to build the model;" in message
    with pytest.raises(RuntimeError, match=r"Owner instance\._method has changed"):
        require_private(Owner(), "_method", "build", check=accepts("iterator"))
    with pytest.raises(RuntimeError, match=r"Owner\._present has changed"):
        require_private(Owner, "_present", "count", check=lambda value: value == 4)


def one_device_model():
    """A compiled model made under a strategy's scope, as the trainer makes it."""
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    spec = (
        tf.TensorSpec((None, 3), tf.float32),
        tf.TensorSpec((None, 2), tf.float32),
    )
    return model, strategy, spec


def test_multi_worker_fit_trains_and_puts_everything_back():
    model, strategy, spec = one_device_model()
    keras_trainer = sys.modules[KERAS_TRAINER]
    original = keras_trainer.reduce_per_replica
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 2), "float32")
    with multi_worker_fit(model, strategy, spec):
        assert model._distribute_strategy is None
        assert keras_trainer.reduce_per_replica is not original
        history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    assert history.history["loss"][1] < history.history["loss"][0]
    assert int(model.optimizer.iterations.numpy()) == 4
    assert keras_trainer.reduce_per_replica is original
    assert model._distribute_strategy is strategy


def enter(model, strategy, spec):
    with multi_worker_fit(model, strategy, spec):
        pass


@pytest.mark.parametrize(
    ("remove", "named"),
    [
        ("reduce_per_replica", f"{KERAS_TRAINER}.reduce_per_replica is missing"),
        ("_symbolic_build", "Sequential instance._symbolic_build is missing"),
        ("_distribute_strategy", "Sequential instance._distribute_strategy is missing"),
    ],
)
def test_multi_worker_fit_refuses_a_keras_without_its_private_apis(
    monkeypatch, remove, named
):
    model, strategy, spec = one_device_model()
    keras_trainer = sys.modules[KERAS_TRAINER]
    if remove == "reduce_per_replica":
        monkeypatch.delattr(keras_trainer, "reduce_per_replica")
    elif remove == "_symbolic_build":
        owner = next(c for c in type(model).__mro__ if "_symbolic_build" in vars(c))
        monkeypatch.delattr(owner, "_symbolic_build")
    else:
        monkeypatch.delattr(model, "_distribute_strategy")
    with pytest.raises(RuntimeError) as error:
        enter(model, strategy, spec)
    assert named in str(error.value)
    assert VERSIONS in str(error.value)
    # Nothing was changed on the way.
    monkeypatch.undo()
    assert model._distribute_strategy is strategy
    assert keras_trainer.reduce_per_replica.__module__ == KERAS_TRAINER


def test_multi_worker_fit_refuses_private_apis_that_changed(monkeypatch):
    model, strategy, spec = one_device_model()
    keras_trainer = sys.modules[KERAS_TRAINER]
    original = keras_trainer.reduce_per_replica
    monkeypatch.setattr(keras_trainer, "reduce_per_replica", lambda values: values)
    with pytest.raises(RuntimeError, match=r"reduce_per_replica has changed in keras"):
        enter(model, strategy, spec)
    monkeypatch.setattr(keras_trainer, "reduce_per_replica", original)
    # A model that does not hold the strategy it was built under.
    monkeypatch.setattr(model, "_distribute_strategy", tf.distribute.get_strategy())
    with pytest.raises(
        RuntimeError, match=r"_distribute_strategy has changed in keras"
    ):
        enter(model, strategy, spec)
    # A Keras whose model no longer takes the strategy from the scope.
    monkeypatch.setattr(model, "_distribute_strategy", strategy)
    default = tf.distribute.get_strategy()  # outside any scope
    monkeypatch.setattr(
        type(model), "distribute_strategy", property(lambda self: default)
    )
    with pytest.raises(
        RuntimeError, match=r"_distribute_strategy has changed \(set to None"
    ):
        enter(model, strategy, spec)
    assert model._distribute_strategy is strategy


def test_multi_worker_fit_refuses_a_keras_without_the_private_module(monkeypatch):
    model, strategy, spec = one_device_model()
    monkeypatch.setitem(sys.modules, KERAS_TRAINER, None)  # import fails
    with pytest.raises(RuntimeError) as error:
        enter(model, strategy, spec)
    message = str(error.value)
    assert message.startswith(f"{KERAS_TRAINER} cannot be imported (")
    assert VERSIONS in message
    assert "to replace how fit reduces its logs;" in message


def test_the_sources_reach_private_apis_only_through_the_checks():
    """In tfformer/, training/ and export/, a private attribute of anything
    but `self`/`cls` (`x._name`, and TensorFlow's `__internal__`) or an import
    from `keras.src` / `tensorflow.python` is one of the uses listed here,
    each behind a check that names the version when it moves: the
    assignments multi_worker.py makes after `require_private`, dropout.py's
    XLA-context probe (`in_xla_compilation`) and padding.py's
    `get_keras_mask` (its import is guarded)."""
    found = set()
    paths = [
        os.path.join(directory, name)
        for source in SOURCES
        for directory, _, names in os.walk(os.path.join(ROOT, source))
        for name in names
        if name.endswith(".py")
    ]
    assert len(paths) > 100  # every sub-package, not only the top folders
    for path in sorted(paths):
        name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                modules = [node.module] if isinstance(node, ast.ImportFrom) else []
                modules += [alias.name for alias in node.names]
                for module in filter(None, modules):
                    if module.startswith(("keras.src", "tensorflow.python")):
                        found.add((name, f"import {module}"))
            own = isinstance(node, ast.Attribute) and (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            )
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and (not node.attr.startswith("__") or node.attr == "__internal__")
                and not own
            ):
                found.add((name, ast.unparse(node)))
    assert found == {
        ("multi_worker.py", "model._distribute_strategy"),
        ("dropout.py", "tf.__internal__"),
        ("padding.py", "import keras.src.backend"),
    }
