"""Test-wide setup: quiet TensorFlow, deterministic seeds, float32 by default."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Each test starts from float32, a fixed seed and a fresh Keras session."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()
