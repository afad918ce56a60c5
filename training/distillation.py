"""Knowledge distillation for text classification: a student learns a
teacher run's logits.

A `text_classification` config with `data.teacher` set trains its model
(the student) on the teacher's soft labels as well as the true ones
(Hinton et al., 2015, "Distilling the Knowledge in a Neural Network"):
the loss per sentence is

    w * T^2 * KL(softmax(teacher / T) || softmax(student / T))
        + (1 - w) * cross-entropy(label, softmax(student))

with `T = data.teacher_temperature` and `w = data.teacher_weight`; a
sentence without a label contributes the first term only. The teacher
labels, once before training:

- every sentence of the training split;
- `data.teacher_augment_copies` perturbed copies of each (words replaced by
  random words of the training text, dropped, or cut to an n-gram), as Tang
  et al. (2019, "Distilling Task-Specific Knowledge from BERT into Simple
  Neural Networks") do to give the student more of the teacher to learn
  from than the labelled sentences hold;
- the lines of `data.teacher_text_paths` (unlabelled text), minus every
  sentence of the validation and test splits;
- the validation and test splits, so their loss is the training loss's.

Any finished `text_classification` run can teach (trained or converted),
with its own tokenizer and length: the student keeps its own vocabulary.
The student is an ordinary classifier run (its manifest, predictor and
exports are a classifier's); its config records the teacher.

Targets travel as one float row per sentence: the class id (-1: none),
then the teacher's logits (`DistillationLoss`, `LabelledAccuracy`).
"""

import math
import os

import numpy as np

from tfformer.errors import InputError

# Per-word rates of the augmentation, and the share of copies cut to an
# n-gram of 1 to `NGRAM_MAX` words (Tang et al.'s p_mask, p_ng and n).
REPLACE_RATE = 0.1
DROP_RATE = 0.1
NGRAM_RATE = 0.25
NGRAM_MAX = 5


def check_distillation(data_config):
    """InputError naming the `data.teacher*` key that no run could take
    (read when a config is, before any file is)."""
    d = data_config
    if d.teacher is None:
        for name in ("teacher_text_paths", "teacher_augment_copies", "teacher_cache"):
            if getattr(d, name):
                raise InputError(
                    f"data.{name} is what data.teacher labels; set data.teacher "
                    f"(a text_classification run). Received: data.{name}="
                    f"{getattr(d, name)!r} without data.teacher"
                )
        return
    if not isinstance(d.teacher, str) or not d.teacher:
        raise InputError(
            f"data.teacher must be a run directory (a str). Received: {d.teacher!r}"
        )
    if d.teacher_cache is not None and not isinstance(d.teacher_cache, str):
        raise InputError(
            f"data.teacher_cache must be a directory (a str). Received: "
            f"{d.teacher_cache!r}"
        )
    t = d.teacher_temperature
    number = isinstance(t, int | float) and not isinstance(t, bool)
    if not number or not math.isfinite(t) or not t > 0:
        raise InputError(f"data.teacher_temperature must be > 0. Received: {t!r}")
    w = d.teacher_weight
    if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 1:
        raise InputError(f"data.teacher_weight must be in [0, 1]. Received: {w!r}")
    copies = d.teacher_augment_copies
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 0:
        raise InputError(
            f"data.teacher_augment_copies must be an int >= 0. Received: {copies!r}"
        )


def teacher(data_config, labels, pairs):
    """The predictor of `data.teacher`: a finished text_classification run
    with the student's class names in the same order and the same kind of
    input (single texts or pairs). InputError naming `data.teacher`
    otherwise."""
    from tfformer.training.predictors import load

    where = f"data.teacher={data_config.teacher!r}"
    try:
        predictor = load(os.path.expanduser(data_config.teacher))
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None
    if predictor.task != "text_classification":
        raise InputError(
            f"{where}: it holds a {predictor.task!r} run; a teacher is a "
            "text_classification run."
        )
    if list(predictor.labels) != list(labels):
        raise InputError(
            f"{where}: its classes are {list(predictor.labels)}, this run's "
            f"{list(labels)} (the same names in the same order)."
        )
    if bool(predictor.manifest.pairs) != bool(pairs):
        kinds = ("single texts", "sentence pairs")
        raise InputError(
            f"{where}: it reads {kinds[bool(predictor.manifest.pairs)]}, this "
            f"run's data holds {kinds[bool(pairs)]}."
        )
    return predictor


