import glob
import json
import os
import types

import keras
import pytest

from tests.testing import transformer_blocks
from tfformer.training.commands.train import main
from tfformer.training.config import Config, config_from_dict, load_config

CONFIGS = sorted(glob.glob(os.path.join("training", "configs", "*.*")))


def test_defaults_are_the_embedded_task():
    config = load_config()
    assert isinstance(config, Config)
    assert config.task == "translation"
    assert config.data.corpus == "number_words"


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert config.train.output_dir.startswith("runs/")


def test_all_four_families_of_configs_ship():
    names = {os.path.splitext(os.path.basename(p))[0] for p in CONFIGS}
    assert names >= {
        "number_words",
        "translate_de_en",
        "shakespeare_gpt",
        "polarity_bert",
    }


def test_yaml_and_json_give_the_same_config(tmp_path):
    values = {
        "train": {"epochs": 3, "precision": "mixed_bfloat16"},
        "data": {"seed": 7},
    }
    (tmp_path / "c.json").write_text(json.dumps(values))
    (tmp_path / "c.yaml").write_text(
        "train:\n  epochs: 3\n  precision: mixed_bfloat16\ndata:\n  seed: 7\n"
    )
    assert load_config(str(tmp_path / "c.json")) == load_config(
        str(tmp_path / "c.yaml")
    )


def test_overrides_are_typed():
    config = load_config(
        overrides=[
            "train.epochs=3",
            "train.learning_rate_scale=2",
            "data.bucket_lengths=[16,32,64]",
            "data.max_length=64",
            "train.jit_compile=true",
            "data.lower_case=true",
            # Unquoted words in brackets, as a shell passes them: a list.
            'model.lora_targets=[query, "value",output]',
        ]
    )
    assert config.model.lora_targets == ("query", "value", "output")
    assert config.train.epochs == 3
    assert config.train.learning_rate_scale == 2.0
    assert config.data.bucket_lengths == (16, 32, 64)
    assert config.train.jit_compile == "true"
    assert config.data.lower_case is True


def test_activation_dropout_reaches_the_models_blocks():
    """`model.activation_dropout` is the FFNs' hidden rate of the task's
    model; unset, the preset's `dropout`."""
    from tfformer.training.tasks import get_task

    task = get_task("translation")
    vocabulary = types.SimpleNamespace(vocabulary_size=40)
    data = types.SimpleNamespace(
        tokenizers={"source": vocabulary, "target": vocabulary}
    )
    for overrides, want in ((["model.activation_dropout=0.0"], 0.0), ([], 0.1)):
        config = load_config(overrides=["model.dropout=0.1", *overrides])
        model = task.build_model(config, data)
        blocks = transformer_blocks(model)
        assert blocks and {block.ffn.dropout for block in blocks} == {want}


@pytest.mark.parametrize(
    "values, error, message",
    [
        ({"train": {"epoch": 3}}, ValueError, r"train\.epoch"),
        ({"trian": {}}, ValueError, r"Unknown config section.*trian"),
        (
            {"train": {"epochs": "three"}},
            TypeError,
            r"train\.epochs must be an int.*three",
        ),
        ({"train": {"epochs": 0}}, ValueError, r"train\.epochs must be positive"),
        (
            {"train": {"strategy": "horovod"}},
            ValueError,
            r"train\.strategy must be one of",
        ),
        ({"train": {"precision": "float64"}}, ValueError, r"train\.precision"),
        ({"train": {"label_smoothing": 1.5}}, ValueError, r"train\.label_smoothing"),
        ({"train": {"ema_momentum": 1.0}}, ValueError, r"train\.ema_momentum.*1\.0"),
        ({"model": {"position": "rotary"}}, ValueError, r"model\.position.*rotary"),
        (
            {"model": {"activation_dropout": 1.0}},
            ValueError,
            r"model\.activation_dropout must be in \[0, 1\).*1\.0",
        ),
        ({"model": {"dropout": -0.1}}, ValueError, r"model\.dropout must be in"),
        (
            {"model": {"activation": "swishy"}},
            ValueError,
            r"model\.activation must be a Keras activation name.*swishy",
        ),
        (
            {
                "task": "image_classification",
                "data": {"image_dir": "x"},
                "model": {"activation_dropout": 2.0},
            },
            ValueError,
            r"model\.activation_dropout must be in",
        ),
        ({"model": {"scale_embeddings": 1}}, TypeError, r"model\.scale_embeddings"),
        (
            # Only the translation task's model section has position options.
            {
                "task": "causal_lm",
                "model": {"preset": "gpt_tiny", "position": "learned"},
                "data": {"text_path": "x"},
            },
            ValueError,
            r"Unknown config key.*model\.position",
        ),
        ({"task": "summarize"}, ValueError, r"task must be one of.*summarize"),
        ({"data": {"bucket_lengths": [32, 16]}}, ValueError, r"data\.bucket_lengths"),
        (
            {"data": {"corpus": "parallel_text"}},
            ValueError,
            r"needs data\.source_path",
        ),
        (
            {
                "task": "causal_lm",
                "model": {"preset": "transformer_tiny"},
                "data": {"text_path": "x"},
            },
            ValueError,
            r"task 'causal_lm' needs a GPTBackbone preset.*transformer_tiny",
        ),
        (
            {"train": {"time_budget_minutes": -1}},
            ValueError,
            r"train\.time_budget_minutes must be positive",
        ),
        (
            {"train": {"time_budget_minutes": 5, "strategy": "multi_worker"}},
            ValueError,
            r"time_budget_minutes is not supported",
        ),
        ({"train": {"batch_tokens": 0}}, ValueError, r"train\.batch_tokens must be"),
        (
            {
                "task": "image_classification",
                "data": {"image_dir": "x"},
                "train": {"batch_tokens": 4096},
            },
            ValueError,
            r"train\.batch_tokens batches sequences by length.*4096",
        ),
        (
            {"data": {"lower_case": "maybe"}},
            TypeError,
            r"data\.lower_case must be true or false",
        ),
        ({"train": {"seed": -1}}, ValueError, r"train\.seed must be in \[0, 2\*\*32\)"),
        ({"data": {"seed": 2**32}}, ValueError, r"data\.seed must be in .* 4294967296"),
    ],
)
def test_bad_configs_are_rejected_by_name(values, error, message):
    with pytest.raises(error, match=message):
        config_from_dict(values)


