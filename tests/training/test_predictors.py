"""The split between training tasks and predictors: the registries, the
interfaces, and the commands' words for a predictor's errors."""

import json
import os

import pytest

import tfformer
from tfformer.training.commands import train as train_cli
from tfformer.training.predictors import PREDICTOR_TASKS, load, predictor_class
from tfformer.training.predictors.base import Option, Predictor, as_flags
from tfformer.training.tasks import (
    TASK_NAMES,
    TRAINABLE_TASKS,
    check_trainable,
    get_task,
    task_schema,
)
from tfformer.training.tasks.base import TaskSchema, TrainingTask

RUNS = os.path.join(os.path.dirname(__file__), "..", "data", "legacy_runs")


def public_methods(cls):
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    } - {"DataConfig", "ModelConfig"}


def test_the_training_interface_is_what_the_trainer_calls():
    assert public_methods(TaskSchema) == {"validate", "preset", "model_sizes"}
    assert public_methods(TrainingTask) - public_methods(TaskSchema) == {
        "raw_splits",
        "prepare",
        "run_manifest",
        "save_preprocessing",
        "save_heldout",
        "training_stream",
        "evaluation_dataset",
        "build_model",
        "compile_arguments",
        "final_evaluation",
    }
    # Prediction and evaluation are the predictors'.
    assert not {"predict", "evaluate"} & public_methods(TrainingTask)


def test_every_task_has_a_predictor_and_only_trainable_ones_a_training_task():
    assert set(PREDICTOR_TASKS) == set(TASK_NAMES)
    assert set(TRAINABLE_TASKS) == set(TASK_NAMES) - {"sentence_embedding"}
    for name in TASK_NAMES:
        cls = predictor_class(name)
        assert issubclass(cls, Predictor) and cls.task == name
        assert task_schema(name).name == name
    for name in TRAINABLE_TASKS:
        assert isinstance(get_task(name), TrainingTask)
        check_trainable(name)
    schema = task_schema("sentence_embedding")
    assert isinstance(schema, TaskSchema) and not isinstance(schema, TrainingTask)
    with pytest.raises(ValueError, match="made by tfformer-convert"):
        check_trainable("sentence_embedding")
    with pytest.raises(ValueError, match="made by tfformer-convert"):
        get_task("sentence_embedding")
    with pytest.raises(ValueError, match=r"task must be one of .*Received: 'nope'"):
        predictor_class("nope")
    with pytest.raises(ValueError, match=r"task must be one of .*Received: 'nope'"):
        get_task("nope")


def test_train_refuses_a_task_that_cannot_train(tmp_path, capsys):
    config = tmp_path / "embedder.json"
    config.write_text(json.dumps({"task": "sentence_embedding"}))
    assert train_cli.main(["--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "made by tfformer-convert" in err and "model.init_from" in err
    # From Python too, before anything is written.
    from tfformer.training.config import load_config
    from tfformer.training.trainer import train

    out = tmp_path / "run"
    parsed = load_config(str(config), [f"train.output_dir={out}"])
    with pytest.raises(ValueError, match="made by tfformer-convert"):
        train(parsed)
    assert not out.exists()


def test_a_task_loads_its_predictor_and_refuses_another_tasks_run():
    run = os.path.join(RUNS, "causal_lm_run")
    predictor = tfformer.load(run)
    assert type(predictor) is predictor_class("causal_lm")
    assert type(load(run)) is type(predictor)
    with pytest.raises(ValueError, match="holds a 'causal_lm' run, not 'translation'"):
        predictor_class("translation")(run)


def test_errors_name_the_commands_flags():
    options = (
        Option("--max-new-tokens", type=int),
        Option("--top-p", type=float),
        Option("--text", dest="text_path"),
        Option("--pairs", dest="pairs_path"),
        Option("--search"),
    )
    assert options[2].dest == "text_path" and options[0].dest == "max_new_tokens"
    cases = {
        "max_new_tokens must be >= 0. Received: -1": (
            "--max-new-tokens must be >= 0. Received: -1"
        ),
        "top_p must be in (0, 1] or None. Received: top_p=1.5": (
            "--top-p must be in (0, 1] or None. Received: --top-p 1.5"
        ),
        "text_path: File not found": "--text: File not found",
        "give pairs_path=TSV (lines)": "give --pairs TSV (lines)",
        "search must be one of ('greedy',)": "--search must be one of ('greedy',)",
        # Plain words stay words unless they start the message, and a config
        # key is never a flag.
        "the search failed": "the search failed",
        "data.text_path='x': not ids": "data.text_path='x': not ids",
    }
    for message, expected in cases.items():
        assert as_flags(message, options) == expected