def normalized(text, lower_case):
    """`text` (or each part of a pair) with its whitespace collapsed, and
    lower-cased with `lower_case`: the form in which held-out and teacher
    sentences are compared."""
    parts = text if isinstance(text, tuple | list) else (text,)
    parts = [" ".join(part.split()) for part in parts]
    return tuple(part.lower() if lower_case else part for part in parts)


def check_teacher_split(predictor, raw, lower_case):
    """InputError naming `data.teacher` when the teacher was trained on
    sentences of this run's validation or test split that this run does not
    train on (its training split is recomputed from its config); a teacher
    without readable training data (a converted checkpoint) is not
    checked."""
    from tfformer.training.tasks.text_classification import TASK

    try:
        theirs = TASK.raw_splits(predictor.config.data)["train"]
    except (ValueError, OSError, AttributeError, TypeError):
        return
    # A sentence this run trains on too (a duplicate across the splits) is
    # no leak of the teacher's.
    ours = {normalized(text, lower_case) for text, _ in raw["train"]}
    seen = {normalized(text, lower_case) for text, _ in theirs} - ours
    heldout = [
        text
        for split in ("validation", "test")
        for text, _ in raw[split]
        if normalized(text, lower_case) in seen
    ]
    if heldout:
        raise InputError(
            f"data.teacher={predictor.directory.path!r} was trained on "
            f"{len(heldout)} sentences of this run's validation and test splits "
            f"(e.g. {heldout[0]!r}): its logits would carry their labels. Use a "
            "teacher trained on this run's training split (the same data files, "
            "data.seed and data.holdout_fraction)."
        )


def augmented_texts(texts, copies, seed):
    """`copies` perturbed copies of each text, in order (text 0's copies,
    then text 1's, ...): each word is replaced with probability
    `REPLACE_RATE` by a word drawn from all of `texts`' words, or dropped
    with probability `DROP_RATE`; then, with probability `NGRAM_RATE`, the
    copy is cut to a random window of 1 to `NGRAM_MAX` words. A copy left
    without words keeps one word of its text. Pairs are perturbed part by
    part. Deterministic in `seed`."""
    rng = np.random.default_rng(seed)
    pairs = bool(texts) and isinstance(texts[0], tuple | list)
    parts = [t for text in texts for t in text] if pairs else list(texts)
    split = [part.split() for part in parts]
    words = [w for ws in split for w in ws]
    if not words:
        return []

    def perturbed(ws):
        draw = rng.random(len(ws))
        out = [
            words[rng.integers(len(words))] if d < REPLACE_RATE else w
            for w, d in zip(ws, draw, strict=True)
            if not REPLACE_RATE <= d < REPLACE_RATE + DROP_RATE
        ]
        if rng.random() < NGRAM_RATE and out:
            n = int(rng.integers(1, NGRAM_MAX + 1))
            start = int(rng.integers(max(len(out) - n, 0) + 1))
            out = out[start : start + n]
        if not out and ws:
            out = [ws[int(rng.integers(len(ws)))]]
        return " ".join(out)

    out = []
    for i in range(len(texts)):
        for _ in range(copies):
            if pairs:
                out.append(tuple(perturbed(split[2 * i + k]) for k in (0, 1)))
            else:
                out.append(perturbed(split[i]))
    return out


def unlabelled_lines(paths, excluded, lower_case=False):
    """The non-empty lines of `paths` (plain or .gz text), stripped, without
    repeats and without those equal to a sentence of `excluded` (held-out
    sentences) once both are `normalized`."""
    from tfformer.training.sources.text_files import read_lines

    seen = {normalized(text, lower_case) for text in excluded}
    out = []
    for path in paths:
        try:
            lines = read_lines(os.path.expanduser(path), allow_empty_lines=True)
        except ValueError as e:
            raise InputError(f"data.teacher_text_paths: {e}") from None
        for line in lines:
            line = line.strip()
            key = normalized(line, lower_case)
            if line and key not in seen:
                seen.add(key)
                out.append(line)
    return out


