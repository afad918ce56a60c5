"""A tiny trained translator run shared by the export tests (one per worker)."""

import pytest

from training.config import load_config
from training.trainer import train

from ..training.tiny import TINY_NUMBER_WORDS


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("export_run")
    config = load_config(
        overrides=[
            *TINY_NUMBER_WORDS,
            "data.train_size=600",
            "data.validation_size=16",
            "data.test_size=16",
            "data.vocabulary_sample_size=300",
            "train.steps_per_epoch=30",
            "train.epochs=1",
            "train.verbose=0",
            "train.evaluate_exact_match=false",
            f"train.output_dir={out}",
        ]
    )
    train(config, progress=lambda *_: None)
    return str(out)


SENTENCES = [
    "twenty-one",
    "five hundred and three",
    "nine",
    "",
    "seven thousand, eight hundred!",
    "unknownword zebra",
]
