"""LoRA (Hu et al., 2021): fine-tune a built model through low-rank adapters.

`enable_lora(model, rank)` freezes every weight of the model's backbone
and gives the chosen projections of each attention and feed-forward layer
Keras's LoRA adapters (`keras.layers.Dense.enable_lora`): the layer's
kernel reads as W + (alpha / rank) A B, with A `(in, rank)` drawn as Keras
draws it and B `(rank, out)` zero, so the model starts as it was. Only A,
B and the layers outside the backbone (a new classification head) train.

Saving merges: Keras writes each adapted layer's kernel as W + (alpha /
rank) A B (`Dense.save_own_variables`), so a `.keras` file of an adapted
model loads as a plain one and exports as any other. Weights saved with
Keras's `save_weights` and loaded into an adapted model come back merged
into W with A and B zero, which no gradient moves: `redraw_adapters`
draws A again (tfformer's trainer backs LoRA runs up without merging,
`tfformer.training.lora.AdapterWeights`).
`adapter_weights` and `load_adapter_weights` keep the adapters alone (a
few hundred KB where the model is tens of MB); `save_adapters` writes them
keyed by block and projection ("decoder_blocks/0/self_attention/query")
with their scale, and `unmerged` gives a saved model's weights back
without them, for a runtime that applies the adapters itself (a LiteRT-LM
LoRA file).

A model built with `fused_qkv=True` has one query-key-value projection:
any of "query", "key" and "value" adapts all of it.

Backend-neutral: Keras layers and variables only.
"""

import keras
import numpy as np

from tfformer.errors import InputError
from tfformer.layers.feed_forward import FeedForward
from tfformer.layers.multi_head_attention import MultiHeadAttention

# What `targets` may name: attention's projections and the feed-forward
# network's ("ffn": all of its dense layers).
ATTENTION_TARGETS = ("query", "key", "value", "output")
TARGETS = (*ATTENTION_TARGETS, "ffn")
# The LoRA paper's choice for Transformers (and keras-hub's `enable_lora`).
DEFAULT_TARGETS = ("query", "value")


def _dense_layers(layer, targets):
    """(name, keras Dense) of `layer` that `targets` name."""
    found = []
    if isinstance(layer, MultiHeadAttention):
        fused = getattr(layer, "query_key_value_dense", None)
        if fused is not None and {"query", "key", "value"} & set(targets):
            found.append(("query_key_value", fused))
        for name in ATTENTION_TARGETS:
            dense = getattr(layer, f"{name}_dense", None)
            if name in targets and dense is not None:
                found.append((name, dense))
    if isinstance(layer, FeedForward) and "ffn" in targets:
        for name in ("intermediate", "gate", "output"):
            dense = getattr(layer, f"{name}_dense", None)
            if dense is not None:
                found.append((f"ffn_{name}", dense))
    return found


def _keyed_parts(backbone):
    """("decoder_blocks/0/self_attention", layer) for the attention and
    feed-forward layers of every block of `backbone` (its typed handles:
    `encoder_blocks`, `decoder_blocks`)."""
    parts = []
    for kind in ("encoder_blocks", "decoder_blocks"):
        for i, block in enumerate(getattr(backbone, kind, None) or ()):
            for part in ("self_attention", "cross_attention", "ffn"):
                layer = getattr(block, part, None)
                if layer is not None:
                    parts.append((f"{kind}/{i}/{part}", layer))
    return parts


def projections(model, targets=TARGETS):
    """{"decoder_blocks/0/self_attention/query": keras Dense} of every
    `targets` projection of `model`'s backbone."""
    backbone = getattr(model, "backbone", model)
    return {
        f"{key}/{name}": dense
        for key, layer in _keyed_parts(backbone)
        for name, dense in _dense_layers(layer, targets)
    }


def check_targets(targets):
    """`targets` as a tuple, or ValueError naming `model.lora_targets`."""
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if not targets or unknown:
        raise InputError(
            f"model.lora_targets must be one or more of {list(TARGETS)}. "
            f"Received: {list(targets)}"
        )
    return targets


