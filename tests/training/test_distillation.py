"""Knowledge distillation (`tfformer.training.distillation`, a
text_classification run with `data.teacher`): the loss and metrics against
NumPy and Keras's own losses, the augmentation's rates and determinism,
the pipeline's float targets, and runs in which the student follows a
teacher that contradicts the labels."""

import json
import re

import keras
import numpy as np
import pytest

from tests.training.tiny import BAD, GOOD, cue_sentences, tiny_classifier_overrides
from tfformer.errors import InputError
from tfformer.training import distillation
from tfformer.training.losses import DistillationLoss
from tfformer.training.metrics import LabelledAccuracy, TeacherAgreement


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def targets(labels, teacher_logits):
    return np.concatenate(
        [np.asarray(labels, np.float32)[:, None], teacher_logits], axis=1
    ).astype("float32")


@pytest.mark.parametrize("temperature, weight", [(1.0, 0.5), (2.0, 0.3), (4.0, 1.0)])
def test_loss_is_hintons_formula(temperature, weight):
    rng = np.random.default_rng(0)
    student = rng.normal(size=(6, 3)).astype("float32") * 2
    teacher = rng.normal(size=(6, 3)).astype("float32") * 2
    labels = np.array([0, 2, -1, 1, -1, 2])
    got = float(
        DistillationLoss(temperature, weight)(targets(labels, teacher), student)
    )
    # NumPy: T^2 KL(p_teacher^T || p_student^T), and cross-entropy on
    # the labelled rows only; the batch's mean over every row.
    t = temperature
    theirs, ours = log_softmax(teacher / t), log_softmax(student / t)
    soft = (np.exp(theirs) * (theirs - ours)).sum(-1) * t * t
    hard = np.where(
        labels >= 0, -log_softmax(student)[np.arange(6), np.maximum(labels, 0)], 0
    )
    np.testing.assert_allclose(
        got, (weight * soft + (1 - weight) * hard).mean(), rtol=1e-5
    )
    # The soft term is Keras's KLDivergence on the tempered softmaxes.
    kl = keras.losses.KLDivergence(reduction=None)(
        np.exp(theirs), keras.ops.softmax(student / t)
    )
    np.testing.assert_allclose(soft, np.asarray(kl) * t * t, rtol=1e-4)


def test_loss_weights_and_limits():
    rng = np.random.default_rng(1)
    student = rng.normal(size=(4, 2)).astype("float32")
    teacher = rng.normal(size=(4, 2)).astype("float32")
    labels = np.array([1, 0, 1, 1])
    y = targets(labels, teacher)
    # Teacher weight 0 is Keras's sparse cross-entropy on the labels.
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    np.testing.assert_allclose(
        float(DistillationLoss(3.0, 0.0)(y, student)),
        float(sparse(labels, student)),
        rtol=1e-5,
    )
    # A student equal to its teacher has no soft loss at any temperature.
    np.testing.assert_allclose(
        float(DistillationLoss(5.0, 1.0)(y, teacher)), 0, atol=1e-6
    )
    # Sample weights (padding rows of evaluation batches) drop rows.
    weights = np.array([1.0, 1.0, 0.0, 0.0])
    loss = DistillationLoss(2.0, 0.5)
    per_row = [float(loss(y[i : i + 1], student[i : i + 1])) for i in range(2)]
    np.testing.assert_allclose(
        float(loss(y, student, sample_weight=weights)), sum(per_row) / 4, rtol=1e-5
    )
    for bad in ({"temperature": 0.0}, {"teacher_weight": 1.5}):
        with pytest.raises(InputError, match=next(iter(bad))):
            DistillationLoss(**bad)
    restored = DistillationLoss.from_config(DistillationLoss(3.0, 0.25).get_config())
    assert (restored.temperature, restored.teacher_weight) == (3.0, 0.25)


