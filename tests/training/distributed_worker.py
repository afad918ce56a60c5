"""One worker of the multi-worker test: trains a tiny config, saves its weights.

Run as `python distributed_worker.py OUTPUT_DIR WEIGHTS_FILE [OVERRIDES_JSON]`
with TF_CONFIG set; every worker runs the same command, as on a real cluster.
OVERRIDES_JSON (a list of `--set` strings) replaces the default config.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from tests.training.tiny import TINY_NUMBER_WORDS
from tfformer.training.config import load_config
from tfformer.training.trainer import train

OVERRIDES = [
    *TINY_NUMBER_WORDS,
    "data.train_size=800",
    "data.validation_size=40",
    "data.test_size=40",
    "data.vocabulary_sample_size=300",
    "train.steps_per_epoch=5",
    "train.epochs=2",
    "train.warmup_steps=10",
    "train.verbose=2",
    "train.final_evaluation=false",
]


def main(output_dir, weights_file, overrides=None):
    overrides = json.loads(overrides) if overrides else OVERRIDES
    config = load_config(
        overrides=[
            *overrides,
            "train.strategy=multi_worker",
            f"train.output_dir={output_dir}",
        ]
    )
    result = train(config)
    np.savez(
        weights_file,
        *[w.numpy() for w in result.model.weights],
        loss=np.array(result.metrics["loss"]),
        global_step=result.metrics["global_step"],
        replicas=result.metrics["replicas"],
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
