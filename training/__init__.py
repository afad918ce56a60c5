"""Training: data, tokenizers, tf.data pipelines, strategies and `model.fit`.

Depends on `tfformer`; never on `export`. Import the pieces from their
modules (`training.trainer.train`, `training.data.build_dataset`, ...); the
package itself stays light so `tfformer-train --help` starts fast.
"""