def test_metrics_count_labelled_rows_and_teacher_choices():
    student = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.0, 5.0], [1.0, 0.0]])
    teacher = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 2.0]])
    labels = np.array([0, 0, -1, 1, 1])
    y = targets(labels, teacher.astype("float32"))
    accuracy = LabelledAccuracy()
    accuracy.update_state(y, student)
    # Labelled rows 0, 1, 3, 4: right, wrong, right, wrong.
    assert float(accuracy.result()) == pytest.approx(0.5)
    # A padding row of an evaluation batch (label 0, weight 0) counts nowhere.
    padded = LabelledAccuracy()
    padded.update_state(
        np.concatenate([y, np.zeros((1, 3), np.float32)]),
        np.concatenate([student, [[0.0, 9.0]]]),
        sample_weight=np.array([1, 1, 1, 1, 1, 0.0]),
    )
    assert float(padded.result()) == pytest.approx(0.5)
    agreement = TeacherAgreement()
    agreement.update_state(y, student, sample_weight=np.array([1, 1, 1, 1, 0.0]))
    # Rows 0-3 (row 4 weighs 0): agree, disagree, disagree, agree.
    assert float(agreement.result()) == pytest.approx(0.5)


def test_augmentation_rates_and_determinism():
    rng = np.random.default_rng(2)
    vocabulary = [f"w{i}" for i in range(500)]
    texts = [" ".join(rng.choice(vocabulary, 12)) for _ in range(400)]
    copies = distillation.augmented_texts(texts, 3, seed=7)
    assert len(copies) == 1200
    assert copies == distillation.augmented_texts(texts, 3, seed=7)
    assert copies != distillation.augmented_texts(texts, 3, seed=8)
    words = {w for t in texts for w in t.split()}
    assert all(w in words for c in copies for w in c.split())
    # Copies of text i come at 3i .. 3i + 2.
    lengths = np.array([len(c.split()) for c in copies])
    cut = lengths <= distillation.NGRAM_MAX
    # Uncut copies keep each of the 12 words unless dropped (10 %) ...
    assert lengths[~cut].mean() == pytest.approx(12 * 0.9, abs=0.15)
    # ... a share NGRAM_RATE (25 %) of copies are n-grams of 1-5 words
    # (a few uncut copies lose 7+ words: binomial, negligible) ...
    assert cut.mean() == pytest.approx(distillation.NGRAM_RATE, abs=0.04)
    # ... and, of the words kept in place, 1/9 are replaced.
    kept = changed = 0
    for i, copy in enumerate(copies):
        if not cut[i]:
            original = set(texts[i // 3].split())
            kept += len(copy.split())
            changed += sum(w not in original for w in copy.split())
    # Replacements are drawn from ~4,800 words, rarely the same 12.
    assert changed / kept == pytest.approx(0.1 / 0.9, abs=0.015)
    pairs = distillation.augmented_texts([("a b c", "d e f")], 2, seed=0)
    assert len(pairs) == 2 and all(len(p) == 2 and all(p) for p in pairs)
    assert distillation.augmented_texts(texts, 0, seed=0) == []


def test_unlabelled_lines_leave_heldout_sentences_and_repeats_out(tmp_path):
    path = tmp_path / "more.txt"
    path.write_text("a new line\n\n the test sentence \nanother\na new line\n")
    lines = distillation.unlabelled_lines([str(path)], {"the test sentence"})
    assert lines == ["a new line", "another"]
    # Held-out sentences are left out whatever their spacing and, for a
    # lower-casing run, their case.
    path.write_text("The  Test sentence\nkept\n")
    assert distillation.unlabelled_lines([str(path)], {"the test sentence"}) == [
        "The  Test sentence",
        "kept",
    ]
    assert distillation.unlabelled_lines(
        [str(path)], {"the test sentence"}, lower_case=True
    ) == ["kept"]
    with pytest.raises(InputError, match=r"data\.teacher_text_paths"):
        distillation.unlabelled_lines([str(tmp_path / "missing.txt")], set())


def test_float_targets_are_batched_unpadded_with_sample_weights():
    from tfformer.training import pipeline

    rows = {
        "token_ids": [[2, 5, 3], [2, 6, 7, 3], [2, 3]],
        "segment_ids": [[0] * 3, [0] * 4, [0] * 2],
    }
    y = np.array([[1, 0.5, -0.5], [-1, 2.0, 1.0], [0, 0.0, 3.0]], np.float32)
    examples = pipeline.rows_examples(rows, y)
    dataset = pipeline.evaluation_dataset(examples, batch_size=2, bucket_lengths=(8,))
    batches = list(dataset)
    features, labels, weights = batches[0]
    assert features["token_ids"].shape == (2, 8)
    # Labels keep their (1 + classes) columns; the padding row weighs 0.
    got = np.concatenate([b[1].numpy() for b in batches])
    np.testing.assert_array_equal(got[:3], y)
    np.testing.assert_array_equal(got[3], 0)
    np.testing.assert_array_equal(
        np.concatenate([b[2].numpy() for b in batches]), [1, 1, 1, 0]
    )
    assert labels.dtype == "float32" and weights.shape == (2,)


# -- runs -----------------------------------------------------------------------


def student_overrides(root, student, teacher, *extra):
    """The tiny classifier's overrides on the true class files, taught by
    `teacher`, writing to `student`."""
    return [
        *tiny_classifier_overrides(student),
        f"data.class_paths={root}/neg.txt,{root}/pos.txt",
        "data.class_names=negative,positive",
        f"data.teacher={teacher}",
        *extra,
    ]


@pytest.fixture(scope="module")
def contrary_teacher(tmp_path_factory):
    """A tiny classifier trained with the class files swapped (good words
    are "negative"), and the true files beside it."""
    from tests.training.tiny import train_tiny_classifier

    root = tmp_path_factory.mktemp("contrary")
    run = train_tiny_classifier(root, root / "teacher")
    # The same sentences, files swapped: the teacher now contradicts them.
    (root / "neg.txt").rename(root / "tmp.txt")
    (root / "pos.txt").rename(root / "neg.txt")
    (root / "tmp.txt").rename(root / "pos.txt")
    return root, run


def train_student(root, name, teacher, *extra):
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    out = root / name
    train(
        load_config(overrides=student_overrides(root, out, teacher, *extra)),
        progress=lambda *_: None,
    )
    return out


def test_the_student_follows_its_teacher_as_far_as_its_weight_says(contrary_teacher):
    import tfformer

    root, teacher = contrary_teacher
    unlabelled = root / "more.txt"
    unlabelled.write_text(
        "\n".join(cue_sentences(np.random.default_rng(3), GOOD + BAD, 50))
    )
    soft = train_student(
        root,
        "soft",
        teacher,
        "data.teacher_weight=1.0",
        "data.teacher_augment_copies=1",
        f"data.teacher_text_paths={unlabelled}",
    )
    hard = train_student(root, "hard", teacher, "data.teacher_weight=0.0")
    teacher_scores = tfformer.load(teacher).evaluate()
    # The teacher is wrong on nearly every sentence of the true files; the
    # student on soft labels only learns it, the one on labels only does not.
    assert teacher_scores["accuracy"] < 0.1
    assert tfformer.load(str(soft)).evaluate()["accuracy"] < 0.1
    assert tfformer.load(str(hard)).evaluate()["accuracy"] > 0.9
    # The run records the teacher's agreement and the labelled accuracy.
    results = json.loads((soft / "metrics.json").read_text())["results"]
    assert results["test_teacher_agreement"] > 0.9
    assert results["test_accuracy"] < 0.1


def test_teacher_targets_are_its_logits(contrary_teacher):
    import tfformer

    _, teacher = contrary_teacher
    predictor = tfformer.load(teacher)
    items = [("the film was great", 1), ("a plot dull", -1), ("é naïve bad", 0)]
    got = distillation.teacher_targets(predictor, items, batch_size=2)
    np.testing.assert_array_equal(got[:, 0], [1, -1, 0])
    # Softmax of the logits is the predictor's own (fixed-width) probabilities.
    probabilities = predictor.probabilities([t for t, _ in items])
    np.testing.assert_allclose(
        np.exp(log_softmax(got[:, 1:])), probabilities, rtol=1e-4, atol=1e-5
    )


def test_bad_distillation_settings_name_the_key(contrary_teacher, tmp_path):
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    root, teacher = contrary_teacher
    out = tmp_path / "student"
    for setting, key in [
        ("data.teacher_temperature=0", "data.teacher_temperature"),
        ("data.teacher_temperature=inf", "data.teacher_temperature"),
        ("data.teacher_weight=2", "data.teacher_weight"),
        ("data.teacher_augment_copies=-1", "data.teacher_augment_copies"),
        ("data.teacher=3", "data.teacher"),
    ]:
        with pytest.raises(InputError, match=re.escape(key)):
            load_config(overrides=student_overrides(root, out, teacher, setting))
    no_teacher = [
        o
        for o in student_overrides(root, out, teacher)
        if not o.startswith("data.teacher")
    ]
    for setting in (
        "teacher_augment_copies=2",
        "teacher_cache=x",
        "teacher_text_paths=[x]",
    ):
        with pytest.raises(InputError, match=re.escape(setting.split("=")[0])):
            load_config(overrides=[*no_teacher, f"data.{setting}"])
    # Refused before any file is written: no run at the path; a teacher of
    # other classes; a teacher trained on this run's test sentences (its
    # data.seed split them otherwise).
    refused = [
        (student_overrides(root, out, tmp_path / "nothing"), "data.teacher="),
        (
            [
                o.replace("negative,positive", "bad,good")
                for o in student_overrides(root, out, teacher)
            ],
            r"data.teacher=.*its classes are",
        ),
        (
            student_overrides(root, out, teacher, "data.seed=1"),
            r"data.teacher=.*was trained on \d+ sentences of this run's validation",
        ),
    ]
    for overrides, message in refused:
        with pytest.raises(InputError, match=message):
            train(load_config(overrides=overrides), progress=lambda *_: None)
    assert not out.exists()


def test_a_mixed_precision_student_trains(contrary_teacher):
    import tfformer

    root, teacher = contrary_teacher
    run = train_student(
        root,
        "bfloat16",
        teacher,
        "train.precision=mixed_bfloat16",
        "train.epochs=2",
        "data.teacher_weight=1.0",
    )
    results = json.loads((run / "metrics.json").read_text())["results"]
    assert results["precision"] == "mixed_bfloat16"
    assert np.isfinite(results["test_loss"])
    assert tfformer.load(str(run)).classify(["the film was great"])[0][0] in (
        "negative",
        "positive",
    )


def test_a_cache_labels_the_same_texts_once(contrary_teacher, tmp_path):
    import tfformer

    _, teacher = contrary_teacher
    predictor = tfformer.load(teacher)
    items = {"train": [("the film was great", 1), ("dull", -1)], "test": [("bad", 0)]}
    heard = []
    first = distillation.cached_targets(predictor, items, str(tmp_path), heard.append)
    again = distillation.cached_targets(predictor, items, str(tmp_path), heard.append)
    assert [m for m in heard if "from" in m] and len(list(tmp_path.iterdir())) == 1
    for split in items:
        np.testing.assert_array_equal(first[split], again[split])
    # Other texts, or the same texts under other labels, are other entries.
    other = {**items, "test": [("bad", 1)]}
    assert distillation.fingerprint(predictor, other) != distillation.fingerprint(
        predictor, items
    )
    distillation.cached_targets(predictor, other, str(tmp_path), heard.append)
    assert len(list(tmp_path.iterdir())) == 2
