"""The conversion's shared flow, whatever the architecture: the checks on
`--from` and `--out`, nothing written unless the whole conversion succeeds
(staged beside `--out`, renamed into place), the command's exit status, the
weight files' checks, and the registry that finds one module per
architecture."""

import json
import os
import pathlib
import sys

import numpy as np
import pytest

from tests.training.convert.huggingface.test_bert import write_checkpoint
from tests.training.convert.huggingface.testing import (
    assert_refused,
    nothing_written,
    quiet,
)
from tfformer.training.commands import convert as convert_cli
from tfformer.training.convert import convert, huggingface


def test_corrupt_weights_and_missing_files_are_named(tmp_path):
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(4))
    weights = source / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # truncated
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor .*truncated"):
        convert(str(source), str(tmp_path / "run"), progress=quiet)
    weights.unlink()
    (source / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"no model\.safetensors.*PyTorch pickles"):
        convert(str(source), str(tmp_path / "run"), progress=quiet)
    (source / "config.json").unlink()
    with pytest.raises(ValueError, match=r"has no config\.json"):
        convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert nothing_written(tmp_path)


def test_a_bit_flipped_safetensors_header_exits_2_in_one_line(tmp_path, capsys):
    """One flipped bit in the 8-byte header length or in 40 random places of
    the JSON header: `tfformer-convert` prints one line naming the file or
    the tensor, exits 2 and writes nothing. (A flip in the tensor data is not
    detectable: safetensors holds no checksum.)"""
    import random
    import struct

    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(4))
    weights = source / "model.safetensors"
    data = weights.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    rng = random.Random(0)
    for position in [*range(8), *rng.sample(range(8, 8 + length), 40)]:
        flipped = bytearray(data)
        flipped[position] ^= 1 << rng.randrange(8)
        weights.write_bytes(bytes(flipped))
        capsys.readouterr()
        out = tmp_path / "run"
        assert convert_cli.main(["--from", str(source), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "model.safetensors" in err or "tensor" in err, err
        assert nothing_written(tmp_path), position


def test_the_command_exits_2_and_keeps_an_existing_run(tmp_path, capsys):
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(5))
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert convert_cli.main(["--from", str(source), "--out", str(out)]) == 2
    assert "--out must be a new or empty directory" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"
    assert convert_cli.main(["--from", str(tmp_path / "nope"), "--out", "x"]) == 2
    assert "--from must be a Hugging Face checkpoint directory" in (
        capsys.readouterr().err
    )
    assert (
        convert_cli.main(["--from", str(source), "--out", str(tmp_path / "new")]) == 0
    )
    assert "Wrote" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "new")) == [
        "config.json",
        "model.keras",
        "run.json",
        "text_vocab.txt",
    ]


def test_overlapping_tensors_and_new_parents(tmp_path):
    from tfformer.training.convert.huggingface.safetensors import SafetensorsFile

    header = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        }
    ).encode()
    path = tmp_path / "aliased.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(16))
    with pytest.raises(ValueError, match="starts at byte 0 of the data, expected 8"):
        SafetensorsFile(path)
    # A conversion that fails removes the parent directories it made.
    source = write_checkpoint(
        tmp_path / "hf", np.random.default_rng(11), config={"vocab_size": 5}
    )
    with pytest.raises(ValueError, match="vocab_size"):
        convert(str(source), str(tmp_path / "new" / "deeper" / "run"))
    assert not (tmp_path / "new").exists()
    # An existing empty --out is used.
    (tmp_path / "empty").mkdir()
    source = write_checkpoint(tmp_path / "hf2", np.random.default_rng(12))
    convert(str(source), str(tmp_path / "empty"), progress=quiet)
    assert (tmp_path / "empty" / "run.json").is_file()


# -- the registry ----------------------------------------------------------------


def test_a_model_type_no_module_claims_is_refused_naming_the_known_ones(tmp_path):
    source = write_checkpoint(
        tmp_path / "hf", np.random.default_rng(3), config={"model_type": "t5"}
    )
    known = sorted(huggingface.architectures())
    assert {"bert", "gpt2", "llama", "vit"} <= set(known)
    assert_refused(tmp_path, source, "model_type must be one of .*'t5'")
    with pytest.raises(ValueError) as refused:
        convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert f"must be one of {known}. Received: 't5'" in str(refused.value)


