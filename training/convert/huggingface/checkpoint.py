"""Reading a Hugging Face checkpoint directory, checked: its JSON files,
config.json's values, and its tensors copied into Keras variables (each
against the shape the config implies, every tensor accounted for)."""

import json
import math
import os

import numpy as np

from tfformer.errors import InputError
from tfformer.training.convert.huggingface.safetensors import Checkpoint


def read_json(directory, name, required=True, kind=dict):
    """A JSON file of the checkpoint directory (None when absent and not
    `required`), checked to hold a `kind`; ValueError naming it when
    missing, broken or of another kind."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        if required:
            raise InputError(f"{directory} has no {name}.")
        return None
    with open(path, encoding="utf-8") as f:
        try:
            value = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(value, kind):
        raise InputError(
            f"{path} must hold a JSON {'object' if kind is dict else 'list'}. "
            f"Received: {type(value).__name__}"
        )
    return value


KIND_NAMES = {
    int: "an integer",
    float: "a number",
    (int, float): "a number",
    str: "a string",
    dict: "an object",
    list: "a list",
}


def finite_number(value):
    """Whether the int or float `value` is a finite float (NaN, infinities
    and integers past float's range are not)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def config_value(config, key, kind, where="config.json", default=None):
    """`config[key]`, checked to be a `kind` (ValueError naming the key)."""
    value = config.get(key, default)
    if value is None:
        raise InputError(f"{where} lacks {key!r}.")
    ok = (
        isinstance(value, kind) and not isinstance(value, bool)
        if kind in (int, float, (int, float))
        else isinstance(value, kind)
    )
    if not ok:
        expected = KIND_NAMES.get(kind, kind)
        raise InputError(f"{where}: {key!r} must be {expected}. Received: {value!r}")
    if kind is not int and isinstance(value, int | float) and not finite_number(value):
        raise InputError(f"{where}: {key!r} must be finite. Received: {value!r}")
    if kind is int and value <= 0:
        raise InputError(f"{where}: {key!r} must be positive. Received: {value!r}")
    return value


def config_choice(config, key, choices, default):
    """`config[key]` (`default` when absent), one of `choices` (ValueError
    naming the key and them)."""
    value = config.get(key, default)
    if isinstance(value, list | dict) or value not in choices:
        raise InputError(
            f"config.json: {key} must be one of {sorted(choices)}. Received: {value!r}"
        )
    return value


def check_multiple(key, value, divisor_key, divisor):
    """ValueError unless config.json's `key` is a multiple of `divisor_key`."""
    if value % divisor:
        raise InputError(
            f"config.json: {key} ({value}) must be a multiple of {divisor_key} "
            f"({divisor})."
        )


def attention_sizes(config, hidden_key="hidden_size", heads_key="num_attention_heads"):
    """(width, heads) of config.json (under the architecture's key names),
    the first a multiple of the second."""
    hidden = config_value(config, hidden_key, int)
    heads = config_value(config, heads_key, int)
    check_multiple(hidden_key, hidden, heads_key, heads)
    return hidden, heads


class Weights:
    """A checkpoint's tensors under a prefix the architecture's classes add
    ("bert." in `BertForSequenceClassification`, none in `BertModel`)."""

    def __init__(self, checkpoint, prefix):
        self.checkpoint = checkpoint
        self.prefix = prefix

    @classmethod
    def open(cls, source, probe, prefixes):
        """The weights of the checkpoint directory `source`, under the
        first of `prefixes` that holds the tensor `probe`."""
        checkpoint = Checkpoint(source)
        return cls(checkpoint, find_prefix(checkpoint, probe, prefixes))

    def __call__(self, name, shape):
        return self.checkpoint.get(self.prefix + name, shape)

    def has(self, name):
        return self.prefix + name in self.checkpoint


def find_prefix(checkpoint, probe, candidates):
    """The prefix among `candidates` under which `probe` exists."""
    for prefix in candidates:
        if prefix + probe in checkpoint:
            return prefix
    raise InputError(
        f"{checkpoint.directory}: the checkpoint has no tensor "
        f"{' or '.join(repr(p + probe) for p in candidates)}; is config.json's "
        "model_type right for these weights?"
    )


def refuse_unused(source, unused):
    """ValueError naming the checkpoint's tensors a conversion left unread
    (an option or architecture tfformer does not implement)."""
    if unused:
        raise InputError(
            f"{source}: tensors this conversion does not use (an unsupported "
            f"option or architecture?): {unused[:5]}"
            + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        )


def assign(variable, value, name):
    """`variable.assign(value)`, shapes checked (ValueError naming the tensor)."""
    if tuple(variable.shape) != tuple(value.shape):
        raise InputError(
            f"tensor {name!r}: shape {list(value.shape)} does not fit "
            f"{variable.path} {list(variable.shape)}."
        )
    variable.assign(value.astype(variable.dtype))


def linear(dense, weights, name, shape_out_in):
    """A torch Linear (weight [out, in], bias [out]) into a Keras Dense
    (kernel [in, out])."""
    out_dim, in_dim = shape_out_in
    assign(dense.kernel, weights(f"{name}.weight", (out_dim, in_dim)).T, name)
    assign(dense.bias, weights(f"{name}.bias", (out_dim,)), f"{name}.bias")


def layer_norm(layer, weights, name, dim):
    """A torch LayerNorm's weight/bias (or TF-era gamma/beta, as older BERT
    checkpoints name them) into a Keras LayerNormalization."""
    if weights.has(f"{name}.weight"):
        scale, offset = "weight", "bias"
    elif weights.has(f"{name}.gamma"):
        scale, offset = "gamma", "beta"
    else:
        raise InputError(
            f"{weights.checkpoint.directory}: the checkpoint has no tensor "
            f"{weights.prefix + name + '.weight'!r} (or "
            f"{weights.prefix + name + '.gamma'!r})."
        )
    assign(layer.gamma, weights(f"{name}.{scale}", (dim,)), f"{name}.{scale}")
    assign(layer.beta, weights(f"{name}.{offset}", (dim,)), f"{name}.{offset}")


def load_encoder_layer(block, weights, layer, sizes, *, attention, norms, bias=True):
    """The tensors of one Hugging Face `BertLayer`-shaped block (BERT's,
    ViT's) into a tfformer encoder block: `{layer}.{attention}.query` (key,
    value; without biases when not `bias`), `{layer}.attention.output.dense`,
    `{layer}.intermediate.dense`, `{layer}.output.dense`, and the LayerNorms
    `norms` (the attention's, then the feed-forward's)."""
    d, inner = sizes["hidden_dim"], sizes["intermediate_dim"]
    heads = block.self_attention
    for part, dense in (
        ("query", heads.query_dense),
        ("key", heads.key_dense),
        ("value", heads.value_dense),
    ):
        name = f"{layer}.{attention}.{part}"
        if bias:
            linear(dense, weights, name, (d, d))
        else:  # Hugging Face's Linear(bias=False): a bias tensor is unused
            assign(dense.kernel, weights(f"{name}.weight", (d, d)).T, name)
            dense.bias.assign(np.zeros((d,), dense.bias.dtype))
    linear(heads.output_dense, weights, f"{layer}.attention.output.dense", (d, d))
    layer_norm(block.self_attention_norm, weights, f"{layer}.{norms[0]}", d)
    linear(
        block.ffn.intermediate_dense, weights, f"{layer}.intermediate.dense", (inner, d)
    )
    linear(block.ffn.output_dense, weights, f"{layer}.output.dense", (d, inner))
    layer_norm(block.ffn_norm, weights, f"{layer}.{norms[1]}", d)


def config_flag(config, key, default, where="config.json"):
    """`config[key]` (`default` when absent or null), true or false: a
    string such as "no" is refused, not read as true."""
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InputError(f"{where}: {key} must be true or false. Received: {value!r}")
    return value
