"""`task=image_classification` through `train`, `tfformer-evaluate` (scores,
confusion matrix, attention rollout) and `tfformer-predict`."""

import json
import os

import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import norm_weights, reference_attention
from tests.tfformer.layers.test_transformer_encoder_block import (
    reference_encoder_block,
)
from tests.training.test_image_data import write_image
from tests.training.tiny import NO_XLA
from tfformer.models import vit
from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import predict as predict_cli
from tfformer.training.config import load_config
from tfformer.training.evaluation.attention_rollout import (
    attention_rollout,
    rollout,
    vit_attention,
)
from tfformer.training.predictors.image_classification import spread_over_classes
from tfformer.training.tasks import get_task
from tfformer.training.tasks.image_classification import (
    initialized_vit,
    resized_positions,
)
from tfformer.training.trainer import train

COLOURS = ("blue", "green", "red")
# Two epochs of 10 steps, enough for the colours (the `trained` fixture
# takes 3).
TINY_TRAINING = [
    "train.batch_size=16",
    "train.epochs=2",
    "train.steps_per_epoch=10",
    "train.optimizer=adamw",
    "train.schedule=cosine",
    "train.learning_rate=0.003",
    "train.warmup_steps=5",
    "train.verbose=0",
    NO_XLA,
]


def colour_images(root, rng):
    """Noisy images whose strongest channel is the class; random sizes and
    both PNG and JPEG, so decoding and resizing are part of the test."""
    for split, count in (("train", 60), ("test", 10)):
        for name in COLOURS:
            channel = {"red": 0, "green": 1, "blue": 2}[name]
            for i in range(count):
                size = int(rng.integers(10, 30))
                pixels = rng.integers(0, 110, (size, size, 3))
                pixels[..., channel] += 130
                write_image(
                    root / f"{split}/{name}/{i}.{'png' if i % 2 else 'jpg'}", pixels
                )


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    colour_images(root / "data", np.random.default_rng(0))
    config = load_config(
        overrides=[
            "task=image_classification",
            f"data.image_dir={root / 'data'}",
            "data.image_size=16",
            "data.cutmix_alpha=1.0",
            "data.mixup_alpha=0.2",
            "model.patch_size=4",
            "model.num_layers=2",
            "model.hidden_dim=32",
            "model.num_heads=2",
            "model.intermediate_dim=64",
            "model.dropout=0.0",
            "train.batch_size=16",
            "train.epochs=3",
            "train.steps_per_epoch=10",
            "train.optimizer=adamw",
            "train.schedule=cosine",
            "train.learning_rate=0.003",
            "train.warmup_steps=5",
            "train.verbose=0",
            NO_XLA,
            f"train.output_dir={root / 'run'}",
        ]
    )
    result = train(config, progress=lambda *_: None)
    return root, result


def test_training_learns_the_colours(trained):
    root, result = trained
    # Chance is 1/3; the class is the strongest channel.
    assert result.metrics["test_accuracy"] > 0.9
    manifest = json.loads((root / "run/run.json").read_text())
    assert manifest["task"] == "image_classification"
    settings = manifest["settings"]
    assert settings["image_size"] == 16 and settings["labels"] == list(COLOURS)
    assert len(settings["test_split_fingerprint"]) == 16
    # The model normalizes raw pixels with the training images' statistics.
    norm = result.model.backbone.pixel_normalization
    pixels = result.data.examples["train"].features["images"].reshape(-1, 3)
    np.testing.assert_allclose(np.ravel(norm.mean), pixels.mean(0), rtol=1e-5)
    np.testing.assert_allclose(np.ravel(norm.variance), pixels.var(0), rtol=1e-4)


