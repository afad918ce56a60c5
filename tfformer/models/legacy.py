"""Models saved before tfformer had backbones, rebuilt as today's classes.

Until version 0.1 every tfformer model was a plain functional `keras.Model`
whose parts were found by layer name (`decoder_block_3`,
`token_embedding`, ...). `keras.saving.load_model` still reads such a file
(every layer in it is a registered tfformer or Keras layer), but gives a
`Functional` without `.backbone` or typed handles. `upgrade_legacy_model`
reads the sizes from those layers, builds the backbone and task model of
today and copies every weight across.

This is the one module of the library that looks layers up by name: the
names are the only structure an old file has. The new classes keep the same
layer names, so the copy is by name; every weight must find its place or the
upgrade is refused.
"""

import numpy as np

from tfformer.errors import InputError
from tfformer.models.backbone import Backbone
from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.causal_lm import CausalLM
from tfformer.models.gpt_backbone import GPTBackbone
from tfformer.models.image_classifier import ImageClassifier
from tfformer.models.llama_backbone import LlamaBackbone
from tfformer.models.masked_lm import MaskedLM
from tfformer.models.sentence_embedder import SentenceEmbedder
from tfformer.models.seq2seq_backbone import Seq2SeqBackbone
from tfformer.models.seq2seq_lm import Seq2SeqLM
from tfformer.models.task_model import TaskModel
from tfformer.models.text_classifier import TextClassifier
from tfformer.models.vit_backbone import ViTBackbone

# Block settings that are backbone arguments under the same name.
BLOCK_KEYS = (
    "num_heads",
    "intermediate_dim",
    "dropout",
    "activation_dropout",
    "activation",
    "layer_norm_epsilon",
)


def _layers(model):
    return {layer.name: layer for layer in model.layers}


def _numbered(layers, prefix):
    found = sorted(
        (int(name[len(prefix) :]), layer)
        for name, layer in layers.items()
        if name.startswith(prefix) and name[len(prefix) :].isdigit()
    )
    return [layer for _, layer in found]


def _block_settings(block, *extra):
    config = block.get_config()
    return {key: config[key] for key in (*BLOCK_KEYS, *extra) if key in config}


def _seq2seq(layers, policy):
    decoder = layers["decoder_embedding"].get_config()
    encoder_blocks = _numbered(layers, "encoder_block_")
    decoder_blocks = _numbered(layers, "decoder_block_")
    encoder = layers.get("encoder_embedding")
    if encoder is None:
        tie = "all"
    else:
        tie = "decoder" if decoder["tie_weights"] else "none"
    return Seq2SeqBackbone(
        encoder.vocabulary_size if encoder else decoder["vocabulary_size"],
        decoder["vocabulary_size"],
        num_encoder_layers=len(encoder_blocks),
        num_decoder_layers=len(decoder_blocks),
        hidden_dim=decoder["embedding_dim"],
        max_sequence_length=decoder["sequence_length"],
        position=decoder["position"],
        scale_embeddings=decoder["scale_embeddings"],
        tie_embeddings=tie,
        dtype=policy,
        **_block_settings(
            decoder_blocks[0], "normalize_first", "num_key_value_heads", "fused_qkv"
        ),
    )


def _decoder(layers, policy):
    embedding = layers["decoder_embedding"].get_config()
    blocks = _numbered(layers, "decoder_block_")
    settings = _block_settings(
        blocks[0],
        "normalize_first",
        "num_key_value_heads",
        "rotary_max_wavelength",
        "normalization",
        "gated_ffn",
        "use_bias",
    )
    common = dict(
        num_layers=len(blocks),
        hidden_dim=embedding["embedding_dim"],
        max_sequence_length=embedding["sequence_length"],
        tie_embeddings=embedding["tie_weights"],
        padding_logit=embedding.get("padding_logit"),
        dtype=policy,
    )
    rotary = embedding["position"] == "none"
    activation = settings["activation"]
    activation = activation if isinstance(activation, str) else str(activation)
    llama = (
        rotary
        and settings.get("normalization") == "rms"
        and settings.get("gated_ffn")
        and settings.get("normalize_first")
        and not settings.get("use_bias", True)
        and "silu" in activation
    )
    if llama:
        return LlamaBackbone(
            embedding["vocabulary_size"],
            num_heads=settings["num_heads"],
            intermediate_dim=settings["intermediate_dim"],
            num_key_value_heads=settings.get("num_key_value_heads"),
            rope_max_wavelength=settings["rotary_max_wavelength"],
            layer_norm_epsilon=settings["layer_norm_epsilon"],
            dropout=settings["dropout"],
            activation_dropout=settings.get("activation_dropout"),
            **common,
        )
    if not rotary:
        settings["rotary_max_wavelength"] = 10000
    return GPTBackbone(
        embedding["vocabulary_size"],
        position="rotary" if rotary else embedding["position"],
        **settings,
        **common,
    )


