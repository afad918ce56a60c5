import numpy as np
import pytest

from tfformer.training.config import load_config
from tfformer.training.schedules import TransformerSchedule, WarmupCosineSchedule
from tfformer.training.trainer import train

from .tiny import TINY_NUMBER_WORDS


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


def cosine_reference(iteration, peak, warmup, total, fraction):
    """The warmup + cosine formula, written out for one step."""
    step = iteration + 1
    if step <= warmup:
        return peak * step / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    floor = peak * fraction
    return floor + (peak - floor) * 0.5 * (1 + np.cos(np.pi * progress))


def test_warmup_cosine_formula():
    schedule = WarmupCosineSchedule(1e-3, 100, 1100, 0.1)
    for iteration in (0, 49, 99, 100, 350, 599, 1000, 1099, 5000):
        np.testing.assert_allclose(
            float(schedule(iteration)),
            cosine_reference(iteration, 1e-3, 100, 1100, 0.1),
            rtol=1e-5,
        )
    # Hand-computed points: the peak at the end of the warmup, half way down
    # the cosine at its middle step, the floor at the end and after it.
    np.testing.assert_allclose(float(schedule(99)), 1e-3, rtol=1e-6)
    np.testing.assert_allclose(float(schedule(599)), 0.55e-3, rtol=1e-5)
    np.testing.assert_allclose(float(schedule(1099)), 1e-4, rtol=1e-5)
    np.testing.assert_allclose(float(schedule(4000)), 1e-4, rtol=1e-5)
    again = WarmupCosineSchedule.from_config(schedule.get_config())
    np.testing.assert_allclose(float(again(300)), float(schedule(300)))


@pytest.mark.parametrize(
    "args, message",
    [
        ((0.0, 10, 100), "peak must be positive"),
        ((1e-3, 0, 100), "warmup_steps must be a positive int"),
        ((1e-3, 100, 100), "total_steps must exceed warmup_steps"),
        ((1e-3, 10, 100, 1.5), "final_fraction must be in"),
    ],
)
def test_warmup_cosine_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        WarmupCosineSchedule(*args)


def test_cosine_config_keys_are_checked():
    with pytest.raises(ValueError, match=r"needs train\.learning_rate"):
        load_config(overrides=["train.schedule=cosine"])
    with pytest.raises(ValueError, match=r"train\.schedule_steps must exceed"):
        load_config(
            overrides=[
                "train.schedule=cosine",
                "train.learning_rate=1e-3",
                "train.warmup_steps=100",
                "train.schedule_steps=50",
            ]
        )
    with pytest.raises(ValueError, match=r"train\.schedule must be one of"):
        load_config(overrides=["train.schedule=step"])
    with pytest.raises(ValueError, match=r"train.schedule='linear' needs"):
        load_config(overrides=["train.schedule=linear"])
    with pytest.raises(ValueError, match=r"train\.weight_decay must be in"):
        load_config(overrides=["train.weight_decay=1.5"])
    with pytest.raises(ValueError, match=r"belong to train\.schedule='cosine'"):
        load_config(overrides=["train.learning_rate=1e-3"])


@pytest.mark.integration
def test_a_cosine_run_decays_over_its_own_steps(tmp_path):
    """The trainer hands the run's epochs x steps to the schedule: the
    learning rate after the last step is the formula's at that step."""
    config = load_config(
        overrides=[
            *TINY_NUMBER_WORDS,
            "data.train_size=200",
            "data.validation_size=32",
            "data.test_size=32",
            "train.epochs=2",
            "train.steps_per_epoch=4",
            "train.schedule=cosine",
            "train.learning_rate=2e-3",
            "train.warmup_steps=3",
            "train.verbose=0",
            "train.final_evaluation=false",
            f"train.output_dir={tmp_path / 'run'}",
        ]
    )
    model = train(config, progress=lambda *_: None).model
    optimizer = model.optimizer
    assert int(optimizer.iterations) == 8
    # The optimizer's learning rate is its schedule at the current iteration;
    # half way down the cosine it tells a total of 8 steps from any other.
    for iteration in (8, 5):
        optimizer.iterations.assign(iteration)
        np.testing.assert_allclose(
            float(optimizer.learning_rate),
            cosine_reference(iteration, 2e-3, 3, 8, 0.1),
            rtol=1e-5,
        )
    assert not np.isclose(
        cosine_reference(5, 2e-3, 3, 8, 0.1), cosine_reference(5, 2e-3, 3, 4, 0.1)
    )


def test_warmup_linear_decay_by_hand():
    """BERT's fine-tuning schedule: up to the peak over the warmup, then a
    straight line to peak x final_fraction."""
    schedule = WarmupCosineSchedule(1e-4, 10, 110, 0.0, decay="linear")
    # Steps count from 1: iteration 4 is step 5 of the warmup.
    for iteration, expected in ((4, 0.5e-4), (9, 1e-4), (59, 0.5e-4), (84, 0.25e-4)):
        np.testing.assert_allclose(float(schedule(iteration)), expected, rtol=1e-5)
    assert float(schedule(109)) == pytest.approx(0.0, abs=1e-12)
    assert float(schedule(500)) == pytest.approx(0.0, abs=1e-12)
    floor = WarmupCosineSchedule(1e-4, 10, 110, 0.2, decay="linear")
    np.testing.assert_allclose(float(floor(59)), 0.6e-4, rtol=1e-5)
    again = WarmupCosineSchedule.from_config(schedule.get_config())
    np.testing.assert_allclose(float(again(70)), float(schedule(70)))
    with pytest.raises(ValueError, match="decay must be 'cosine' or 'linear'"):
        WarmupCosineSchedule(1e-4, 10, 110, decay="step")


def test_adamw_decays_kernels_but_not_biases_or_layer_norms():
    """One step with zero gradients: Adam's update is 0, so only the
    decoupled decay moves weights: w <- w (1 - lr x weight_decay) for kernels
    and embeddings, nothing for biases and LayerNorm gamma/beta."""
    import keras

    from tfformer.models import bert_classifier, from_preset
    from tfformer.training.trainer import compile_model

    config = load_config(
        overrides=[
            "train.optimizer=adamw",
            "train.weight_decay=0.1",
            "train.schedule=cosine",
            "train.learning_rate=0.5",
            "train.warmup_steps=1",
            "train.schedule_steps=10",
        ]
    )
    model = bert_classifier(
        from_preset("bert_tiny", 50, num_layers=1, max_sequence_length=8), 2
    )
    compile_model(model, config, 10)
    assert isinstance(model.optimizer, keras.optimizers.AdamW)
    before = [w.numpy().copy() for w in model.trainable_weights]
    model.optimizer.apply_gradients(
        [(keras.ops.zeros_like(w), w) for w in model.trainable_weights]
    )
    lr = 0.5  # iteration 0 is step 1 = the whole 1-step warmup
    decayed = kept = 0
    for weight, old in zip(model.trainable_weights, before, strict=True):
        name = weight.path.split("/")[-1]
        if name in ("bias", "gamma", "beta"):
            np.testing.assert_array_equal(weight.numpy(), old)
            kept += 1
        else:
            np.testing.assert_allclose(weight.numpy(), old * (1 - lr * 0.1), rtol=1e-6)
            decayed += 1
    assert decayed >= 8 and kept >= 8
