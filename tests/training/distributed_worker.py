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


def slow_move_aside(seconds):
    """The chief's rename of a run started over, made `seconds` late (a slow
    shared disk), so that the other worker reaches its restore first."""
    import time

    from tfformer.training import trainer

    move_aside = trainer.move_aside

    def late(*args, **kwargs):
        time.sleep(seconds)
        return move_aside(*args, **kwargs)

    trainer.move_aside = late


def main(output_dir, weights_file, overrides=None):
    if os.environ.get("TFFORMER_TEST_SLOW_MOVE"):
        slow_move_aside(float(os.environ["TFFORMER_TEST_SLOW_MOVE"]))
    overrides = json.loads(overrides) if overrides else OVERRIDES
    config = load_config(
        overrides=[
            *overrides,
            "train.strategy=multi_worker",
            f"train.output_dir={output_dir}",
        ]
    )
    # TFFORMER_TEST_START_OVER=1: as `tfformer-train --start-over` on every worker.
    result = train(config, start_over=os.environ.get("TFFORMER_TEST_START_OVER") == "1")
    np.savez(
        weights_file,
        *[w.numpy() for w in result.model.weights],
        loss=np.array(result.metrics["loss"]),
        global_step=result.metrics["global_step"],
        replicas=result.metrics["replicas"],
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
