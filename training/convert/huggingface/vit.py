"""ViT image classifiers (`model_type` "vit",
`ViTForImageClassification`) into an `image_classification` run, its
preprocessing (rescale, per-channel normalization) inside the model."""

import keras

from tfformer.errors import InputError
from tfformer.models import vit
from tfformer.runs.manifest import ImageClassificationManifest
from tfformer.training.convert.huggingface.checkpoint import (
    Weights,
    assign,
    attention_sizes,
    check_multiple,
    config_flag,
    config_value,
    find_prefix,
    layer_norm,
    linear,
    load_encoder_layer,
    read_json,
    refuse_unused,
)
from tfformer.training.convert.huggingface.runs import (
    HIDDEN_DROPOUT,
    model_section,
    write_run,
)
from tfformer.training.convert.huggingface.safetensors import Checkpoint

MODEL_TYPES = ("vit",)

# Image processors whose preprocessing a converted run reproduces: resize to
# the model's size, rescale, normalize per channel (no crop).
VIT_PROCESSORS = (
    None,
    "ViTImageProcessor",
    "ViTImageProcessorFast",
    "ViTFeatureExtractor",
)


def vit_sizes(config):
    """`vit` keyword arguments from a ViT config.json."""
    hidden, heads = attention_sizes(config)
    image_size = config_value(config, "image_size", int)
    patch = config_value(config, "patch_size", int)
    check_multiple("image_size", image_size, "patch_size", patch)
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise InputError(
            f"config.json: hidden_act must be 'gelu' (exact, as ViT). Received: {act!r}"
        )
    channels = config_value(config, "num_channels", int, default=3)
    if channels != 3:
        raise InputError(
            f"config.json: num_channels must be 3 (RGB images). Received: {channels!r}"
        )
    return {
        "image_size": image_size,
        "patch_size": patch,
        "num_layers": config_value(config, "num_hidden_layers", int),
        "hidden_dim": hidden,
        "num_heads": heads,
        "intermediate_dim": config_value(config, "intermediate_size", int),
        "layer_norm_epsilon": float(
            config_value(config, "layer_norm_eps", (int, float), default=1e-12)
        ),
    }


def vit_labels(config, progress):
    """The class names in id order from config.json's `id2label`; repeated
    names (ImageNet has two "crane"s) get their id appended."""
    id2label = config.get("id2label")
    if not isinstance(id2label, dict) or not id2label:
        raise InputError(
            "config.json: 'id2label' must map class ids to names. Received: "
            f"{id2label!r}"
        )
    try:
        # Keys as json writes ids ("0", "1", ...): "01" would be id 1 but
        # not the key "1" the names are read from.
        ids = sorted(int(k) for k in id2label if str(int(k)) == k)
        if len(ids) != len(id2label):
            raise ValueError
    except ValueError:
        raise InputError(
            "config.json: 'id2label' keys must be class ids (0, 1, ...). "
            f"Received: {sorted(id2label)[:5]}"
        ) from None
    if ids != list(range(len(ids))):
        raise InputError(
            f"config.json: 'id2label' must name classes 0 to {len(ids) - 1}. "
            f"Received ids: {ids[:10]}"
        )
    names = [str(id2label[str(i)]) for i in ids]
    seen, renamed = set(), []
    for i, name in enumerate(names):
        if name in seen:
            names[i] = f"{name} ({i})"
            renamed.append(names[i])
        seen.add(names[i])
    if renamed:
        progress(f"Repeated class names, told apart by their ids: {renamed[:5]}")
    return names


def vit_pixel_statistics(source):
    """(pixel_mean, pixel_std) in 0-255 pixel units from the checkpoint's
    preprocessor_config.json (defaults: Hugging Face's ViTImageProcessor,
    x / 255 then (x - 0.5) / 0.5 per channel)."""
    settings = read_json(source, "preprocessor_config.json", required=False) or {}
    where = "preprocessor_config.json"
    kind = settings.get("image_processor_type", settings.get("feature_extractor_type"))
    if kind not in VIT_PROCESSORS:
        raise InputError(
            f"{where}: the image processor must be one of "
            f"{[k for k in VIT_PROCESSORS if k]} (resize, rescale, normalize). "
            f"Received: {kind!r}"
        )
    if config_flag(settings, "do_center_crop", False, where) or settings.get(
        "crop_size"
    ):
        raise InputError(f"{where}: center cropping is not supported.")
    scale = 1.0
    if config_flag(settings, "do_rescale", True, where):
        scale = float(
            config_value(settings, "rescale_factor", (int, float), where, 1 / 255)
        )
        if scale <= 0:
            raise InputError(
                f"{where}: 'rescale_factor' must be positive. Received: {scale!r}"
            )
    mean, std = [0.0] * 3, [1.0] * 3
    if config_flag(settings, "do_normalize", True, where):
        mean = settings.get("image_mean", [0.5] * 3)
        std = settings.get("image_std", [0.5] * 3)
        for key, values in (("image_mean", mean), ("image_std", std)):
            if (
                not isinstance(values, list)
                or len(values) != 3
                or not all(isinstance(v, int | float) for v in values)
            ):
                raise InputError(
                    f"{where}: {key!r} must be 3 numbers. Received: {values!r}"
                )
        if min(std) <= 0:
            raise InputError(f"{where}: 'image_std' must be positive. Received: {std}")
    # (x * scale - mean) / std = (x - mean / scale) / (std / scale)
    return [m / scale for m in mean], [s / scale for s in std]


