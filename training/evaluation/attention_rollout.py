"""Attention rollout (Abnar & Zuidema 2020) of a ViT: where the prediction
draws from, as heat maps over the image.

Each layer's attention, averaged over heads, is mixed with the identity for
the residual connection and renormalized, Ã = (A + I) / 2 (rows sum to 1);
the product R = Ã_L ... Ã_1 says how much each input token flows into each
output token. A classifier on the class token reads its row of R over the
patches; one on `AttentionPooling` reads the pooled vector z = w^T x_L, so
its map is w^T R, the rows weighed by the pooling weights w.
"""

import numpy as np
from keras import ops

from tfformer.errors import InputError
from tfformer.runs.files import atomic_path


def vit_backbone(model):
    """The `ViTBackbone` of an `ImageClassifier` (or the backbone itself)."""
    from tfformer.models import ViTBackbone

    backbone = getattr(model, "backbone", model)
    if not isinstance(backbone, ViTBackbone):
        raise InputError(
            "attention rollout needs a ViT (an ImageClassifier or ViTBackbone). "
            f"Received: {type(model).__name__}"
        )
    return backbone


def vit_attention(model, images):
    """Per-layer self-attention weights of a ViT.

    Args:
        model: an `ImageClassifier` or its `ViTBackbone` (with or without
            pixel normalization).
        images: float `(batch, H, W, C)` inputs as the model takes them.

    Returns:
        A list, one `(batch, heads, tokens, tokens)` numpy array per encoder
        block (token 0 is the class token when the backbone has one), then
        the encoder's output `(batch, tokens, hidden_dim)`.
    """
    backbone = vit_backbone(model)
    x = ops.convert_to_tensor(images)
    if backbone.pixel_normalization is not None:
        x = backbone.pixel_normalization(x)
    x = backbone.image_tokenizer(x)
    maps = []
    for block in backbone.encoder_blocks:
        x, scores = block(x, training=False, return_attention_scores=True)
        maps.append(ops.convert_to_numpy(scores))
    return maps, backbone.encoder_norm(x)


def rollout(attention):
    """The rollout of per-layer attention weights (a list of `(batch, heads,
    T, T)` arrays): `(batch, T, T)`, row t = how much of each input token
    reaches output token t."""
    batch, _, tokens, _ = attention[0].shape
    result = np.broadcast_to(np.eye(tokens), (batch, tokens, tokens)).copy()
    for weights in attention:
        mixed = 0.5 * weights.mean(axis=1) + 0.5 * np.eye(tokens)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        result = mixed @ result
    return result


def attention_rollout(model, images):
    """Rollout maps `(batch, H / stride, W / stride)` over the image tokens
    (stride: the backbone's `token_stride`), each scaled to sum to 1: the
    class token's row, or for a classifier with `AttentionPooling` (or a
    backbone without a class token) the rows weighed by its pooling
    weights (uniform for a bare backbone)."""
    backbone = vit_backbone(model)
    stride = backbone.token_stride
    height, width = images.shape[1] // stride, images.shape[2] // stride
    attention, outputs = vit_attention(model, images)
    flow = rollout(attention)
    first = 1 if backbone.class_token else 0
    pooling = getattr(model, "pooling_layer", None)
    if pooling is not None:
        weights = ops.convert_to_numpy(pooling.weights_of(outputs[:, first:]))
        maps = np.einsum("bt,bts->bs", weights, flow[:, first:, first:])
    elif backbone.class_token:
        maps = flow[:, 0, 1:]
    else:
        maps = flow.mean(axis=1)
    maps = maps / maps.sum(axis=-1, keepdims=True)
    return maps.reshape(-1, height, width)


def plot_rollout(images, maps, truths, predictions, path, *, title=""):
    """One PNG: each image (top) over its rollout map, upsampled to the image
    and laid over it (bottom), titled with the true and predicted class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(images)
    figure, axes = plt.subplots(2, count, figsize=(2.0 * count, 4.8), squeeze=False)
    for i in range(count):
        image = np.asarray(images[i], np.uint8)
        heat = np.kron(maps[i], np.ones((image.shape[0] // maps[i].shape[0],) * 2))
        axes[0, i].imshow(image, interpolation="nearest")
        axes[0, i].set_title(f"true: {truths[i]}", fontsize=8)
        axes[1, i].imshow(image, interpolation="nearest")
        axes[1, i].imshow(heat, cmap="jet", alpha=0.5, interpolation="bilinear")
        axes[1, i].set_title(predictions[i], fontsize=8)
        for axis in axes[:, i]:
            axis.axis("off")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)
    plt.close(figure)
    return path
