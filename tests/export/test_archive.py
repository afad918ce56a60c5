"""The SavedModel writer: each endpoint traced once, the first one also
`serving_default`, tracked tables and variables saved, bad input refused."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.testing import run_python
from tfformer.export.archive import SignatureArchive


class Vocabulary(tf.Module):
    """A word -> id table, as the tokenizers hold them."""

    def __init__(self, words):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(words), tf.range(1, len(words) + 1, dtype=tf.int64)
            ),
            default_value=0,
        )


@pytest.fixture(scope="module")
def dense():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.set_weights(
        [np.arange(6, dtype="float32").reshape(3, 2), np.ones(2, "float32")]
    )
    return model


def write(dense, path, calls):
    vocabulary = Vocabulary(["a", "b", "c"])

    def ids(text):
        calls.append("ids")
        return {"ids": vocabulary.table.lookup(text)}

    def project(x):
        calls.append("project")
        return {"y": dense(x)}

    archive = SignatureArchive()
    archive.track(dense)
    archive.track(vocabulary)
    archive.add_endpoint("ids", ids, [tf.TensorSpec([None], tf.string, name="text")])
    archive.add_endpoint(
        "project", project, [tf.TensorSpec([None, 3], tf.float32, name="x")]
    )
    archive.write_out(str(path))


def test_each_endpoint_is_traced_once_and_the_first_is_the_default(dense, tmp_path):
    calls = []
    write(dense, tmp_path / "sm", calls)
    # keras.export.ExportArchive traces each twice: once to find its
    # variables, once more inside tf.saved_model.save.
    assert sorted(calls) == ["ids", "project"]
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    assert set(loaded.signatures) == {"serving_default", "ids", "project"}
    text = tf.constant(["b", "z", "a"])
    for key in ("serving_default", "ids"):
        np.testing.assert_array_equal(
            loaded.signatures[key](text=text)["ids"].numpy(), [2, 0, 1]
        )
    x = np.array([[1.0, 2.0, 3.0]], "float32")
    # y = x W + 1 with W = [[0, 1], [2, 3], [4, 5]].
    np.testing.assert_allclose(
        loaded.signatures["project"](x=x)["y"].numpy(), [[17.0, 23.0]]
    )


@pytest.mark.integration
def test_it_loads_in_a_process_that_imports_only_tensorflow(dense, tmp_path):
    write(dense, tmp_path / "sm", [])
    # (`import tensorflow` itself imports keras, so that cannot be asked.)
    done = run_python(
        "import sys, tensorflow as tf\n"
        f"m = tf.saved_model.load({str(tmp_path / 'sm')!r})\n"
        "print(m.signatures['ids'](text=tf.constant(['c']))['ids'].numpy()[0])\n"
        "assert 'tfformer' not in sys.modules, 'tfformer was imported'\n"
    )
    assert done.stdout.strip() == "3"


def test_bad_input_is_refused_by_name():
    archive = SignatureArchive()
    with pytest.raises(ValueError, match="needs a built layer"):
        archive.track(keras.layers.Dense(2))
    with pytest.raises(TypeError, match=r"a Keras layer or a tf\.Module\. Received: 3"):
        archive.track(3)
    with pytest.raises(ValueError, match="No endpoints"):
        archive.write_out("/nonexistent")
    archive.add_endpoint("f", lambda x: {"x": x}, [tf.TensorSpec([None], tf.int32)])
    with pytest.raises(ValueError, match="'f' is already added"):
        archive.add_endpoint("f", lambda x: {"x": x}, [tf.TensorSpec([1], tf.int32)])
