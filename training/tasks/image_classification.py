"""Image classification: a Vision Transformer on labelled images.

Data: a folder per class (`data.image_dir`: a folder or an archive, see
`sources.image_folders`) or a tfds image dataset by name (`data.tfds_name`).
Images are decoded and resized in TensorFlow ops shared with the exports
(`tfformer.preprocessing.images`). Validation is carved from the training images
with `data.seed`; test is the `test/` folder or split, else carved as well.
Training augments with random crops, flips, and optionally mixup / cutmix
(`image_pipeline`). The model takes raw pixel values and normalizes them
with the training images' channel statistics, so an export feeds it
decoded pixels. The predictor
(`tfformer.training.predictors.image_classification`) classifies image
files and reports accuracy, per-class accuracy, macro-F1, the confusion
matrix (PNG) and attention rollout maps (PNG).
"""

import dataclasses
import os

from tfformer.errors import InputError
from tfformer.training.tasks.base import (
    INITIAL_RUN_KEYS,
    ModelConfig,
    PreparedData,
    TrainingTask,
    check_holdout_fraction,
    check_initial_settings,
    check_lora,
    check_model_recipe,
    check_positive,
    initial_hidden_dropout,
)


@dataclasses.dataclass
class ImageData:
    """Where the labelled images are, their size and the augmentation."""

    # Seed of the held-out splits and of the augmentation's random draws.
    seed: int = 0
    # A folder (or .tar.gz/.tgz/.tar/.zip archive) with train/<class>/...
    # and optionally test/<class>/...; or the class folders directly.
    image_dir: str | None = None
    # Or a tensorflow-datasets image dataset (prepared beforehand: nothing
    # is downloaded), its data_dir and its image and label features.
    tfds_name: str | None = None
    tfds_data_dir: str | None = None
    image_key: str = "image"
    label_key: str = "label"
    # Images are resized (aspect ratio not kept) to image_size x image_size.
    image_size: int = 32
    # Class names in class-id order; empty: the sorted folder names (or the
    # tfds label names). Given, they must be exactly the class folders.
    class_names: tuple[str, ...] = ()
    # Share of the training images held out for validation (and as many for
    # test when there is no test split).
    holdout_fraction: float = 0.1
    # Augmentation (training only; see image_pipeline.Augmentation).
    crop_padding: int = 4
    horizontal_flip: bool = True
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0


@dataclasses.dataclass
class ImageModel(ModelConfig):
    """`ModelConfig` plus the ViT's tokenizer, its pooling and the run to
    start from. None: the preset's."""

    patch_size: int | None = None
    # "patch" (ViT: patch_size patches and a class token) or "convolution"
    # (CCT: tokenizer_layers 3x3 convolutions with ReLU and a stride-2
    # max-pool, tokenizer_channels filters before the last; no class token).
    tokenizer: str | None = None
    tokenizer_layers: int | None = None
    tokenizer_channels: int | None = None
    # What the head reads: "class_token" or "attention" (CCT's sequence
    # pooling); None: the class token when there is one.
    pooling: str | None = None
    # An image_classification run directory (trained, or a converted
    # Hugging Face ViT): the classifier starts from its weights, sizes and
    # pixel normalization, with a new head for this data's classes; a
    # data.image_size other than its own resizes its position table
    # (bicubic, as Hugging Face's ViT does). Read when training starts.
    init_from: str | None = None


# Model keys that come from model.init_from and must stay unset (or equal
# its values): the text tasks' and the tokenizer's.
TOKENIZER_KEYS = ("patch_size", "tokenizer", "tokenizer_layers", "tokenizer_channels")
INITIAL_VIT_KEYS = (*INITIAL_RUN_KEYS, *TOKENIZER_KEYS, "pooling")


def one_source_message(d):
    return (
        "Give data.image_dir (a folder per class, or an archive of them) "
        "or data.tfds_name, exactly one. Received: "
        f"data.image_dir={d.image_dir!r}, data.tfds_name={d.tfds_name!r}"
    )


