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
    copies = float(re.search(r"predicts its input token (\S+)%", out).group(1))
    # Above ln(50) = 3.9: the untrained tied decoder mostly copies its input
    # token (the demo's comment says why), so its logits are peaked and
    # mostly wrong; a broken forward pass (NaN, constant logits) fails both.
    assert 3.9 < loss < 12.0
    assert 50.0 < copies <= 100.0


def test_demo_rejects_a_too_short_length():
    with pytest.raises(SystemExit):
        demo.main(["--length", "1"])