def load_vit(model, weights, sizes, num_classes):
    """Copies a Hugging Face ViT's tensors into an `ImageClassifier`."""
    d, p = sizes["hidden_dim"], sizes["patch_size"]
    tokens = (sizes["image_size"] // p) ** 2 + 1
    patches = model.backbone.patch_embedding
    name = "embeddings.patch_embeddings.projection"
    assign(
        patches.projection.kernel,
        weights(f"{name}.weight", (d, 3, p, p)).transpose(2, 3, 1, 0),
        f"{name}.weight",
    )
    assign(patches.projection.bias, weights(f"{name}.bias", (d,)), f"{name}.bias")
    assign(
        patches.class_token,
        weights("embeddings.cls_token", (1, 1, d)),
        "embeddings.cls_token",
    )
    assign(
        patches.position_embeddings,
        weights("embeddings.position_embeddings", (1, tokens, d)),
        "embeddings.position_embeddings",
    )
    for i, block in enumerate(model.backbone.encoder_blocks):
        load_encoder_layer(
            block,
            weights,
            f"encoder.layer.{i}",
            sizes,
            attention="attention.attention",
            norms=("layernorm_before", "layernorm_after"),
            bias=sizes["qkv_bias"],
        )
    layer_norm(model.backbone.encoder_norm, weights, "layernorm", d)
    head = Weights(weights.checkpoint, "")
    linear(model.head, head, "classifier", (num_classes, d))


def convert(source, config, staging, progress):
    """A ViT image classifier (`ViTForImageClassification`) into an
    `image_classification` run in `staging`."""
    sizes = vit_sizes(config)
    qkv_bias = config.get("qkv_bias", True)
    if not isinstance(qkv_bias, bool):
        raise InputError(
            f"config.json: 'qkv_bias' must be true or false. Received: {qkv_bias!r}"
        )
    labels = vit_labels(config, progress)
    mean, std = vit_pixel_statistics(source)
    checkpoint = Checkpoint(source)
    if "classifier.weight" not in checkpoint:
        raise InputError(
            f"{source}: the checkpoint has no tensor 'classifier.weight': tfformer "
            "converts ViT image classifiers (ViTForImageClassification), not "
            "bare ViTModel encoders."
        )
    weights = Weights(
        checkpoint, find_prefix(checkpoint, "embeddings.cls_token", ("vit.", ""))
    )
    keras.utils.set_random_seed(0)
    model = vit(
        num_classes=len(labels),
        dropout=0.0,
        activation_dropout=HIDDEN_DROPOUT,
        pixel_mean=mean,
        pixel_std=std,
        **sizes,
    )
    load_vit(model, weights, {**sizes, "qkv_bias": qkv_bias}, len(labels))
    progress(
        f"ViT: {sizes['num_layers']} layers, width {sizes['hidden_dim']}, "
        f"{sizes['num_heads']} heads, patch {sizes['patch_size']}, "
        f"{sizes['image_size']}x{sizes['image_size']} images, {len(labels)} classes"
    )
    unused = [n for n in checkpoint.unused() if not n.endswith("position_ids")]
    refuse_unused(source, unused)
    manifest = ImageClassificationManifest(
        tokenizers={}, image_size=sizes["image_size"], labels=tuple(labels)
    )
    write_run(staging, manifest, model)
    return {
        "task": "image_classification",
        "data": {"image_size": sizes["image_size"], "class_names": labels},
        "model": {
            "preset": "vit_tiny",
            "patch_size": sizes["patch_size"],
            **model_section(sizes),
        },
    }
