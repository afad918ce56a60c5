"""LoRA fine-tuning (`model.lora_rank`): a converted GPT-2 continues training
with its backbone frozen and rank-r adapters on the query and value
projections. The saved model has them merged: each adapted kernel moved by
a matrix of rank r at most, every other weight exactly the source's; the
trainable count is the adapters'; bad settings are named before anything
is written."""

import re

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
