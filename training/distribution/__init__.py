"""`tf.distribute` strategies for `model.fit`: which strategy a config asks
for (`strategy.py`), and the multi-worker workaround (`multi_worker.py`)."""
