import re

import pytest

from tfformer import demo


def test_demo_runs_and_cached_decoding_agrees(capsys):
    assert (
        demo.main(["--vocabulary-size", "50", "--length", "5", "--batch-size", "2"])
        == 0
    )
    out = capsys.readouterr().out
    assert "Total params" in out
    gap = float(re.search(r"max \|difference\| = (\S+)", out).group(1))
    assert gap < 1e-4
    loss = float(re.search(r"untrained cross-entropy: (\S+)", out).group(1))
    assert 3.0 < loss < 6.0  # ln(50) = 3.9 plus the spread of untrained logits


def test_demo_rejects_a_too_short_length():
    with pytest.raises(SystemExit):
        demo.main(["--length", "1"])
