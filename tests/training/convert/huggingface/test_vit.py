"""`tfformer-convert` on small random ViT image classifiers in the Hugging
Face layout (`ViTForImageClassification`'s tensor names and shapes),
checked against keras-hub's `ViTImageClassifier` reading the same
directory; the converted run predicted, fine-tuned at another image size
and refused when the checkpoint is not one tfformer reproduces."""

import json
import os

import keras
import numpy as np
import pytest

import tfformer
from tests import numpy_reference as ref
from tests.testing import transformer_blocks
from tests.training.convert.huggingface.testing import assert_refused, changed, quiet
from tests.training.test_image_classification import COLOURS, colour_images
from tests.training.test_image_data import write_image
from tests.training.tiny import NO_XLA
from tfformer.training.commands import predict as predict_cli
from tfformer.training.config import load_config
from tfformer.training.convert import convert
from tfformer.training.tasks.image_classification import (
    cubic_resize_matrix,
    initialized_vit,
    resized_positions,
)
from tfformer.training.trainer import train

safetensors_numpy = pytest.importorskip("safetensors.numpy")

SIZES = {"hidden": 16, "heads": 2, "layers": 2, "inner": 24, "patch": 4, "image": 8}
LABELS = ["cat", "dog", "bird"]
# ImageNet's statistics (not the ViT defaults), so the test sees them used.
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def vit_tensors(rng, *, qkv_bias=True, classes=3):
    s = SIZES
    d, inner, p = s["hidden"], s["inner"], s["patch"]

    def normal(*shape, scale=0.3):
        return (scale * rng.normal(size=shape)).astype("float32")

    t = {
        "embeddings.cls_token": normal(1, 1, d),
        "embeddings.position_embeddings": normal(1, (s["image"] // p) ** 2 + 1, d),
        "embeddings.patch_embeddings.projection.weight": normal(d, 3, p, p, scale=0.1),
        "embeddings.patch_embeddings.projection.bias": normal(d),
        "layernorm.weight": 1 + normal(d, scale=0.1),
        "layernorm.bias": normal(d, scale=0.1),
    }
    for i in range(s["layers"]):
        layer = f"encoder.layer.{i}"
        for part in ("query", "key", "value"):
            t[f"{layer}.attention.attention.{part}.weight"] = normal(d, d)
            if qkv_bias:
                t[f"{layer}.attention.attention.{part}.bias"] = normal(d)
        t[f"{layer}.attention.output.dense.weight"] = normal(d, d)
        t[f"{layer}.attention.output.dense.bias"] = normal(d)
        t[f"{layer}.intermediate.dense.weight"] = normal(inner, d)
        t[f"{layer}.intermediate.dense.bias"] = normal(inner)
        t[f"{layer}.output.dense.weight"] = normal(d, inner)
        t[f"{layer}.output.dense.bias"] = normal(d)
        for norm in ("layernorm_before", "layernorm_after"):
            t[f"{layer}.{norm}.weight"] = 1 + normal(d, scale=0.1)
            t[f"{layer}.{norm}.bias"] = normal(d, scale=0.1)
    t = {"vit." + k: v for k, v in t.items()}
    t["classifier.weight"] = normal(classes, d)
    t["classifier.bias"] = normal(classes)
    return t


def write_checkpoint(
    path, rng, *, tensors=None, config=None, preprocessor=None, labels=LABELS
):
    """A ViTForImageClassification checkpoint as `save_pretrained` writes it,
    with its image processor's preprocessor_config.json."""
    os.makedirs(path, exist_ok=True)
    s = SIZES
    cfg = {
        "architectures": ["ViTForImageClassification"],
        "model_type": "vit",
        "hidden_size": s["hidden"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "intermediate_size": s["inner"],
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        # keras-hub's ViT has a fixed 1e-6 (Hugging Face's default is 1e-12).
        "layer_norm_eps": 1e-6,
        "image_size": s["image"],
        "patch_size": s["patch"],
        "num_channels": 3,
        "qkv_bias": True,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        **(config or {}),
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    processor = {
        "image_processor_type": "ViTImageProcessor",
        "do_resize": True,
        "size": {"height": s["image"], "width": s["image"]},
        "resample": 2,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": MEAN,
        "image_std": STD,
        **(preprocessor or {}),
    }
    with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
        json.dump(processor, f)
    safetensors_numpy.save_file(
        tensors if tensors is not None else vit_tensors(rng),
        os.path.join(path, "model.safetensors"),
        metadata={"format": "pt"},
    )
    return path


def hugging_face_pixels(pixels):
    """What ViTImageProcessor feeds the model: x / 255, then per channel
    (x - mean) / std."""
    return ((pixels / 255.0 - np.array(MEAN)) / np.array(STD)).astype("float32")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("convert_vit")
    colour_images(root / "data", np.random.default_rng(5))
    source = write_checkpoint(root / "hf", np.random.default_rng(0))
    run = convert(str(source), str(root / "run"), progress=quiet)
    return root, source, run


def test_logits_and_hidden_states_equal_keras_hub(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    rng = np.random.default_rng(1)
    source = write_checkpoint(tmp_path / "hf", rng)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run).model
    reference = keras_hub.models.ViTImageClassifier.from_preset(str(source))
    pixels = rng.integers(0, 256, (5, 8, 8, 3)).astype("float32")
    # tfformer's model takes raw pixels and normalizes them itself.
    np.testing.assert_allclose(
        model(pixels), reference(hugging_face_pixels(pixels)), atol=1e-5
    )
    np.testing.assert_allclose(
        model.backbone(pixels),
        reference.backbone(hugging_face_pixels(pixels)),
        atol=1e-5,
    )


def numpy_vit(t, images, epsilon=1e-6):
    """Hugging Face's ViTForImageClassification forward in NumPy, read
    straight from its tensors (torch Linear: y = x W^T + b; the patch
    convolution over channel-first patches). A missing q/k/v bias is 0."""
    s = SIZES
    p, d = s["patch"], s["hidden"]
    g = s["image"] // p

    def w(name):
        return t["vit." + name].astype("float64")

    def bias(name):
        return w(name) if "vit." + name in t else 0.0

    kernel = w("embeddings.patch_embeddings.projection.weight").reshape(d, -1)
    logits = []
    for image in images.astype("float64"):
        patches = [
            image[r * p : (r + 1) * p, c * p : (c + 1) * p].transpose(2, 0, 1).ravel()
            for r in range(g)
            for c in range(g)
        ]
        x = np.stack(patches) @ kernel.T + w(
            "embeddings.patch_embeddings.projection.bias"
        )
        x = np.concatenate([w("embeddings.cls_token")[0], x])
        x = x + w("embeddings.position_embeddings")[0]
        for i in range(s["layers"]):
            L = f"encoder.layer.{i}"

            def norm(name, x=None):
                return ref.layer_norm(
                    x, w(f"{name}.weight"), w(f"{name}.bias"), epsilon
                )

            h = norm(f"{L}.layernorm_before", x)
            a = f"{L}.attention.attention"
            out, _ = ref.multi_head_attention(
                h,
                h,
                w(f"{a}.query.weight").T,
                bias(f"{a}.query.bias"),
                w(f"{a}.key.weight").T,
                bias(f"{a}.key.bias"),
                w(f"{a}.value.weight").T,
                bias(f"{a}.value.bias"),
                w(f"{L}.attention.output.dense.weight").T,
                w(f"{L}.attention.output.dense.bias"),
                s["heads"],
            )
            x = x + out
            h = norm(f"{L}.layernorm_after", x)
            x = x + ref.feed_forward(
                h,
                w(f"{L}.intermediate.dense.weight").T,
                w(f"{L}.intermediate.dense.bias"),
                w(f"{L}.output.dense.weight").T,
                w(f"{L}.output.dense.bias"),
                ref.gelu,
            )
        x = ref.layer_norm(x, w("layernorm.weight"), w("layernorm.bias"), epsilon)
        logits.append(x[0] @ t["classifier.weight"].T + t["classifier.bias"])
    return np.stack(logits)


@pytest.mark.parametrize("qkv_bias", [True, False])
def test_logits_equal_a_numpy_forward_of_the_tensors(tmp_path, qkv_bias):
    """keras-hub's converter reads q/k/v biases unconditionally, so it cannot
    load qkv_bias=false checkpoints (Hugging Face writes none then): the
    reference here is the checkpoint's own arithmetic in NumPy."""
    rng = np.random.default_rng(8)
    tensors = vit_tensors(rng, qkv_bias=qkv_bias)
    source = write_checkpoint(
        tmp_path / "hf", rng, tensors=tensors, config={"qkv_bias": qkv_bias}
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run).model
    pixels = rng.integers(0, 256, (3, 8, 8, 3)).astype("float32")
    np.testing.assert_allclose(
        model(pixels), numpy_vit(tensors, hugging_face_pixels(pixels)), atol=1e-5
    )


def test_the_run_keeps_the_checkpoints_settings(converted):
    _, _, run = converted
    with open(os.path.join(run, "run.json")) as f:
        manifest = json.load(f)
    assert manifest["task"] == "image_classification"
    assert manifest["settings"] == {"image_size": 8, "labels": LABELS}
    model = tfformer.load(run).model
    norm = model.backbone.pixel_normalization
    np.testing.assert_allclose(np.ravel(norm.mean), 255 * np.array(MEAN), rtol=1e-6)
    np.testing.assert_allclose(
        np.ravel(norm.variance), (255 * np.array(STD)) ** 2, rtol=1e-6
    )
    assert model.backbone.encoder_norm.epsilon == 1e-6


def test_hugging_face_defaults_and_repeated_labels(tmp_path):
    """Without a preprocessor_config.json: ViTImageProcessor's defaults (x /
    127.5 - 1); ImageNet repeats names ("crane"): the later ones get ids."""
    rng = np.random.default_rng(2)
    source = write_checkpoint(
        tmp_path / "hf",
        rng,
        tensors=vit_tensors(rng, classes=4),
        config={"layer_norm_eps": 1e-12},
        labels=["crane", "dog", "crane", "cat"],
    )
    os.remove(source / "preprocessor_config.json")
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    loaded = tfformer.load(run)
    assert loaded.directory.manifest.labels == ("crane", "dog", "crane (2)", "cat")
    assert any("crane (2)" in line for line in said)
    norm = loaded.model.backbone.pixel_normalization
    np.testing.assert_allclose(np.ravel(norm.mean), [127.5] * 3)
    np.testing.assert_allclose(np.ravel(norm.variance), [127.5**2] * 3)
    assert loaded.model.backbone.encoder_norm.epsilon == 1e-12


def test_predict_reads_image_files(converted, capsys):
    keras_hub = pytest.importorskip("keras_hub")
    root, source, run = converted
    rng = np.random.default_rng(3)
    files = []
    for i in range(2):
        files.append(str(root / f"photo{i}.png"))
        write_image(root / f"photo{i}.png", rng.integers(0, 256, (8, 8, 3)))
    assert predict_cli.main(["--checkpoint", run, "--top", "3", *files]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    reference = keras_hub.models.ViTImageClassifier.from_preset(str(source))
    for path, line in zip(files, lines, strict=True):
        pixels = keras.utils.img_to_array(keras.utils.load_img(path))[None]
        expected = keras.ops.convert_to_numpy(
            keras.ops.softmax(reference(hugging_face_pixels(pixels)))
        )[0]
        fields = line.split("\t")
        assert fields[0] == path
        got = {f.rsplit(" ", 1)[0]: float(f.rsplit(" ", 1)[1]) for f in fields[1:]}
        assert got == pytest.approx(dict(zip(LABELS, expected, strict=True)), abs=1e-4)


# -- fine-tuning from it -------------------------------------------------------


def test_bicubic_resizing_is_pytorchs():
    """Hand-computed: PyTorch's bicubic (a = -0.75, align_corners=False) of
    the line [0, 1] to 4 points is [-0.10546875, 0.2265625, 0.7734375,
    1.10546875] (the kernel at t = 0.75 and 0.25, borders clamped)."""
    weights = cubic_resize_matrix(2, 4)
    np.testing.assert_allclose(
        weights @ np.array([0.0, 1.0]),
        [-0.10546875, 0.2265625, 0.7734375, 1.10546875],
        atol=1e-12,
    )
    # Down: [0, 1, 2] to 2 points, t = 0.25 and 0.75 over clamped borders:
    # 0.26171875 - 2 * 0.03515625 and 0.26171875 + 2 * (0.87890625 - 0.10546875).
    np.testing.assert_allclose(
        cubic_resize_matrix(3, 2) @ np.array([0.0, 1.0, 2.0]),
        [0.19140625, 1.80859375],
        atol=1e-12,
    )
    np.testing.assert_allclose(cubic_resize_matrix(5, 5), np.eye(5), atol=1e-12)
    np.testing.assert_allclose(cubic_resize_matrix(7, 3).sum(1), 1.0, atol=1e-12)
    table = np.random.default_rng(4).normal(size=(1, 1 + 9, 5)).astype("float32")
    resized = resized_positions(table, 3, 4)
    assert resized.shape == (1, 17, 5)
    np.testing.assert_array_equal(resized[:, 0], table[:, 0])
    # Separable: each channel is W @ grid @ W.T.
    w = cubic_resize_matrix(3, 4)
    for c in range(5):
        grid = table[0, 1:, c].reshape(3, 3)
        np.testing.assert_allclose(
            resized[0, 1:, c].reshape(4, 4), w @ grid @ w.T, rtol=1e-5, atol=1e-6
        )


def finetune_config(root, run, *extra, out="finetuned"):
    return load_config(
        overrides=[
            "task=image_classification",
            f"data.image_dir={root / 'data'}",
            f"model.init_from={run}",
            "model.dropout=0.0",
            "train.batch_size=16",
            "train.epochs=2",
            "train.steps_per_epoch=10",
            "train.optimizer=adamw",
            "train.schedule=cosine",
            "train.learning_rate=0.003",
            "train.warmup_steps=2",
            "train.verbose=0",
            NO_XLA,
            f"train.output_dir={root / out}",
            *extra,
        ]
    )


@pytest.mark.integration
def test_a_classifier_fine_tunes_from_it_at_another_image_size(converted):
    root, _, run = converted
    loaded = tfformer.load(run)
    assert loaded.config.model.activation_dropout == 0.0  # HF's ViT: none
    source = loaded.model
    config = finetune_config(
        root,
        run,
        "data.image_size=16",
        "model.activation_dropout=0.05",
        "model.activation=gelu",  # the source's: accepted
    )
    model = initialized_vit(config, len(COLOURS))
    blocks = transformer_blocks(model)
    assert {(block.dropout, block.ffn.dropout) for block in blocks} == {(0.0, 0.05)}
    # Unset, the hidden rate is the converted source's: HF's ViT has none.
    unset = initialized_vit(finetune_config(root, run, "model.dropout=0.1"), 3)
    blocks = transformer_blocks(unset)
    assert {(block.dropout, block.ffn.dropout) for block in blocks} == {(0.1, 0.0)}
    # Every layer but the head and the position table is the source's.
    mine, their = model.backbone, source.backbone
    for layer, theirs in (
        (mine.pixel_normalization, their.pixel_normalization),
        (mine.encoder_norm, their.encoder_norm),
        *zip(mine.encoder_blocks, their.encoder_blocks, strict=True),
    ):
        for a, b in zip(layer.get_weights(), theirs.get_weights(), strict=True):
            np.testing.assert_array_equal(a, b)
    patches, theirs = mine.patch_embedding, their.patch_embedding
    np.testing.assert_array_equal(patches.projection.kernel, theirs.projection.kernel)
    np.testing.assert_allclose(
        patches.position_embeddings,
        resized_positions(np.asarray(theirs.position_embeddings), 2, 4),
        rtol=1e-6,
    )
    assert model.output_shape == (None, 3)
    assert np.ravel(model.backbone.pixel_normalization.mean) == pytest.approx(
        255 * np.array(MEAN)
    )
    said = []
    result = train(config, progress=said.append)
    assert any("position table resized from 8x8 to 16x16" in line for line in said)
    # Chance is 1/3; the class is the strongest channel.
    assert result.metrics["test_accuracy"] > 0.9
    loaded = tfformer.load(str(root / "finetuned"))
    assert loaded.directory.manifest.labels == tuple(COLOURS)
    assert loaded.directory.manifest.image_size == 16


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.num_layers=3", r"model.num_layers comes from that run \(2\)"),
        ("model.activation=relu", r"model.activation comes from that run \('gelu'\)"),
        ("data.image_size=10", r"its patch size is 4; data.image_size must be"),
    ],
)
def test_fine_tuning_refuses_sizes_of_its_own(converted, override, message):
    root, _, run = converted
    config = finetune_config(root, run, override, out="refused")
    with pytest.raises(ValueError, match=message):
        train(config, progress=quiet)
    assert not (root / "refused").exists()  # refused before anything is written


def test_fine_tuning_refuses_a_run_of_another_task(tmp_path, converted):
    root, _, _ = converted
    from tests.training.convert.huggingface.test_bert import (
        write_checkpoint as write_bert,
    )

    bert = convert(
        str(write_bert(tmp_path / "bert", np.random.default_rng(6))),
        str(tmp_path / "bert_run"),
        progress=quiet,
    )
    config = finetune_config(root, bert, out="refused_bert")
    with pytest.raises(ValueError, match=r"holds a 'sentence_embedding' run"):
        train(config, progress=quiet)
    assert not (root / "refused_bert").exists()


# -- bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"drop": "vit.encoder.layer.1.output.dense.weight"},
            "no tensor 'vit.encoder.layer.1.output.dense.weight'",
        ),
        (
            {"drop": "classifier.weight"},
            "no tensor 'classifier.weight'.*not bare ViTModel",
        ),
        (
            {"config": {"intermediate_size": 32}},
            r"'vit.encoder.layer.0.intermediate.dense.weight' has shape \[24, 16\]; "
            r"the config implies \[32, 16\]",
        ),
        ({"config": {"hidden_act": "gelu_new"}}, "hidden_act must be 'gelu'"),
        (
            {"config": {"num_attention_heads": 3}},
            r"hidden_size \(16\) must be a multiple of num_attention_heads \(3\)",
        ),
        ({"config": {"image_size": 10}}, r"image_size \(10\) must be a multiple"),
        ({"config": {"num_channels": 1}}, "num_channels must be 3"),
        ({"config": {"id2label": {"0": "a", "2": "b"}}}, "must name classes 0 to 1"),
        # "01" is not the key "1" (a KeyError).
        (
            {"config": {"id2label": {"0": "a", "01": "b"}}},
            r"'id2label' keys must be class ids \(0, 1, ...\)",
        ),
        (
            {"preprocessor": {"image_processor_type": "ConvNextImageProcessor"}},
            "image processor must be one of .*'ConvNextImageProcessor'",
        ),
        (
            {"preprocessor": {"do_center_crop": True}},
            "center cropping is not supported",
        ),
        # A string is not read as true or false (it counted as true).
        (
            {"preprocessor": {"do_rescale": "false"}},
            "do_rescale must be true or false. Received: 'false'",
        ),
        (
            {"preprocessor": {"do_normalize": 0}},
            "do_normalize must be true or false. Received: 0",
        ),
        (
            {"preprocessor": {"image_std": [0.5, 0.0, 0.5]}},
            "'image_std' must be positive",
        ),
        (
            {"preprocessor": {"rescale_factor": 0}},
            "'rescale_factor' must be positive",
        ),
        (
            {"drop": "vit.encoder.layer.0.attention.attention.key.bias"},
            "no tensor 'vit.encoder.layer.0.attention.attention.key.bias'",
        ),
        (
            {"config": {"qkv_bias": False}},
            "does not use .*attention.attention.query.bias",
        ),
        ({"config": {"qkv_bias": 1}}, "'qkv_bias' must be true or false"),
        (
            {"extra": "vit.embeddings.mask_token"},
            "does not use .*vit.embeddings.mask_token",
        ),
    ],
)
def test_bad_checkpoints_are_refused_naming_the_key(tmp_path, change, message):
    rng = np.random.default_rng(7)
    tensors = changed(vit_tensors(rng), change, np.zeros((1, 1, 16), "float32"))
    source = write_checkpoint(
        tmp_path / "hf",
        rng,
        tensors=tensors,
        config=change.get("config"),
        preprocessor=change.get("preprocessor"),
    )
    assert_refused(tmp_path, source, message)


def test_training_without_images_is_refused_naming_the_keys(tmp_path):
    config = load_config(
        overrides=[
            "task=image_classification",
            f"train.output_dir={tmp_path / 'run'}",
        ]
    )
    with pytest.raises(ValueError, match=r"Give data.image_dir .* exactly one"):
        train(config, progress=quiet)
    assert not (tmp_path / "run").exists()
