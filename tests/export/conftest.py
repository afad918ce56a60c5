"""A tiny trained translator run shared by the export tests (one per worker)."""

import pytest

from ..training.tiny import train_tiny_translator


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    return train_tiny_translator(tmp_path_factory.mktemp("export_run"), steps=30)


SENTENCES = [
    "twenty-one",
    "five hundred and three",
    "nine",
    "",
    "seven thousand, eight hundred!",
    "unknownword zebra",
]
