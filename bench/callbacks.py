"""The Keras callback the scripts share to time `model.fit` from inside.

Apart from `bench.common` because it imports Keras (and so TensorFlow),
which common.py must not.
"""

import time

import keras


class BatchClock(keras.callbacks.Callback):
    """When each training batch ended (`ends`, `time.perf_counter()`)."""

    def on_train_begin(self, logs=None):
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())

    def seconds(self):
        """From the end of the first training batch to the end of the last:
        the pass without its first (compiling or warming) batch."""
        return self.ends[-1] - self.ends[0]
