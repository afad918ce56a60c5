"""What the conversion tests share: a silent progress callback and the
check that a refused checkpoint leaves nothing written beside it."""

import numpy as np
import pytest

from tfformer.training.convert import convert


def quiet(*_):
    pass


def nothing_written(tmp_path):
    """Whether `tmp_path` holds only the checkpoint directory "hf"."""
    return sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def changed(tensors, change, extra):
    """`tensors` without `change["drop"]` and with `change["extra"]` set to
    the array `extra` (a tensor no conversion reads)."""
    tensors = dict(tensors)
    if "drop" in change:
        del tensors[change["drop"]]
    if "extra" in change:
        tensors[change["extra"]] = np.asarray(extra)
    return tensors


def assert_refused(tmp_path, source, message):
    """Converting `source` (tmp_path / "hf") into tmp_path / "run" raises a
    ValueError matching `message`, and writes nothing."""
    with pytest.raises(ValueError, match=message):
        convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert nothing_written(tmp_path)


def served_greedy(served, prompts, max_new_tokens):
    """The SavedModel `served`'s `generate` signature, greedy (top_k 1), on
    `prompts` with `max_new_tokens` new tokens each (lists, one per row)."""
    import tensorflow as tf

    rows = len(prompts)
    return served.signatures["generate"](
        prompt=tf.constant(prompts),
        max_new_tokens=tf.constant(max_new_tokens),
        temperature=tf.constant([1.0] * rows),
        top_k=tf.constant([1] * rows),
        top_p=tf.constant([1.0] * rows),
        seed=tf.constant([0] * rows),
    )
