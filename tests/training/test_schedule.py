import numpy as np
import pytest

from tfformer.training.fit.schedule import TransformerSchedule


def test_paper_formula_warmup_peak_and_decay():
    schedule = TransformerSchedule(hidden_dim=512, warmup_steps=4000)
    for iteration in (0, 99, 3999, 4000, 20000):
        step = iteration + 1
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        np.testing.assert_allclose(float(schedule(iteration)), expected, rtol=1e-5)
    # The peak, at step == warmup, is (d * warmup)^-0.5 ~ 7.0e-4 for the base model.
    np.testing.assert_allclose(float(schedule(3999)), (512 * 4000) ** -0.5, rtol=1e-5)
    assert float(schedule(0)) > 0.0
    doubled = TransformerSchedule(512, 4000, scale=2.0)
    np.testing.assert_allclose(float(doubled(10)), 2 * float(schedule(10)), rtol=1e-6)


def test_config_round_trip_and_bad_arguments():
    schedule = TransformerSchedule(256, 100, 0.5)
    again = TransformerSchedule.from_config(schedule.get_config())
    np.testing.assert_allclose(float(again(50)), float(schedule(50)))
    with pytest.raises(ValueError, match="warmup_steps must be a positive int"):
        TransformerSchedule(256, 0)
    with pytest.raises(ValueError, match="scale must be positive"):
        TransformerSchedule(256, 10, scale=0.0)