def augmentation(data_config):
    from tfformer.training.image_pipeline import Augmentation

    d = data_config
    return Augmentation(
        crop_padding=d.crop_padding,
        horizontal_flip=d.horizontal_flip,
        mixup_alpha=d.mixup_alpha,
        cutmix_alpha=d.cutmix_alpha,
    )


def channel_statistics(pixels, chunk=8192):
    """Per-channel mean and standard deviation of uint8 `pixels` (n, h, w, 3)."""
    import numpy as np

    total = np.zeros(3)
    squares = np.zeros(3)
    count = 0
    for start in range(0, len(pixels), chunk):
        part = pixels[start : start + chunk].reshape(-1, 3).astype(np.float64)
        total += part.sum(0)
        squares += (part * part).sum(0)
        count += len(part)
    mean = total / max(count, 1)
    std = np.sqrt(np.maximum(squares / max(count, 1) - mean * mean, 0.0))
    return mean, np.maximum(std, 1.0)


class ImageClassificationTask(TrainingTask):
    name = "image_classification"
    DataConfig = ImageData
    ModelConfig = ImageModel
    backbone_name = "ViTBackbone"
    default_preset = "vit_tiny"

    def validate(self, config):
        d = config.data
        if config.train.batch_tokens is not None:
            raise InputError(
                "train.batch_tokens batches sequences by length; images have "
                "none. Use train.batch_size. Received: "
                f"train.batch_tokens={config.train.batch_tokens}"
            )
        if d.image_dir is not None and d.tfds_name is not None:
            raise InputError(one_source_message(d))
        check_positive("data.image_size", d.image_size)
        for key in ("crop_padding", "mixup_alpha", "cutmix_alpha"):
            if getattr(d, key) < 0:
                raise InputError(
                    f"data.{key} must be >= 0. Received: {getattr(d, key)}"
                )
        if d.class_names and len(set(d.class_names)) != len(d.class_names):
            raise InputError(
                f"data.class_names has duplicates. Received: {list(d.class_names)}"
            )
        check_holdout_fraction(d)
        check_model_recipe(config.model)
        check_lora(config.model)
        if config.model.init_from is not None:
            return  # the sizes are the initial run's (checked at train time)
        sizes = self.model_sizes(config.model)
        if sizes.get("tokenizer", "patch") == "patch":
            stride = sizes.get("patch_size", 16)
            what, received = "the patch size", f"model.patch_size={stride}"
        else:
            layers = sizes.get("tokenizer_layers", 2)
            stride = 2**layers
            what = f"2 ** model.tokenizer_layers = {stride}"
            received = f"model.tokenizer_layers={layers}"
        if d.image_size % stride:
            raise InputError(
                f"data.image_size ({d.image_size}) must be a multiple of "
                f"{what}. Received: {received}"
            )

    def model_sizes(self, model_config):
        sizes = super().model_sizes(model_config)
        m = model_config
        for key in ("patch_size", "tokenizer_layers", "tokenizer_channels"):
            if getattr(m, key) is not None:
                check_positive(f"model.{key}", getattr(m, key))
                sizes[key] = getattr(m, key)
        if m.tokenizer is not None:
            from tfformer.models.vit_backbone import TOKENIZERS

            if m.tokenizer not in TOKENIZERS:
                raise InputError(
                    f"model.tokenizer must be one of {TOKENIZERS}. Received: "
                    f"model.tokenizer={m.tokenizer!r}"
                )
            sizes["tokenizer"] = m.tokenizer
        if sizes.get("tokenizer") == "convolution":
            if m.patch_size is not None:
                raise InputError(
                    "model.patch_size applies to model.tokenizer=patch. "
                    f"Received: model.patch_size={m.patch_size} with "
                    "model.tokenizer=convolution"
                )
            sizes.pop("patch_size", None)
        if m.pooling is not None:
            from tfformer.models.image_classifier import POOLINGS

            if m.pooling not in POOLINGS:
                raise InputError(
                    f"model.pooling must be one of {POOLINGS}. Received: "
                    f"model.pooling={m.pooling!r}"
                )
            if m.pooling == "class_token" and sizes.get("tokenizer") == "convolution":
                raise InputError(
                    "model.pooling=class_token needs model.tokenizer=patch (the "
                    "convolution tokenizer has no class token). Received: "
                    "model.tokenizer=convolution"
                )
            sizes["pooling"] = m.pooling
        return sizes

    # -- data --------------------------------------------------------------------

    def read_images(self, data_config, progress=print):
        """({"train": (pixels, labels), "test": (pixels, labels) or None},
        class names) of the configured source."""
        import numpy as np

        d = data_config
        if (d.image_dir is None) == (d.tfds_name is None):
            # Checked here, when images are needed: a converted checkpoint's
            # run predicts and exports without a source of images.
            raise InputError(one_source_message(d))
        if d.image_dir is not None:
            from tfformer.training.sources.image_folders import read_image_folders

            return read_image_folders(
                d.image_dir, d.image_size, d.class_names or None, progress
            )
        from tfformer.training.sources.tfds_source import tfds_image_splits

        splits, names = tfds_image_splits(
            d.tfds_name,
            size=d.image_size,
            image_key=d.image_key,
            label_key=d.label_key,
            data_dir=d.tfds_data_dir,
        )
        if d.class_names:
            # The same classes in another order: the labels are renumbered.
            if sorted(d.class_names) != sorted(names):
                raise InputError(
                    f"data.class_names must be the classes of {d.tfds_name}, "
                    f"{names}, in any order. Received: {list(d.class_names)}"
                )
            order = np.array([d.class_names.index(n) for n in names], np.int32)
            for split in ("train", "test"):
                if splits[split] is not None:
                    pixels, labels = splits[split]
                    splits[split] = (pixels, order[labels])
            names = list(d.class_names)
        return splits, names

    def raw_splits(self, data_config, progress=print):
        """{"train", "validation", "test": (uint8 pixels, int32 labels)},
        "labels": the class names, and "fingerprint": a digest of the images
        the test split comes from (see `check_test_split`)."""
        import numpy as np

        splits, names = self.read_images(data_config, progress)
        pixels, labels = splits["train"]
        order = np.random.default_rng(data_config.seed).permutation(len(labels))
        held = int(len(labels) * data_config.holdout_fraction)
        parts = {"validation": order[:held]}
        if splits["test"] is None:
            parts["test"] = order[held : 2 * held]
            parts["train"] = order[2 * held :]
        else:
            parts["train"] = order[held:]
        raw = {split: (pixels[i], labels[i]) for split, i in parts.items()}
        if splits["test"] is not None:
            raw["test"] = splits["test"]
        for split in ("train", "validation", "test"):
            if not len(raw[split][1]):
                raise InputError(
                    f"The {split} split holds no images ({len(labels)} training "
                    f"images, data.holdout_fraction={data_config.holdout_fraction})."
                )
        raw["labels"] = tuple(names)
        # What decides the test split: the test folder or split, or the
        # training images it is carved from.
        source = "test" if splits["test"] is not None else "train"
        raw["fingerprint"] = splits["fingerprints"][source]
        return raw

    def prepare(self, config, raw, directory, progress=print):
        from tfformer.training.image_pipeline import ImageExamples

        del directory
        names = raw["labels"]
        if config.model.init_from is not None:
            _, settings = initial_vit(config)  # refused before anything is written
            theirs, size = settings["image_size"], config.data.image_size
            progress(
                f"Model: from {config.model.init_from} ({settings['num_layers']} "
                f"layers, width {settings['hidden_dim']}, "
                f"{tokenizer_words(settings)}), a new {len(names)}-class head"
                + (
                    f"; position table resized from {theirs}x{theirs} to "
                    f"{size}x{size} images"
                    if size != theirs
                    else ""
                )
            )
        examples = {
            split: ImageExamples.of(
                *raw[split],
                len(names),
                augmentation(config.data) if split == "train" else None,
            )
            for split in ("train", "validation", "test")
        }
        progress(
            "Images: "
            + ", ".join(f"{s} {len(e):,}" for s, e in examples.items())
            + f"; {len(names)} classes, {config.data.image_size}x"
            f"{config.data.image_size}"
        )
        return PreparedData({}, examples, raw, (1,), labels=tuple(names))

    # The most bytes of pixels `save_heldout` keeps (106 images of 224x224;
    # the 500 of CIFAR-10's 32x32 take 1.5 MB).
    HELDOUT_BYTES = 16_000_000

    def save_heldout(self, data, run):
        """A seeded draw of the test images (a test folder is read class by
        class: its first images would be one class)."""
        import numpy as np

        pixels, labels = data.raw["test"]
        per_image = max(1, int(pixels[0].size))
        count = min(self.HELDOUT_EXAMPLES, self.HELDOUT_BYTES // per_image)
        chosen = np.sort(np.random.default_rng(0).permutation(len(labels))[:count])
        run.write_heldout_images(pixels[chosen], labels[chosen])

    def run_manifest(self, config, data):
        from tfformer.runs.manifest import ImageClassificationManifest

        return ImageClassificationManifest(
            tokenizers={},
            image_size=config.data.image_size,
            labels=tuple(data.labels),
            test_split_fingerprint=data.raw["fingerprint"],
        )

    def training_stream(self, examples, **kwargs):
        from tfformer.training import image_pipeline

        return image_pipeline.training_stream(examples, **kwargs)

    def evaluation_dataset(self, examples, **kwargs):
        from tfformer.training import image_pipeline

        return image_pipeline.evaluation_dataset(examples, **kwargs)

    # -- model -------------------------------------------------------------------

    def build_model(self, config, data):
        from tfformer.models import from_preset

        if config.model.init_from is not None:
            return initialized_vit(config, data.num_classes)
        mean, std = channel_statistics(data.examples["train"].features["images"])
        return from_preset(
            self.preset(config.model),
            image_size=config.data.image_size,
            num_classes=data.num_classes,
            pixel_mean=mean.tolist(),
            pixel_std=std.tolist(),
            **self.model_sizes(config.model),
        )

    def compile_arguments(self, config):
        import keras

        return {
            "loss": keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=config.train.label_smoothing
            ),
            # Weights mark the padding rows of the last evaluation batch.
            "weighted_metrics": [keras.metrics.CategoricalAccuracy(name="accuracy")],
        }