def test_evaluate_scores_confusion_and_rollout(trained, capsys):
    root, result = trained
    run = str(root / "run")
    plot = root / "rollout.png"
    code = evaluate_cli.main(
        ["--checkpoint", run, "--attention-plot", str(plot), "--attention-images", "4"]
    )
    assert code == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["examples"] == 30
    assert scores["accuracy"] == pytest.approx(result.metrics["test_accuracy"])
    matrix = np.array(scores["confusion_matrix"])
    assert matrix.sum() == 30 and (matrix.sum(1) == 10).all()
    for i, name in enumerate(COLOURS):
        assert scores["class_accuracy"][name] == pytest.approx(matrix[i, i] / 10)
    for path in (scores["confusion_plot"], scores["attention_plot"]):
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.dirname(scores["confusion_plot"]) == run


def test_predict_prints_the_top_classes(trained, capsys):
    root, _ = trained
    red, blue = root / "data/test/red/0.jpg", root / "data/test/blue/1.png"
    code = predict_cli.main(
        ["--checkpoint", str(root / "run"), "--top", "2", str(red), str(blue)]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert [line.split("\t")[0] for line in lines] == [str(red), str(blue)]
    assert [line.split("\t")[1].split()[0] for line in lines] == ["red", "blue"]
    for line in lines:
        probabilities = [float(p.split()[1]) for p in line.split("\t")[1:]]
        assert len(probabilities) == 2 and probabilities[0] >= probabilities[1]


def test_predict_opens_images_whose_names_are_not_utf8(trained, capsys, monkeypatch):
    """A file name that is not UTF-8, as an argument or a line of stdin,
    opens (its bytes are kept) and is printed with U+FFFD."""
    import io
    import shutil
    import types

    root, _ = trained
    name = os.path.join(os.fsencode(str(root)), b"red-\xff.jpg")
    shutil.copy(root / "data/test/red/0.jpg", name)
    shown = str(root / "red-\ufffd.jpg")
    run = str(root / "run")
    assert predict_cli.main(["--checkpoint", run, os.fsdecode(name)]) == 0
    stdin = types.SimpleNamespace(buffer=io.BytesIO(name + b"\n"))
    monkeypatch.setattr("sys.stdin", stdin)
    assert predict_cli.main(["--checkpoint", run]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert [line.split("\t")[0] for line in lines] == [shown, shown]
    assert [line.split("\t")[1].split()[0] for line in lines] == ["red", "red"]


@pytest.mark.parametrize(
    "content, message",
    [(None, "No such image file"), (b"\xff\xd8\xff not a jpeg", "not an image")],
)
def test_predict_refuses_bad_files_naming_them(trained, capsys, content, message):
    root, _ = trained
    path = root / f"bad-{content is None}.jpg"
    if content is not None:
        path.write_bytes(content)
    code = predict_cli.main(["--checkpoint", str(root / "run"), str(path)])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and path.name in err


def test_attention_scores_of_a_block_match_numpy():
    model = vit(
        8,
        3,
        patch_size=4,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
    )
    images = np.random.default_rng(1).normal(size=(2, 8, 8, 3)).astype("float32")
    tokens = np.asarray(model.backbone.patch_embedding(images))
    block = model.backbone.encoder_blocks[0]
    (weights,), _ = vit_attention(model, images)
    np.testing.assert_allclose(
        np.asarray(block(tokens)),
        np.asarray(block(tokens, return_attention_scores=True)[0]),
        atol=1e-6,
    )
    for b in range(2):
        normed = ref.layer_norm(tokens[b], *norm_weights(block.self_attention_norm))
        want = reference_attention(block.self_attention, normed[None], normed[None])[1]
        np.testing.assert_allclose(weights[b], np.squeeze(want), atol=1e-5)


def numpy_rollout(model, images):
    """(rollout R, the last block's output) of a ViT's blocks and attention
    computed in NumPy from its tokens."""
    x = np.asarray(model.backbone.image_tokenizer(images))
    batch, tokens = x.shape[:2]
    everywhere = np.ones((batch, tokens), bool)
    result = np.broadcast_to(np.eye(tokens), (batch, tokens, tokens))
    for block in model.backbone.encoder_blocks:
        normed = ref.layer_norm(x, *norm_weights(block.self_attention_norm))
        weights = reference_attention(block.self_attention, normed, normed)[1]
        mixed = 0.5 * weights.mean(1) + 0.5 * np.eye(tokens)
        result = (mixed / mixed.sum(-1, keepdims=True)) @ result
        x = reference_encoder_block(block, x, everywhere)
    return result, x


def test_rollout_against_hand_computed_products():
    eye = np.eye(3)
    first = np.array([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6]])
    second = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    # Two heads averaging to `first`, one head equal to `second`.
    layers = [
        np.stack(
            [first + 0.1 * (eye - eye.mean(1)), first - 0.1 * (eye - eye.mean(1))]
        )[None],
        second[None, None],
    ]
    want = (0.5 * second + 0.5 * eye) @ (0.5 * first + 0.5 * eye)
    np.testing.assert_allclose(rollout(layers)[0], want, atol=1e-12)
    # A 2-layer ViT, its blocks and attention computed in NumPy.
    model = vit(
        8,
        3,
        patch_size=4,
        num_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
    )
    images = np.random.default_rng(2).normal(size=(3, 8, 8, 3)).astype("float32")
    maps = attention_rollout(model, images)
    assert maps.shape == (3, 2, 2)
    result, _ = numpy_rollout(model, images)
    want = result[:, 0, 1:] / result[:, 0, 1:].sum(-1, keepdims=True)
    # Patch order: row-major over the 2 x 2 grid.
    np.testing.assert_allclose(maps.reshape(3, 4), want, atol=1e-5)


def test_rollout_of_a_cct_weighs_the_rows_by_the_pooling_weights():
    """Without a class token the map is w^T R: the rollout's rows weighed by
    the attention pooling's softmax over the final (normalized) tokens, all
    computed in NumPy from the model's weights."""
    model = vit(
        8,
        3,
        tokenizer="convolution",
        tokenizer_layers=1,
        tokenizer_channels=4,
        num_layers=2,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
    )
    images = np.random.default_rng(3).normal(size=(3, 8, 8, 3)).astype("float32")
    maps = attention_rollout(model, images)
    assert maps.shape == (3, 4, 4)
    result, x = numpy_rollout(model, images)
    x = ref.layer_norm(x, *norm_weights(model.backbone.encoder_norm))
    score = model.pooling_layer.score
    scores = x @ np.asarray(score.kernel)[:, 0] + np.asarray(score.bias)[0]
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    want = np.einsum("bt,bts->bs", w, result)
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(maps.reshape(3, 16), want, atol=1e-5)
    # The weights matter: uniform rows give another map.
    uniform = result.mean(1) / result.mean(1).sum(-1, keepdims=True)
    assert not np.allclose(want, uniform, atol=1e-4)


def test_the_plotted_images_take_the_classes_in_turn():
    truth = np.array([2, 2, 0, 2, 1, 0])
    assert spread_over_classes(truth, 5).tolist() == [2, 4, 0, 5, 1]
    assert spread_over_classes(truth, 10).tolist() == [2, 4, 0, 5, 1, 3]


def test_evaluate_refuses_a_changed_test_folder(trained, capsys):
    root, _ = trained
    extra = root / "data/test/red/added.png"
    write_image(extra, np.zeros((4, 4, 3)))
    try:
        code = evaluate_cli.main(["--checkpoint", str(root / "run")])
        assert code == 2
        assert "changed since" in capsys.readouterr().err
    finally:
        extra.unlink()
    assert evaluate_cli.main(["--checkpoint", str(root / "run"), "--limit", "3"]) == 0


@pytest.fixture(scope="module")
def trained_cct(tmp_path_factory):
    """A CCT (convolution tokenizer, attention pooling) on the colours."""
    root = tmp_path_factory.mktemp("cct")
    colour_images(root / "data", np.random.default_rng(4))
    config = load_config(
        overrides=[
            "task=image_classification",
            f"data.image_dir={root / 'data'}",
            "data.image_size=16",
            "model.preset=cct_4_3x2",
            "model.tokenizer_channels=8",
            "model.num_layers=1",
            "model.hidden_dim=16",
            "model.intermediate_dim=16",
            *TINY_TRAINING,
            f"train.output_dir={root / 'run'}",
        ]
    )
    return root, train(config, progress=lambda *_: None)


def test_a_cct_learns_the_colours_and_draws_its_rollout(trained_cct, capsys):
    root, result = trained_cct
    assert result.metrics["test_accuracy"] > 0.9
    backbone = result.model.backbone
    assert backbone.tokenizer == "convolution" and backbone.token_stride == 4
    assert result.model.pooling == "attention"
    plot = root / "rollout.png"
    code = evaluate_cli.main(
        ["--checkpoint", str(root / "run"), "--attention-plot", str(plot)]
    )
    assert code == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["accuracy"] == pytest.approx(result.metrics["test_accuracy"])
    assert open(scores["attention_plot"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_cct_run_starts_another_at_a_larger_image_size(trained_cct):
    """`model.init_from` a CCT: every weight but the head is the source's,
    the position table (no class token) resized bicubically 4x4 -> 8x8."""
    root, result = trained_cct
    config = load_config(
        overrides=[
            "task=image_classification",
            f"data.image_dir={root / 'data'}",
            "data.image_size=32",
            f"model.init_from={root / 'run'}",
            f"train.output_dir={root / 'larger'}",
        ]
    )
    model = initialized_vit(config, 3)
    mine, their = model.backbone, result.model.backbone
    assert mine.tokenizer == "convolution" and model.pooling == "attention"
    for layer, theirs in (
        (model.pooling_layer, result.model.pooling_layer),
        (mine.encoder_norm, their.encoder_norm),
        *zip(mine.encoder_blocks, their.encoder_blocks, strict=True),
        *zip(
            mine.image_tokenizer.convolutions,
            their.image_tokenizer.convolutions,
            strict=True,
        ),
    ):
        for a, b in zip(layer.get_weights(), theirs.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    # The class-token form (checked against Hugging Face's in
    # convert/huggingface/test_vit.py) with a row put in front and dropped.
    table = np.asarray(their.image_tokenizer.position_embeddings)
    padded = np.concatenate([np.zeros_like(table[:, :1]), table], axis=1)
    np.testing.assert_allclose(
        mine.image_tokenizer.position_embeddings,
        resized_positions(padded, 4, 8)[:, 1:],
        rtol=1e-6,
    )
    assert model(np.zeros((1, 32, 32, 3), "float32")).shape == (1, 3)
    bad = load_config(
        overrides=[
            "task=image_classification",
            f"data.image_dir={root / 'data'}",
            "data.image_size=18",
            f"model.init_from={root / 'run'}",
        ]
    )
    with pytest.raises(ValueError, match="tokens are 4 pixels apart"):
        initialized_vit(bad, 3)


def test_tokenizer_keys_are_checked():
    def sizes(*overrides):
        config = load_config(overrides=["task=image_classification", *overrides])
        task = get_task("image_classification")
        return task.model_sizes(config.model)

    assert sizes("model.preset=cct_4_3x2")["tokenizer"] == "convolution"
    patch = sizes(
        "model.preset=cct_4_3x2", "model.tokenizer=patch", "model.patch_size=4"
    )
    assert patch["tokenizer"] == "patch" and patch["patch_size"] == 4
    for overrides, message in (
        (["model.tokenizer=conv"], "model.tokenizer must be one of"),
        (["model.preset=cct_4_3x2", "model.patch_size=4"], "model.patch_size applies"),
        (
            ["model.preset=cct_4_3x2", "model.pooling=class_token"],
            "needs model.tokenizer=patch",
        ),
        (["model.pooling=mean"], "model.pooling must be one of"),
        (["model.tokenizer_layers=0"], "model.tokenizer_layers"),
    ):
        with pytest.raises(ValueError, match=message):
            sizes(*overrides)
