"""The export tests' translator run: the session's shared tiny run."""

import pytest


@pytest.fixture(scope="session")
def run_dir(tiny_translator_run):
    return tiny_translator_run


SENTENCES = [
    "twenty-one",
    "five hundred and three",
    "nine",
    "",
    "seven thousand, eight hundred!",
    "unknownword zebra",
]
