"""LoRA fine-tuning (`model.lora_rank`): a converted GPT-2 continues training
with its backbone frozen and rank-r adapters on the query and value
projections. The saved model has them merged: each adapted kernel moved by
a matrix of rank r at most, every other weight exactly the source's; the
trainable count is the adapters'; backups hold the adapters and the
optimizer's state alone and resume exactly; bad settings are named before
anything is written."""

import json
import re
import shutil

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.test_gpt2 import (
    bpe as bpe,
)
from tests.training.convert.huggingface.test_gpt2 import (
    fine_tuning_config,
    with_tokenizer,
)
from tfformer.training.callbacks import ResumableBackup
from tfformer.training.convert import convert
from tfformer.training.trainer import train


def quiet(*_):
    pass


def attention_kernels(model):
    """{(block, projection): kernel} of every attention projection."""
    kernels = {}
    for b, block in enumerate(model.backbone.decoder_blocks):
        for name in ("query", "key", "value", "output"):
            dense = getattr(block.self_attention, f"{name}_dense")
            kernels[(b, name)] = np.asarray(dense.kernel)
    return kernels


def test_lora_trains_only_low_rank_updates_and_saves_them_merged(tmp_path, bpe):
    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    original = tfformer.load(run).model
    said = []
    train(fine_tuning_config(tmp_path, run, "model.lora_rank=2"), progress=said.append)
    tuned = tfformer.load(str(tmp_path / "tuned")).model
    # The adapters' parameters: (in + out) x rank per query and value
    # kernel, from the source's own shapes.
    before = attention_kernels(original)
    expected = sum(
        2 * (kernel.shape[0] + kernel.shape[1])
        for (_, name), kernel in before.items()
        if name in ("query", "value")
    )
    line = next(s for s in said if s.startswith("LoRA:"))
    assert re.search(
        rf"rank 2 on query, value; {expected:,} of [\d,]+ parameters", line
    )
    after = attention_kernels(tuned)
    for key, kernel in before.items():
        change = after[key] - kernel
        if key[1] in ("key", "output"):
            np.testing.assert_array_equal(change, 0)
            continue
        singular = np.linalg.svd(change, compute_uv=False)
        assert singular[0] > 1e-4, key  # it trained
        assert singular[2] < 1e-6 * singular[0], key  # rank 2 at most
    # Every weight outside the adapted kernels is the source's.
    adapted = {
        id(v)
        for b in tuned.backbone.decoder_blocks
        for v in (
            b.self_attention.query_dense.kernel,
            b.self_attention.value_dense.kernel,
        )
    }
    for mine, theirs in zip(tuned.weights, original.weights, strict=True):
        if id(mine) not in adapted:
            np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


def adapter_parameters(model, names=("query", "value")):
    """(in + out) x 2 for each `names` kernel of `model`: rank 2's A and B."""
    kernels = attention_kernels(model)
    return sum(2 * sum(k.shape) for (_, n), k in kernels.items() if n in names)


class Killed(Exception):
    """Stands for a SIGKILL: nothing after it runs."""


def test_a_lora_run_backs_up_its_adapters_alone_and_resumes_exactly(tmp_path, bpe):
    """Backups every 20 steps of a 60-step run hold the adapters and the
    optimizer's state, not one frozen weight. A run killed at step 30
    resumes from step 20 to the uncut run's weights bit for bit; a resume
    whose model.init_from now holds other weights is refused and loses
    nothing."""
    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    settings = [
        "model.lora_rank=2",
        "model.dropout=0.0",
        "model.activation_dropout=0.0",
        "train.checkpoint_every_steps=20",
    ]

    def config(out):
        return fine_tuning_config(tmp_path, run, *settings, f"train.output_dir={out}")

    uncut = train(config(tmp_path / "uncut"), progress=quiet).model
    backup = tmp_path / "uncut" / "backup"
    assert sorted(p.name for p in backup.iterdir()) == [
        "latest.adapters.npz",
        "state.json",
    ]
    with np.load(backup / "latest.adapters.npz") as f:
        held = sum(f[k].size for k in f.files if k.startswith("model/"))
    assert held == adapter_parameters(uncut)  # A and B of 2 kernels per block

    original = ResumableBackup.on_train_batch_end

    def killed_at_30(self, batch, logs=None):
        original(self, batch, logs)
        if int(self.model.optimizer.iterations.numpy()) >= 30:
            raise Killed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ResumableBackup, "on_train_batch_end", killed_at_30)
        with pytest.raises(Killed):
            train(config(tmp_path / "cut"), progress=quiet)
    state = json.loads((tmp_path / "cut" / "backup" / "state.json").read_text())
    assert state["global_step"] == 20

    # Another base under the same model.init_from: refused, backup kept.
    keep = tmp_path / "model.keras"
    shutil.copy(tmp_path / "run" / "model.keras", keep)
    moved = tfformer.load(run).model
    kernel = moved.backbone.decoder_blocks[0].self_attention.key_dense.kernel
    kernel.assign(kernel + 1e-3)
    moved.save(tmp_path / "run" / "model.keras")
    saved = (tmp_path / "cut" / "backup" / "latest.adapters.npz").read_bytes()
    with pytest.raises(ValueError, match=r"frozen weights from model\.init_from") as e:
        train(config(tmp_path / "cut"), progress=quiet)
    assert "Delete that backup" not in str(e.value)  # keeping it is the fix
    assert (tmp_path / "cut" / "backup" / "latest.adapters.npz").read_bytes() == saved

    shutil.copy(keep, tmp_path / "run" / "model.keras")
    # A damaged copy of the backup is named, with what to do.
    shutil.copytree(tmp_path / "cut", tmp_path / "damaged")
    (tmp_path / "damaged" / "backup" / "latest.adapters.npz").write_bytes(saved[:100])
    with pytest.raises(ValueError, match=r"cannot be read .*Delete that backup"):
        train(config(tmp_path / "damaged"), progress=quiet)
    resumed = train(config(tmp_path / "cut"), progress=quiet).model
    for a, b in zip(resumed.weights, uncut.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.lora_rank=0"], "model.lora_rank must be an int >= 1"),
        (["model.lora_rank=10000"], "model.lora_rank must be at most"),
        (["model.lora_rank=2", "model.lora_targets=[nope]"], "model.lora_targets must"),
        (["model.lora_rank=2", "model.lora_alpha=-1"], "model.lora_alpha must be > 0"),
        (["model.lora_rank=2", "model.init_from=null"], "this run trains from scratch"),
    ],
)
def test_bad_lora_settings_are_named(tmp_path, bpe, overrides, message):
    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    with pytest.raises(ValueError, match=re.escape(message)):
        train(fine_tuning_config(tmp_path, run, *overrides), progress=quiet)
    assert not (tmp_path / "tuned").exists()