def vit_settings(model):
    """`ViTBackbone` keyword arguments of a ViT classifier's backbone (its
    sizes, activation, hidden dropout, layer norm epsilon, pixel
    normalization and image size)."""
    from tfformer.models import ViTBackbone

    backbone = getattr(model, "backbone", None)
    if not isinstance(backbone, ViTBackbone):
        raise InputError(f"model {model.name!r} has no ViT backbone.")
    config = backbone.get_config()
    keys = (
        "patch_size",
        "tokenizer",
        "tokenizer_layers",
        "tokenizer_channels",
        "num_layers",
        "hidden_dim",
        "num_heads",
        "intermediate_dim",
        "activation",
        "activation_dropout",
        "layer_norm_epsilon",
        "image_size",
    )
    settings = {key: config[key] for key in keys}
    settings["pooling"] = model.pooling
    if config["pixel_mean"] is not None:
        settings["pixel_mean"] = list(config["pixel_mean"])
        settings["pixel_std"] = list(config["pixel_std"])
    return settings


def tokenizer_words(settings):
    """The tokenizer of `vit_settings` in words: "patch 16" or "2
    convolution layers"."""
    if settings["tokenizer"] == "patch":
        return f"patch {settings['patch_size']}"
    return f"{settings['tokenizer_layers']} convolution layers"