def enable_lora(model, rank, targets=DEFAULT_TARGETS, alpha=None, seed=None):
    """Freezes `model.backbone` and adds rank-`rank` adapters to its
    `targets` projections; returns the adapted Dense layers' paths.

    A is drawn as Keras draws it (he-uniform); with `seed` (an int), the
    k-th adapted layer's A from `seed + k`, so a run repeats exactly.

    Raises:
        ValueError: a rank that is not an int in [1, the narrowest adapted
            projection's width], targets that name nothing, or a model
            without a backbone (each naming the setting).
    """
    targets = check_targets(targets)
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise InputError(f"model.lora_rank must be an int >= 1. Received: {rank!r}")
    backbone = getattr(model, "backbone", None)
    if backbone is None:
        raise InputError(
            f"LoRA adapts a task model's backbone; {type(model).__name__} has none."
        )
    adapted = []
    for _, layer in _keyed_parts(backbone):
        for name, dense in _dense_layers(layer, targets):
            adapted.append((f"{layer.path}/{name}", dense))
    if not adapted:
        raise InputError(
            f"model.lora_targets {list(targets)} name no layer of "
            f"{type(backbone).__name__}."
        )
    narrowest = min(min(d.kernel.shape) for _, d in adapted)
    if rank > narrowest:
        raise InputError(
            f"model.lora_rank must be at most {narrowest} (the narrowest adapted "
            f"projection's width). Received: {rank}"
        )
    for variable in backbone.weights:
        variable.trainable = False
    for k, (_, dense) in enumerate(adapted):
        draw = "he_uniform"
        if seed is not None:
            draw = keras.initializers.HeUniform(seed=seed + k)
        dense.enable_lora(rank, lora_alpha=alpha, a_initializer=draw)
    return [path for path, _ in adapted]


def adapted(model):
    """`projections(model)` that have LoRA enabled."""
    return {
        key: dense
        for key, dense in projections(model).items()
        if getattr(dense, "lora_enabled", False)
    }


def redraw_adapters(model, seed=0):
    """Draws A again (as `enable_lora` does: he-uniform) in every adapted
    layer whose A and B are all zero; returns how many. The model computes
    what it did (B stays zero)."""
    redrawn = 0
    for k, dense in enumerate(adapted(model).values()):
        a, b = dense.lora_kernel_a, dense.lora_kernel_b
        if np.any(np.asarray(a)) or np.any(np.asarray(b)):
            continue
        draw = keras.initializers.HeUniform(seed=seed + k)
        a.assign(draw(a.shape, dtype=a.dtype))
        redrawn += 1
    return redrawn


def adapter_weights(model):
    """{variable path: NumPy array} of every LoRA adapter of `model`."""
    return {
        v.path: np.asarray(v.numpy() if hasattr(v, "numpy") else v.value)
        for v in model.weights
        if v.name in ("lora_kernel_a", "lora_kernel_b")
    }


def load_adapter_weights(model, weights):
    """Sets `model`'s adapters from `adapter_weights`' output; ValueError
    naming a missing or misshapen one."""
    mine = {v.path: v for v in model.weights if v.name.startswith("lora_kernel_")}
    if set(mine) != set(weights):
        raise InputError(
            f"the adapters do not match the model's: missing "
            f"{sorted(set(mine) - set(weights))[:3]}, unknown "
            f"{sorted(set(weights) - set(mine))[:3]}"
        )
    for path, value in weights.items():
        if tuple(mine[path].shape) != tuple(np.shape(value)):
            raise InputError(
                f"adapter {path} must be {tuple(mine[path].shape)}. Received: "
                f"{tuple(np.shape(value))}"
            )
        mine[path].assign(value)