def _bert(layers, policy, **kwargs):
    embedding = layers["token_embedding"].get_config()
    blocks = _numbered(layers, "encoder_block_")
    return BertBackbone(
        embedding["vocabulary_size"],
        num_layers=len(blocks),
        hidden_dim=embedding["embedding_dim"],
        max_sequence_length=embedding["sequence_length"],
        num_segments=layers["segment_embedding"].input_dim,
        dtype=policy,
        **_block_settings(blocks[0]),
        **kwargs,
    )


def _vit(model, layers, policy):
    patches = layers["patch_embedding"]
    blocks = _numbered(layers, "encoder_block_")
    settings = _block_settings(blocks[0])
    settings["layer_norm_epsilon"] = layers["encoder_norm"].epsilon
    height, width, channels = model.inputs[0].shape[1:]
    statistics = {}
    if "pixel_normalization" in layers:
        norm = layers["pixel_normalization"].get_config()
        statistics = {
            "pixel_mean": np.ravel(norm["mean"]).tolist(),
            "pixel_std": np.sqrt(np.ravel(norm["variance"])).tolist(),
        }
    return ViTBackbone(
        height if height == width else (height, width),
        patch_size=patches.patch_size,
        num_channels=channels,
        num_layers=len(blocks),
        hidden_dim=patches.hidden_dim,
        dtype=policy,
        **settings,
        **statistics,
    )


def _rebuilt(model):
    """Today's model for a legacy functional `model`, with fresh weights."""
    layers = _layers(model)
    blocks = [layer for name, layer in layers.items() if "_block_" in name]
    policy = blocks[0].dtype_policy if blocks else None
    if "decoder_block_0" in layers and "encoder_block_0" in layers:
        return Seq2SeqLM(_seq2seq(layers, policy), name=model.name)
    if "decoder_block_0" in layers:
        return CausalLM(_decoder(layers, policy), name=model.name)
    if "patch_embedding" in layers:
        head = layers["head"]
        return ImageClassifier(_vit(model, layers, policy), head.units, name=model.name)
    if "segment_embedding" in layers:
        heads = ("classifier", "mlm_head", "pooling")
        if not any(head in layers for head in heads):
            return _bert(layers, policy, name=model.name)
        backbone = _bert(layers, policy)
        if "classifier" in layers:
            return TextClassifier(
                backbone,
                layers["classifier"].units,
                dropout=layers["classifier_dropout"].rate,
                name=model.name,
            )
        if "mlm_head" in layers:
            return MaskedLM(
                backbone,
                next_sentence_prediction="next_sentence_head" in layers,
                name=model.name,
            )
        if "pooling" in layers:
            pooling = layers["pooling"]
            return SentenceEmbedder(
                backbone,
                pooling=pooling.mode,
                normalize=pooling.normalize,
                name=model.name,
            )
    raise InputError(
        f"{model.name!r} is not a model tfformer built: none of its layers "
        "is a tfformer block, BERT embedding or patch embedding."
    )


def _named_layers(model):
    """{name: layer} of a rebuilt model, its backbone's layers included."""
    named = {}
    for layer in model.layers:
        if isinstance(layer, Backbone):
            named.update(_layers(layer))
        else:
            named[layer.name] = layer
    return named


def upgrade_legacy_model(model):
    """`model` as today's classes: unchanged if it is a `Backbone` or
    `TaskModel` already, else (a functional model saved by tfformer before
    its backbones) rebuilt with the same sizes and every weight copied.

    Raises:
        ValueError: `model` is no tfformer model, or one of its weights has
            no place in the rebuilt model (naming the layer).
    """
    if isinstance(model, Backbone | TaskModel):
        return model
    new = _rebuilt(model)
    targets = _named_layers(new)
    for layer in model.layers:
        if not layer.weights:
            continue
        target = targets.get(layer.name)
        if target is None:
            raise InputError(
                f"The saved model's layer {layer.name!r} has no counterpart in "
                f"the rebuilt {type(new).__name__}."
            )
        values = layer.get_weights()
        shapes = [w.shape for w in target.get_weights()], [v.shape for v in values]
        if shapes[0] != shapes[1]:
            raise InputError(
                f"Layer {layer.name!r}: the saved weights have shapes "
                f"{shapes[1]}, the rebuilt layer {shapes[0]}."
            )
        target.set_weights(values)
    return new