def test_cli_reports_config_errors_without_a_traceback(capsys, tmp_path):
    assert main(["--set", "train.nope=1"]) == 2
    assert "train.nope" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.json")]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert main(["--set", "oops"]) == 2
    capsys.readouterr()
    # A file that is not UTF-8 text, or not YAML: one line naming it.
    (tmp_path / "latin1.json").write_bytes(b'{"task": "caf\xe9"}')
    (tmp_path / "bad.yaml").write_bytes(b"a: [1")
    # A section that YAML reads as null, and a date where a path belongs.
    (tmp_path / "null.yaml").write_text("train:\n  # epochs: 3\n")
    (tmp_path / "date.yaml").write_text("train:\n  output_dir: 2024-05-01\n")
    assert (
        main(["--config", str(tmp_path / "null.yaml"), "--set", "train.epochs=3"]) == 2
    )
    assert "train must be a mapping of settings" in capsys.readouterr().err
    for name in ("latin1.json", "bad.yaml", "date.yaml"):
        assert main(["--config", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert name in err and len(err.strip().splitlines()) == 1, err
    assert main(["--print-config", "--set", "train.epochs=2"]) == 0
    assert json.loads(capsys.readouterr().out)["train"]["epochs"] == 2


def test_package_exposes_the_entry_functions():
    import tfformer.training as training

    assert callable(training.train)
    assert callable(training.build_dataset)
    assert callable(training.build_model)
    assert training.load_config().train.batch_size > 0
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        training.nope  # noqa: B018


def test_activation_reaches_the_models_blocks():
    """`model.activation` is the FFNs' activation of the task's model (here
    GPT-2's tanh GELU on the causal LM); unset, the builder's exact GELU."""
    from tfformer.layers.feed_forward import gelu_approximate
    from tfformer.training.tasks import get_task

    task = get_task("causal_lm")
    vocabulary = types.SimpleNamespace(vocabulary_size=40)
    data = types.SimpleNamespace(tokenizers={"text": vocabulary})
    base = ["task=causal_lm", "data.text_path=x", "model.preset=gpt_tiny"]
    for overrides, want in (
        (["model.activation=gelu_approximate"], gelu_approximate),
        ([], keras.activations.gelu),
    ):
        config = load_config(overrides=[*base, *overrides])
        model = task.build_model(config, data)
        blocks = transformer_blocks(model)
        assert blocks and {block.ffn.activation for block in blocks} == {want}


def test_an_initial_runs_activation_compares_as_a_function():
    """A registered activation (gelu_approximate) serializes to a dict in a
    block's config; the init_from checks compare what it names."""
    from tfformer.layers.feed_forward import gelu_approximate
    from tfformer.training.tasks.base import same_model_setting

    theirs = keras.activations.serialize(gelu_approximate)
    assert isinstance(theirs, dict)
    assert same_model_setting("activation", "gelu_approximate", theirs)
    assert not same_model_setting("activation", "gelu", theirs)
    assert same_model_setting("activation", "gelu", "gelu")
    assert not same_model_setting("num_layers", 2, 3)