def distillation_items(data_config, raw, progress=print):
    """{split: [(text, class id or -1)]}: `raw`'s splits, the training
    split followed by its augmented copies and the unlabelled lines
    (labelled -1)."""
    d = data_config
    train = list(raw["train"])
    texts = [text for text, _ in train]
    extra = augmented_texts(texts, d.teacher_augment_copies, d.seed)
    heldout = {
        part
        for split in ("validation", "test")
        for text, _ in raw[split]
        for part in (text if isinstance(text, tuple | list) else (text,))
    }
    pairs = bool(texts) and isinstance(texts[0], tuple | list)
    if d.teacher_text_paths:
        if pairs:
            raise InputError(
                "data.teacher_text_paths holds single sentences; this run reads "
                f"sentence pairs. Received: {list(d.teacher_text_paths)}"
            )
        extra += unlabelled_lines(
            d.teacher_text_paths, heldout | set(texts), d.lower_case
        )
    progress(
        f"Distillation: {len(train)} labelled sentences, "
        f"{len(extra)} more for the teacher to label "
        f"({d.teacher_augment_copies} augmented copies each, "
        f"{len(d.teacher_text_paths)} unlabelled files)"
    )
    return {**raw, "train": train + [(text, -1) for text in extra]}


# Files of a finished run that change without changing its logits.
VOLATILE = ("metrics.json", "heldout.jsonl")


def fingerprint(predictor, items):
    """sha256 hex of what a teacher's targets depend on: the teacher's
    model and tokenizer files, and every split's texts and labels."""
    import hashlib

    digest = hashlib.sha256()
    run = predictor.directory
    names = sorted(os.listdir(run.path))
    for name in names:
        tokenizer = name.endswith(("_vocab.txt", ".model", ".json"))
        if name == predictor.checkpoint or (tokenizer and name not in VOLATILE):
            digest.update(name.encode())
            with open(run.file(name), "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    for split in sorted(items):
        digest.update(f"\0split {split}\0".encode())
        for text, label in items[split]:
            parts = text if isinstance(text, tuple | list) else (text,)
            digest.update(("\t".join(parts) + f"\0{label}\n").encode())
    return digest.hexdigest()


def cached_targets(predictor, items, cache, progress=print):
    """{split: `teacher_targets` rows} of `items`, read from `cache` (a
    directory, or None: no cache) when it holds them under their
    `fingerprint`, else computed and written there (atomically): the
    seeds or student sizes of a sweep share one labelling."""
    path = None
    if cache is not None:
        cache = os.path.expanduser(cache)
        path = os.path.join(cache, f"teacher-{fingerprint(predictor, items)}.npz")
        if os.path.isfile(path):
            with np.load(path) as saved:
                progress(f"Teacher logits: from {path}")
                return {split: saved[split] for split in items}
    import time

    started = time.perf_counter()
    targets = {
        split: teacher_targets(predictor, rows, progress=progress)
        for split, rows in items.items()
    }
    count = sum(len(rows) for rows in items.values())
    progress(f"Teacher logits: {count} texts in {time.perf_counter() - started:.0f} s")
    if path is not None:
        os.makedirs(cache, exist_ok=True)
        partial = f"{path}.{os.getpid()}.partial.npz"
        try:
            np.savez(partial, **targets)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    return targets


def teacher_targets(predictor, items, batch_size=128, progress=print):
    """(len(items), 1 + classes) float32: each item's class id (-1: none),
    then the teacher's logits for its text."""
    texts = [text for text, _ in items]
    logits = predictor.logits(texts, batch_size=batch_size, progress=progress)
    ids = np.array([[label] for _, label in items], np.float32).reshape(-1, 1)
    return np.concatenate([ids, logits.astype(np.float32)], axis=1)
