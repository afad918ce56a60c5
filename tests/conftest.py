"""Test-wide setup: quiet TensorFlow, deterministic seeds, float32 by default."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    # Two logical CPUs, so MirroredStrategy can be tested with 2 replicas. This
    # must happen before TensorFlow initializes its devices; it changes nothing
    # for code that does not ask for /cpu:1.
    # Under pytest-xdist, each worker gets one intra-op thread: the workers
    # already fill the cores, and TensorFlow's default (one thread per core
    # in every worker) only adds contention.
    threads = os.environ.get(
        "TFFORMER_TEST_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else ""
    )
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    try:
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * 2,
        )
    except RuntimeError:  # devices were initialized already
        pass


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from float32, a fixed seed and a fresh Keras session."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()