def cubic_resize_matrix(old, new, a=-0.75):
    """(new, old) weights of 1-D bicubic resizing as PyTorch's
    `interpolate(mode="bicubic", align_corners=False)` (Keys' kernel with
    a = -0.75, half-pixel centres, border indices clamped)."""
    import numpy as np

    def kernel(x):
        x = abs(x)
        if x <= 1:
            return ((a + 2) * x - (a + 3)) * x * x + 1
        if x < 2:
            return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return 0.0

    weights = np.zeros((new, old))
    for i in range(new):
        source = (i + 0.5) * old / new - 0.5
        first = int(np.floor(source))
        t = source - first
        for k in range(-1, 3):
            weights[i, min(max(first + k, 0), old - 1)] += kernel(k - t)
    return weights


def resized_positions(table, grid, new_grid, class_token=True):
    """A (1, 1 + grid², d) position table for a new_grid x new_grid patch grid:
    the class token's row kept, the patch rows resized bicubically as an
    image, as Hugging Face's ViT `interpolate_pos_encoding` does. Without
    `class_token` the table is (1, grid², d), every row a token's."""
    import numpy as np

    d = table.shape[-1]
    first = 1 if class_token else 0
    patches = table[0, first:].reshape(grid, grid, d).astype("float64")
    weights = cubic_resize_matrix(grid, new_grid)
    rows = np.einsum("ai,bj,ijd->abd", weights, weights, patches)
    rows = rows.reshape(1, new_grid * new_grid, d)
    return np.concatenate([table[:, :first], rows], axis=1).astype(table.dtype)


