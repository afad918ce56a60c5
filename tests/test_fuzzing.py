"""The fuzz tests' example counts: reduced by default, full on request."""

import pytest

from tests.fuzzing import DEFAULT_EXAMPLES, fuzz_examples, fuzz_settings


def test_the_default_run_caps_the_examples(monkeypatch):
    monkeypatch.delenv("TFFORMER_FUZZ", raising=False)
    assert fuzz_examples(1000) == DEFAULT_EXAMPLES == 50
    assert fuzz_examples(40) == 40
    assert fuzz_examples(10000, reduce=False) == 10000
    assert fuzz_settings(1000).max_examples == 50
    assert fuzz_settings(1000).deadline is None


def test_full_runs_every_example_asked_for(monkeypatch):
    monkeypatch.setenv("TFFORMER_FUZZ", "full")
    assert fuzz_examples(1000) == 1000
    assert fuzz_settings(500).max_examples == 500


def test_an_unknown_mode_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("TFFORMER_FUZZ", "ful")
    with pytest.raises(ValueError, match=r"TFFORMER_FUZZ must be .* Received: 'ful'"):
        fuzz_examples(1000)