@pytest.mark.parametrize(
    "architecture, config, message",
    [
        ("bert", {"model_type": ["bert"]}, r"model_type must be one of .*\['bert'\]"),
        (
            "gpt2",
            {"tie_word_embeddings": "no"},
            "must be true or false. Received: 'no'",
        ),
        ("llama", {"tie_word_embeddings": 1}, "must be true or false. Received: 1"),
        (
            "llama",
            {"vocab_size": "64"},
            "'vocab_size' must be an integer. Received: '64'",
        ),
        ("llama", {"rms_norm_eps": [1e-6]}, r"'rms_norm_eps' must be a number\. R"),
        ("llama", {"hidden_act": ["silu"]}, r"hidden_act must be one of \['silu'\]"),
        ("llama", {"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be finite"),
        ("qwen2", {"layer_types": 3}, "layer_types must all be 'full_attention'"),
    ],
)
def test_config_values_of_the_wrong_json_type_are_refused_by_name(
    tmp_path, architecture, config, message
):
    """config.json comes from elsewhere: a list where a name belongs, a
    string where true or false belongs ("no" is not read as true), give an
    InputError naming the key and the value, and nothing is written."""
    import importlib

    from tfformer import InputError

    module = importlib.import_module(
        f"tests.training.convert.huggingface.test_{architecture}"
    )
    source = module.write_checkpoint(
        tmp_path / "hf", np.random.default_rng(3), config=config
    )
    with pytest.raises(InputError, match=message):
        convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert nothing_written(tmp_path)


def test_named_chat_templates_with_names_that_are_not_strings(tmp_path):
    """tokenizer_config.json's list of named templates: an entry whose name
    is a list (unhashable: a TypeError before) is not a name."""
    from tfformer import InputError
    from tfformer.training.convert.huggingface.chat import template_source

    named = [{"name": ["default"], "template": "x"}, {"name": "tools", "template": "y"}]
    with pytest.raises(InputError, match="needs one named 'default'"):
        template_source(str(tmp_path), {"chat_template": named})
    named.append({"name": "default", "template": "z"})
    assert template_source(str(tmp_path), {"chat_template": named})[0] == "z"


def test_each_architecture_is_one_module_with_its_own_test_file():
    """Every module of the package that declares MODEL_TYPES is found (the
    helper modules are not), and each has its test file here."""
    found = huggingface.architectures()
    modules = {module.__name__.rsplit(".", 1)[-1] for module in found.values()}
    assert {"bert", "vit", "gpt2", "llama"} <= modules
    assert not modules & {"checkpoint", "decoders", "runs", "safetensors"}
    for model_type, module in found.items():
        assert model_type in module.MODEL_TYPES
    here = pathlib.Path(__file__).parent
    for name in modules:
        assert (here / f"test_{name}.py").is_file(), name


def write_package(root, name, modules):
    """A package `name` under `root` (on sys.path) of `modules` {name: code}."""
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for module, code in modules.items():
        (folder / f"{module}.py").write_text(code)
    return folder


ARCHITECTURE = (
    "import os\n\n"
    "MODEL_TYPES = ({types})\n\n\n"
    "def convert(source, config, staging, progress):\n"
    "    {body}\n"
)
RETURN = "return {}"


def test_a_new_module_registers_and_a_broken_one_is_named(tmp_path, monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(tmp_path))
    write_package(
        tmp_path,
        "fresh",
        {
            "toy": ARCHITECTURE.format(types='"toy", "toy2"', body=RETURN),
            "helpers": "SHARED = 1\n",
        },
    )
    fresh = importlib.import_module("fresh")
    found = huggingface.architectures(fresh)
    assert sorted(found) == ["toy", "toy2"]
    assert found["toy"] is sys.modules["fresh.toy"]
    for name, modules, message in (
        (
            "twins",
            {
                "a": ARCHITECTURE.format(types='"toy",', body=RETURN),
                "b": ARCHITECTURE.format(types='"toy",', body=RETURN),
            },
            "model_type 'toy' is claimed by both twins.a and twins.b",
        ),
        (
            "stringy",
            {"a": ARCHITECTURE.format(types='"toy"', body=RETURN)},
            r"stringy.a.MODEL_TYPES must be a tuple of strings. Received: 'toy'",
        ),
        (
            "headless",
            {"a": 'MODEL_TYPES = ("toy",)\n'},
            r"headless.a declares MODEL_TYPES but has no convert",
        ),
    ):
        write_package(tmp_path, name, modules)
        with pytest.raises(TypeError, match=message):
            huggingface.architectures(importlib.import_module(name))


@pytest.mark.parametrize(
    "name, body, message",
    [
        (
            "refusing",
            "open(os.path.join(staging, 'model.keras'), 'w').write('half')\n"
            "    raise ValueError('config.json: the toy refuses')",
            "the toy refuses",
        ),
        ("misconfigured", "return {'task': 'nope'}", "task must be one of"),
    ],
    ids=["refusing", "misconfigured"],
)
def test_a_failing_conversion_leaves_nothing(
    tmp_path, monkeypatch, name, body, message
):
    """Whatever the architecture's module wrote in the staging directory
    goes when it fails, or when the training config it returns does not
    load; the parents made for --out go too."""
    import importlib

    packages = tmp_path / "packages"
    packages.mkdir()
    monkeypatch.syspath_prepend(str(packages))
    write_package(
        packages, name, {"toy": ARCHITECTURE.format(types='"toy",', body=body)}
    )
    toy = huggingface.architectures(importlib.import_module(name))
    monkeypatch.setattr(huggingface, "architectures", lambda: toy)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(json.dumps({"model_type": "toy"}))
    with pytest.raises(ValueError, match=message):
        convert(str(tmp_path / "hf"), str(tmp_path / "a" / "run"), progress=quiet)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "packages"]