def save_adapters(model, path):
    """Writes the adapters of `model` to `path` (`.npz`, no pickles):
    `<key>/a` `(in, rank)`, `<key>/b` `(rank, out)`, `<key>/scale`
    (alpha / rank) and `<key>/merged_row` (the first row of the kernel as
    saved, W + scale A B: `merged_into` tells a model saved with these
    adapters from another) for each adapted projection (`projections`'
    keys)."""
    arrays = {}
    for key, dense in adapted(model).items():
        arrays[f"{key}/a"] = keras.ops.convert_to_numpy(dense.lora_kernel_a)
        arrays[f"{key}/b"] = keras.ops.convert_to_numpy(dense.lora_kernel_b)
        arrays[f"{key}/scale"] = np.float32(dense.lora_alpha / dense.lora_rank)
        merged = keras.ops.convert_to_numpy(dense.kernel[:1])
        arrays[f"{key}/merged_row"] = merged[0].astype(np.float32)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


class Adapter(tuple):
    """(a, b, scale) of one projection, and `merged_row`."""

    def __new__(cls, a, b, scale, merged_row):
        adapter = super().__new__(cls, (a, b, scale))
        adapter.merged_row = merged_row
        return adapter


def merged_into(model, adapters):
    """Whether each adapted kernel of `model` starts with its adapter's
    `merged_row` (to float rounding): the model was saved with these
    adapters merged."""
    kernels = projections(model)
    return all(
        np.allclose(
            keras.ops.convert_to_numpy(kernels[key].kernel[0]),
            adapter.merged_row,
            rtol=1e-5,
            atol=1e-6,
        )
        for key, adapter in adapters.items()
    )


def read_adapters(path, model):
    """{key: `Adapter` (a, b, scale)} from `save_adapters`' file, each checked
    against `model`'s projection of that key; ValueError naming the file
    and what does not match."""
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise InputError(f"{path} is not an adapters file ({e}).") from None
    mine = projections(model)
    keys = sorted({k.rsplit("/", 1)[0] for k in arrays})
    adapters = {}
    for key in keys:
        a, b, scale = (arrays.get(f"{key}/{p}") for p in ("a", "b", "scale"))
        row = arrays.get(f"{key}/merged_row")
        dense = mine.get(key)
        if dense is None or a is None or b is None or scale is None:
            raise InputError(
                f"{path}: {key!r} is not an adapted projection of the model."
            )
        kernel = tuple(dense.kernel.shape)
        if a.ndim != 2 or b.ndim != 2 or (a.shape[0], b.shape[1]) != kernel:
            raise InputError(
                f"{path}: {key} must be ({kernel[0]}, rank) and (rank, {kernel[1]}). "
                f"Received: {a.shape} and {b.shape}"
            )
        if a.shape[1] != b.shape[0]:
            raise InputError(f"{path}: {key}'s ranks differ: {a.shape} and {b.shape}")
        if row is None or row.shape != (kernel[1],):
            raise InputError(f"{path}: {key} has no merged_row of {kernel[1]} values.")
        adapters[key] = Adapter(a, b, float(scale), row)
    if not adapters:
        raise InputError(f"{path} holds no adapter.")
    return adapters


class unmerged:
    """`with unmerged(model, adapters):` `model`'s adapted kernels read W -
    scale A B (the weights before training, up to float rounding), and
    exactly their saved values again afterwards. For a model loaded from a
    LoRA run's `.keras` file, whose kernels hold the adapters merged."""

    def __init__(self, model, adapters):
        self.kernels = {
            key: dense.kernel
            for key, dense in projections(model).items()
            if key in adapters
        }
        self.adapters = adapters
        self.saved = {}

    def __enter__(self):
        for key, kernel in self.kernels.items():
            a, b, scale = self.adapters[key]
            value = keras.ops.convert_to_numpy(kernel)
            self.saved[key] = value
            kernel.assign(
                value - scale * (a.astype(np.float64) @ b).astype(value.dtype)
            )
        return self

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            self.kernels[key].assign(value)
