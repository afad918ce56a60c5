"""`model.fit` under a `tf.distribute` strategy: the trainer, its callbacks,
loss, metrics, schedule and the multi-worker workaround."""