# The last model.init_from read: {(path, mtime): (model, settings)}.
_INITIAL_VITS = {}


def initial_vit(config):
    """(model, `vit_settings`) of `model.init_from`, checked when training
    starts, before anything is written (ValueError naming the key): an
    image_classification run whose sizes the config leaves unset (or
    equal), with a patch size that divides data.image_size. Loaded once per
    model file."""
    from tfformer.runs.directory import RunDirectory

    where = f"model.init_from={config.model.init_from!r}"
    try:
        run = RunDirectory(os.path.abspath(config.model.init_from))
        if run.task != "image_classification":
            raise InputError(
                f"it holds a {run.task!r} run; an image classifier starts from "
                "an image_classification run"
            )
        path = run.checkpoint_path()
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None
    key = (path, os.path.getmtime(path))
    if key not in _INITIAL_VITS:
        source = run.load_model()
        _INITIAL_VITS.clear()
        _INITIAL_VITS[key] = (source, vit_settings(source))
    source, settings = _INITIAL_VITS[key]
    check_initial_settings(where, config.model, INITIAL_VIT_KEYS, settings)
    stride, size = source.backbone.token_stride, config.data.image_size
    if size % stride:
        spacing = (
            f"its patch size is {stride}"
            if settings["tokenizer"] == "patch"
            else f"its tokens are {stride} pixels apart ({tokenizer_words(settings)})"
        )
        raise InputError(
            f"{where}: {spacing}; data.image_size must be a multiple of it. "
            f"Received: data.image_size={size}"
        )
    return source, dict(settings)


def initialized_vit(config, num_classes):
    """The ViT of `model.init_from` (`initial_vit`: its sizes, weights and
    pixel normalization; this config's dropout, the hidden one by
    `initial_hidden_dropout`) with a new head of
    `num_classes` and, for another data.image_size, a resized position
    table."""
    from tfformer.models import vit

    source, settings = initial_vit(config)
    theirs, size = settings.pop("image_size"), config.data.image_size
    dropout = config.model.dropout if config.model.dropout is not None else 0.0
    settings["activation_dropout"] = initial_hidden_dropout(
        config.model, settings["activation_dropout"]
    )
    model = vit(size, num_classes, dropout=dropout, **settings)
    mine, their = model.backbone, source.backbone
    stride = their.token_stride
    pairs = [
        (mine.encoder_norm, their.encoder_norm),
        *zip(mine.encoder_blocks, their.encoder_blocks, strict=True),
    ]
    if mine.pixel_normalization is not None:
        pairs.append((mine.pixel_normalization, their.pixel_normalization))
    if model.pooling_layer is not None:
        pairs.append((model.pooling_layer, source.pooling_layer))
    for layer, source_layer in pairs:
        layer.set_weights(source_layer.get_weights())
    values = their.image_tokenizer.get_weights()
    if size != theirs:
        embedding = mine.image_tokenizer
        i = [w.path for w in embedding.weights].index(
            embedding.position_embeddings.path
        )
        values[i] = resized_positions(
            values[i], theirs // stride, size // stride, mine.class_token
        )
    mine.image_tokenizer.set_weights(values)
    return model


TASK = ImageClassificationTask()
