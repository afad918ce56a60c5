"""The pieces of the one-run-per-directory rule (the whole rule, with runs
on disk, is tested in test_trainer.py and the converter tests)."""

import json
import os

import pytest

from tfformer.training import output_directory as od
from tfformer.training.config import load_config


def test_differences_name_the_dotted_keys():
    saved = {"task": "t", "data": {"a": 1, "b": [1, 2]}, "model": {"c": 3}}
    mine = {"task": "t", "data": {"a": 2, "b": [1, 2]}, "model": {"d": 4}}
    assert od.differences(saved, mine) == [
        ("data.a", 1, 2),
        ("model.c", 3, "<absent>"),
        ("model.d", "<absent>", 4),
    ]


def test_a_saved_train_section_is_not_part_of_the_run(tmp_path):
    """A config.json whose train section today's checks refuse (batch size
    0) still names its run: only task, data and model are read."""
    config = load_config(overrides=[f"train.output_dir={tmp_path}"])
    values = config.to_dict()
    values["train"]["batch_size"] = 0
    (tmp_path / "config.json").write_text(json.dumps(values))
    assert od.check_output_directory(config) == "same"


def test_init_from_inside_the_output_directory_is_refused(tmp_path):
    config = load_config(
        overrides=[
            "task=causal_lm",
            f"model.init_from={tmp_path / 'runs' / 'gpt2'}",
            f"train.output_dir={tmp_path / 'runs'}",
        ]
    )
    with pytest.raises(ValueError, match=r"is inside train\.output_dir"):
        od.check_output_directory(config)


def test_aside_names_never_collide_and_a_failed_rename_is_one_line(
    tmp_path, monkeypatch
):
    first = od.aside_path(str(tmp_path / "run"), now=0)
    os.mkdir(first)
    assert od.aside_path(str(tmp_path / "run"), now=0) == first + "-2"

    def refuse(source, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(od.os, "rename", refuse)
    with pytest.raises(ValueError, match=r"could not rename .* Permission denied"):
        od.move_aside(str(tmp_path / "run"), progress=lambda *_: None)
