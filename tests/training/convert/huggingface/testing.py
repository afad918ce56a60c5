"""What the conversion tests share: a silent progress callback, the check
that a refused checkpoint leaves nothing written beside it, and keras-hub's
logits and greedy tokens as the reference."""

import numpy as np
import pytest

from tfformer.training.convert import convert


def quiet(*_):
    pass


def backbone_logits(reference, ids, mask=None):
    """The next-token logits `(batch, T, vocab)` a keras-hub backbone gives
    the checkpoint's `ids` (its tied or separate output embedding)."""
    ids = np.asarray(ids, "int32")
    mask = np.ones_like(ids, bool) if mask is None else mask
    hidden = reference({"token_ids": ids, "padding_mask": mask})
    return np.asarray(reference.token_embedding(hidden, reverse=True))


def reference_greedy(reference, ids, steps, end):
    """`ids` continued by up to `steps` tokens, each the argmax of a full
    forward pass of the keras-hub backbone `reference`; the end id (or any
    of a collection of them) stops it and is left out, as in tfformer's
    decoding."""
    ids = list(ids)
    ends = {end} if isinstance(end, int) else set(end)
    for _ in range(steps):
        token = int(backbone_logits(reference, [ids])[0, -1].argmax())
        if token in ends:
            break
        ids.append(token)
    return ids


def assert_predict_continues_ids(
    run, reference, capsys, prompt=(1, 5, 0, 12), kept=None
):
    """`tfformer-predict` on the token-id run `run` continues `prompt` (id 0
    a real token of the checkpoint) by 6 greedy tokens (KV-cached), the ones
    a full forward pass of the keras-hub backbone `reference` picks one at a
    time up to the end id 2. `kept`: the ids of a prompt too long for the
    context that predict keeps and prints (default: all of `prompt`)."""
    from tfformer.training.commands import predict as predict_cli

    ids = reference_greedy(reference, list(prompt if kept is None else kept), 6, end=2)
    text = " ".join(str(i) for i in prompt)
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", text])
    assert code == 0
    expected = " ".join(str(i) for i in ids)
    assert capsys.readouterr().out.split("\n")[0].strip() == expected


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
