"""Hugging Face checkpoint directories into tfformer run directories.

A checkpoint directory is what `save_pretrained` writes: `config.json`
(`model_type` names the architecture), `model.safetensors` (or its sharded
index) and the tokenizer's files. `convert(source, out)` reads it with
NumPy alone (no transformers, no torch), builds the tfformer model, copies
every tensor into it (each checked against the shape the config implies)
and writes a run directory.

Architectures: BERT-family encoders (`model_type` "bert": BERT, MiniLM,
sentence-transformers models) into a `sentence_embedding` run, which
`tfformer-predict`, `tfformer-export` and a text classifier's
`model.init_from` read (a `BertForSequenceClassification` into a
`text_classification` run, its head included); ViT image classifiers
(`model_type` "vit", `ViTForImageClassification`) into an
`image_classification` run, its preprocessing (rescale, per-channel
normalization) inside the model; and Llama-style decoders (`model_type`
"llama": RMSNorm, SwiGLU, rotary positions, grouped-query attention) and
GPT-2 (`model_type` "gpt2") into `causal_lm` runs: GPT-2's with its
byte-level BPE tokenizer (text in and out,
`tfformer.preprocessing.bpe_tokenizer`), Llama's
reading and writing token ids (its tokenizer is not converted), which a
causal_lm config's `model.init_from` fine-tunes (GPT-2's). A decoder's ids
are shifted by one inside the model, so that id 0 stays padding, and back by
its tokenizer.

Nothing is written unless the whole conversion succeeds: the run is built
in a temporary directory beside `out` and renamed into place.
"""

import json
import os
import re
import shutil
import tempfile

import numpy as np

from tfformer.runs.directory import RunDirectory, tokenizer_file
from tfformer.runs.manifest import (
    CausalLMManifest,
    ImageClassificationManifest,
    SentenceEmbeddingManifest,
    TextClassificationManifest,
    TokenizerEntry,
)
from tfformer.training.convert.safetensors import Checkpoint

# Hugging Face's BERT, ViT, Llama and GPT-2 drop no feed-forward hidden
# activations (tfformer's blocks drop them at `dropout` unless told). A
# converted model records this rate, and `model.init_from` fine-tuning keeps
# it unless the config sets `model.activation_dropout`.
HIDDEN_DROPOUT = 0.0


def read_json(directory, name, required=True, kind=dict):
    """A JSON file of the checkpoint directory (None when absent and not
    `required`), checked to hold a `kind`; ValueError naming it when
    missing, broken or of another kind."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        if required:
            raise ValueError(f"{directory} has no {name}.")
        return None
    with open(path, encoding="utf-8") as f:
        try:
            value = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(value, kind):
        raise ValueError(
            f"{path} must hold a JSON {'object' if kind is dict else 'list'}. "
            f"Received: {type(value).__name__}"
        )
    return value


def config_value(config, key, kind, where="config.json", default=None):
    """`config[key]`, checked to be a `kind` (ValueError naming the key)."""
    value = config.get(key, default)
    if value is None:
        raise ValueError(f"{where} lacks {key!r}.")
    ok = (
        isinstance(value, kind) and not isinstance(value, bool)
        if kind in (int, float, (int, float))
        else isinstance(value, kind)
    )
    if not ok:
        raise ValueError(f"{where}: {key!r} must be a {kind}. Received: {value!r}")
    if kind is int and value <= 0:
        raise ValueError(f"{where}: {key!r} must be positive. Received: {value!r}")
    return value


class Weights:
    """A checkpoint's tensors under a prefix the architecture's classes add
    ("bert." in `BertForSequenceClassification`, none in `BertModel`)."""

    def __init__(self, checkpoint, prefix):
        self.checkpoint = checkpoint
        self.prefix = prefix

    def __call__(self, name, shape):
        return self.checkpoint.get(self.prefix + name, shape)

    def has(self, name):
        return self.prefix + name in self.checkpoint


def find_prefix(checkpoint, probe, candidates):
    """The prefix among `candidates` under which `probe` exists."""
    for prefix in candidates:
        if prefix + probe in checkpoint:
            return prefix
    raise ValueError(
        f"{checkpoint.directory}: the checkpoint has no tensor "
        f"{' or '.join(repr(p + probe) for p in candidates)}; is config.json's "
        "model_type right for these weights?"
    )


def refuse_unused(source, unused):
    """ValueError naming the checkpoint's tensors a conversion left unread
    (an option or architecture tfformer does not implement)."""
    if unused:
        raise ValueError(
            f"{source}: tensors this conversion does not use (an unsupported "
            f"option or architecture?): {unused[:5]}"
            + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        )


def attention_sizes(config):
    """(hidden_size, num_attention_heads) of config.json, the first a
    multiple of the second."""
    hidden = config_value(config, "hidden_size", int)
    heads = config_value(config, "num_attention_heads", int)
    if hidden % heads:
        raise ValueError(
            f"config.json: hidden_size ({hidden}) must be a multiple of "
            f"num_attention_heads ({heads})."
        )
    return hidden, heads


def assign(variable, value, name):
    """`variable.assign(value)`, shapes checked (ValueError naming the tensor)."""
    if tuple(variable.shape) != tuple(value.shape):
        raise ValueError(
            f"tensor {name!r}: shape {list(value.shape)} does not fit "
            f"{variable.path} {list(variable.shape)}."
        )
    variable.assign(value.astype(variable.dtype))


# -- vocabularies --------------------------------------------------------------


# What a BERT checkpoint's tokenizer may be: Hugging Face's WordPiece
# tokenizers (other classes, e.g. BertJapaneseTokenizer with MeCab, split
# words differently and are refused).
BERT_TOKENIZER_CLASSES = (None, "BertTokenizer", "BertTokenizerFast")


def special_token(settings, key, default):
    """A special token of tokenizer_config.json (an AddedToken dict or a
    string; absent or null: `default`)."""
    token = settings.get(key)
    if isinstance(token, dict):  # a serialized AddedToken
        token = token.get("content")
    if token is None:
        return default
    if not isinstance(token, str):
        raise ValueError(
            f"tokenizer_config.json: {key!r} must be a string. Received: {token!r}"
        )
    return token


def wordpiece_vocabulary(directory):
    """(tokens in id order, tokenizer settings) of a BERT checkpoint: from
    `vocab.txt`, else from `tokenizer.json`'s WordPiece model; casing and
    accent stripping from `tokenizer.json`'s normalizer or
    `tokenizer_config.json` (Hugging Face's defaults otherwise)."""
    described = read_json(directory, "tokenizer.json", required=False)
    settings = read_json(directory, "tokenizer_config.json", required=False) or {}
    vocab_txt = os.path.join(directory, "vocab.txt")
    if os.path.isfile(vocab_txt):
        origin = vocab_txt
        with open(vocab_txt, encoding="utf-8") as f:
            tokens = f.read().split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
    elif described is not None:
        origin = os.path.join(directory, "tokenizer.json")
        model = described.get("model") or {}
        if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
            raise ValueError(
                f"{origin}: model.type must be 'WordPiece' with a vocab. "
                f"Received: model.type={model.get('type')!r}"
            )
        if model.get("continuing_subword_prefix", "##") != "##":
            raise ValueError(
                f"{origin}: continuing_subword_prefix must be '##'. "
                f"Received: {model.get('continuing_subword_prefix')!r}"
            )
        by_id = {i: t for t, i in model["vocab"].items()}
        if sorted(by_id) != list(range(len(by_id))) or len(by_id) != len(
            model["vocab"]
        ):
            raise ValueError(f"{origin}: the vocab's ids must be 0..N-1, each once.")
        tokens = [by_id[i] for i in range(len(by_id))]
    else:
        raise ValueError(f"{directory} has neither vocab.txt nor tokenizer.json.")
    seen = set()
    for token in tokens:
        if token in seen:
            raise ValueError(f"{origin}: token {token!r} appears twice.")
        seen.add(token)
    tokenizer_class = settings.get("tokenizer_class")
    if tokenizer_class not in BERT_TOKENIZER_CLASSES:
        raise ValueError(
            "tokenizer_config.json: tokenizer_class must be one of "
            f"{list(BERT_TOKENIZER_CLASSES[1:])}. Received: {tokenizer_class!r}"
        )
    if settings.get("tokenize_chinese_chars", True) is not True:
        raise ValueError(
            "tokenizer_config.json: tokenize_chinese_chars=false is not "
            "supported (BERT's pre-tokenizer splits CJK ideographs)."
        )
    lower_case = bool(settings.get("do_lower_case", True))
    strip_accents = settings.get("strip_accents")
    if described is not None:
        where = os.path.join(directory, "tokenizer.json")
        normalizer = described.get("normalizer")
        if not isinstance(normalizer, dict) or normalizer.get("type") != (
            "BertNormalizer"
        ):
            raise ValueError(
                f"{where}: normalizer must be a BertNormalizer. Received: "
                f"{normalizer!r}"
            )
        lower_case = bool(normalizer.get("lowercase", True))
        strip_accents = normalizer.get("strip_accents")
        if not normalizer.get("clean_text", True) or not normalizer.get(
            "handle_chinese_chars", True
        ):
            raise ValueError(
                f"{where}: a BertNormalizer without clean_text or "
                f"handle_chinese_chars is not supported. Received: {normalizer!r}"
            )
        pre = described.get("pre_tokenizer")
        if not isinstance(pre, dict) or pre.get("type") != "BertPreTokenizer":
            raise ValueError(
                f"{where}: pre_tokenizer must be a BertPreTokenizer. Received: {pre!r}"
            )
    if strip_accents is None:  # BERT's rule: accents go with the case
        strip_accents = lower_case
    special = {
        "pad": special_token(settings, "pad_token", "[PAD]"),
        "unk": special_token(settings, "unk_token", "[UNK]"),
        "start": special_token(settings, "cls_token", "[CLS]"),
        "end": special_token(settings, "sep_token", "[SEP]"),
    }
    mask = special_token(settings, "mask_token", "[MASK]")
    if mask in seen:
        special["mask"] = mask
    for role, token in special.items():
        if token not in seen:
            raise ValueError(
                f"{origin}: the {role} token {token!r} (tokenizer_config.json, or "
                "BERT's default) is not in the vocabulary."
            )
    return tokens, {
        "lower_case": lower_case,
        "special_tokens": special,
        "normalizer": "bert",
        "strip_accents": bool(strip_accents),
    }


# -- BERT ----------------------------------------------------------------------

BERT_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}


def bert_sizes(config):
    """`bert_encoder` keyword arguments from a BERT config.json."""
    hidden, heads = attention_sizes(config)
    position = config.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ValueError(
            "config.json: position_embedding_type must be 'absolute' (relative "
            f"position embeddings are not supported). Received: {position!r}"
        )
    act = config.get("hidden_act", "gelu")
    if act not in BERT_ACTIVATIONS:
        raise ValueError(
            f"config.json: hidden_act must be one of {sorted(BERT_ACTIVATIONS)}. "
            f"Received: {act!r}"
        )
    return {
        "vocabulary_size": config_value(config, "vocab_size", int),
        "num_layers": config_value(config, "num_hidden_layers", int),
        "hidden_dim": hidden,
        "num_heads": heads,
        "intermediate_dim": config_value(config, "intermediate_size", int),
        "max_sequence_length": config_value(config, "max_position_embeddings", int),
        "num_segments": config_value(config, "type_vocab_size", int, default=2),
        "activation": BERT_ACTIVATIONS[act],
        "layer_norm_epsilon": float(
            config_value(config, "layer_norm_eps", (int, float), default=1e-12)
        ),
    }


def bert_norm(layer, weights, name, dim):
    """A LayerNorm's weight/bias (or TF-era gamma/beta) into `layer`."""
    if weights.has(f"{name}.weight"):
        scale, offset = "weight", "bias"
    elif weights.has(f"{name}.gamma"):
        scale, offset = "gamma", "beta"
    else:
        raise ValueError(
            f"{weights.checkpoint.directory}: the checkpoint has no tensor "
            f"{weights.prefix + name + '.weight'!r} (or "
            f"{weights.prefix + name + '.gamma'!r})."
        )
    assign(layer.gamma, weights(f"{name}.{scale}", (dim,)), f"{name}.{scale}")
    assign(layer.beta, weights(f"{name}.{offset}", (dim,)), f"{name}.{offset}")


def linear(dense, weights, name, shape_out_in):
    """A torch Linear (weight [out, in], bias [out]) into a Keras Dense
    (kernel [in, out])."""
    out_dim, in_dim = shape_out_in
    assign(dense.kernel, weights(f"{name}.weight", (out_dim, in_dim)).T, name)
    assign(dense.bias, weights(f"{name}.bias", (out_dim,)), f"{name}.bias")


def load_bert_encoder(encoder, weights, sizes):
    """Copies a Hugging Face BERT's tensors into a `bert_encoder`."""
    d, inner = sizes["hidden_dim"], sizes["intermediate_dim"]
    tokens = encoder.token_embedding
    assign(
        tokens.token_embeddings,
        weights("embeddings.word_embeddings.weight", (sizes["vocabulary_size"], d)),
        "embeddings.word_embeddings.weight",
    )
    assign(
        tokens.position_embedding.position_embeddings,
        weights(
            "embeddings.position_embeddings.weight",
            (sizes["max_sequence_length"], d),
        ),
        "embeddings.position_embeddings.weight",
    )
    assign(
        encoder.segment_embedding.embeddings,
        weights("embeddings.token_type_embeddings.weight", (sizes["num_segments"], d)),
        "embeddings.token_type_embeddings.weight",
    )
    bert_norm(encoder.embeddings_norm, weights, "embeddings.LayerNorm", d)
    for i, block in enumerate(encoder.encoder_blocks):
        attention = block.self_attention
        layer = f"encoder.layer.{i}"
        for part, dense in (
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ):
            linear(dense, weights, f"{layer}.attention.self.{part}", (d, d))
        linear(
            attention.output_dense, weights, f"{layer}.attention.output.dense", (d, d)
        )
        bert_norm(
            block.self_attention_norm,
            weights,
            f"{layer}.attention.output.LayerNorm",
            d,
        )
        linear(
            block.ffn.intermediate_dense,
            weights,
            f"{layer}.intermediate.dense",
            (inner, d),
        )
        linear(block.ffn.output_dense, weights, f"{layer}.output.dense", (d, inner))
        bert_norm(block.ffn_norm, weights, f"{layer}.output.LayerNorm", d)
    if weights.has("pooler.dense.weight"):
        linear(encoder.pooler, weights, "pooler.dense", (d, d))
        return []
    return ["pooler"]


# sentence-transformers modules a converted run reproduces.
ST_MODULES = ("Transformer", "Pooling", "Normalize")


def sentence_transformers_settings(directory, max_positions):
    """(pooling, normalize, max_length, lower_case, found) from
    sentence-transformers' files (`modules.json`, `1_Pooling/config.json`,
    `sentence_bert_config.json`); without them: mean pooling, normalized,
    the whole position table. A module other than Transformer, Pooling and
    Normalize (a Dense projection, say) is refused, naming it."""
    modules = read_json(directory, "modules.json", required=False, kind=list)
    if modules is None:
        return "mean", True, max_positions, False, False
    kinds = []
    for module in modules:
        kind = module.get("type", "") if isinstance(module, dict) else None
        short = kind.rsplit(".", 1)[-1] if isinstance(kind, str) else None
        if short not in ST_MODULES:
            raise ValueError(
                f"{directory}/modules.json: modules must be among "
                f"{list(ST_MODULES)} (sentence-transformers); this one is not "
                f"converted. Received: {module!r}"
            )
        kinds.append((short, module.get("path", "")))
    names = [k for k, _ in kinds]
    if names.count("Transformer") != 1 or names[0] != "Transformer":
        raise ValueError(
            f"{directory}/modules.json: one Transformer module, first, is "
            f"expected. Received: {modules!r}"
        )
    pooling_dirs = [path for kind, path in kinds if kind == "Pooling"]
    if len(pooling_dirs) != 1:
        raise ValueError(
            f"{directory}/modules.json: one Pooling module is expected. "
            f"Received: {modules!r}"
        )
    where = f"{directory}/{pooling_dirs[0]}/config.json"
    config = read_json(directory, os.path.join(pooling_dirs[0], "config.json"))
    chosen = [
        mode
        for key, mode in (
            ("pooling_mode_mean_tokens", "mean"),
            ("pooling_mode_cls_token", "cls"),
            ("pooling_mode_max_tokens", "max"),
        )
        if config.get(key)
    ]
    others = [
        key
        for key in (
            "pooling_mode_mean_sqrt_len_tokens",
            "pooling_mode_weightedmean_tokens",
            "pooling_mode_lasttoken",
        )
        if config.get(key)
    ]
    if len(chosen) != 1 or others:
        raise ValueError(
            f"{where}: exactly one of pooling_mode_mean_tokens, "
            "pooling_mode_cls_token and pooling_mode_max_tokens must be true "
            f"(concatenated or other poolings are not supported). Received: {config!r}"
        )
    normalize = names[-1] == "Normalize"
    if "Normalize" in names[:-1]:
        raise ValueError(
            f"{directory}/modules.json: Normalize must be the last module. "
            f"Received: {modules!r}"
        )
    bert_config = read_json(directory, "sentence_bert_config.json", required=False)
    length = (bert_config or {}).get("max_seq_length", max_positions)
    if isinstance(length, bool) or not isinstance(length, int):
        length = None
    if length is None or not 4 <= length <= max_positions:
        raise ValueError(
            f"{directory}/sentence_bert_config.json: max_seq_length must be an "
            f"int in [4, {max_positions}]. Received: "
            f"{(bert_config or {}).get('max_seq_length')!r}"
        )
    lower_case = bool((bert_config or {}).get("do_lower_case", False))
    return chosen[0], normalize, length, lower_case, True


def sequence_classification_labels(config):
    """The label names of a `BertForSequenceClassification` config.json
    (`id2label` by id; Hugging Face's LABEL_i without one), refusing the
    heads tfformer's classifier is not: multi-label (sigmoid) and
    regression."""
    problem = config.get("problem_type")
    if problem not in (None, "single_label_classification"):
        raise ValueError(
            "config.json: problem_type must be 'single_label_classification' "
            "(a softmax over the labels; multi-label and regression heads are "
            f"not converted). Received: {problem!r}"
        )
    id2label = config.get("id2label")
    if id2label is None:
        count = config_value(config, "num_labels", int, default=2)
        return [f"LABEL_{i}" for i in range(count)]
    if not isinstance(id2label, dict) or sorted(id2label, key=str) != sorted(
        str(i) for i in range(len(id2label))
    ):
        raise ValueError(
            "config.json: id2label must map the ids 0, 1, ... to label names. "
            f"Received: {id2label!r}"
        )
    labels = [str(id2label[str(i)]) for i in range(len(id2label))]
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise ValueError(
            "config.json: id2label must name two or more distinct labels (one "
            f"output is a regression head). Received: {id2label!r}"
        )
    return labels


def bert_tokenizer(tokens, settings, sizes):
    """The WordPiece tokenizer of a BERT checkpoint's vocabulary `tokens`
    (`wordpiece_vocabulary`'s settings), its size checked against
    config.json's."""
    from tfformer.training.text.wordpiece import WordPieceTokenizer

    if len(tokens) != sizes["vocabulary_size"]:
        raise ValueError(
            f"config.json: vocab_size is {sizes['vocabulary_size']} but the "
            f"tokenizer has {len(tokens)} tokens."
        )
    options = {k: v for k, v in settings.items() if k != "lower_case"}
    return WordPieceTokenizer(tokens, lower_case=settings["lower_case"], **options)


def load_bert(source, sizes, prefixes):
    """(checkpoint, weights, encoder, fresh): a `bert_encoder` of `sizes`
    holding the checkpoint's tensors (found under the first of `prefixes`
    that has them); `fresh` lists what kept random weights (the pooler)."""
    import keras

    from tfformer.models import bert_encoder

    checkpoint = Checkpoint(source)
    weights = Weights(
        checkpoint,
        find_prefix(checkpoint, "embeddings.word_embeddings.weight", prefixes),
    )
    keras.utils.set_random_seed(0)
    encoder = bert_encoder(dropout=0.0, activation_dropout=HIDDEN_DROPOUT, **sizes)
    return checkpoint, weights, encoder, load_bert_encoder(encoder, weights, sizes)


def convert_bert(source, config, staging, progress):
    """A BERT checkpoint into a `sentence_embedding` run in `staging`, or,
    for `BertForSequenceClassification`, a `text_classification` run."""
    from tfformer.models import bert_embedder

    sizes = bert_sizes(config)
    architectures = config.get("architectures") or []
    if "BertForSequenceClassification" in architectures:
        return convert_bert_classifier(source, config, sizes, staging, progress)
    tokens, tokenizer_settings = wordpiece_vocabulary(source)
    pooling, normalize, max_length, st_lower, from_st = sentence_transformers_settings(
        source, sizes["max_sequence_length"]
    )
    if st_lower and not tokenizer_settings["lower_case"]:
        # sentence-transformers lower-cases the text itself first.
        tokenizer_settings["lower_case"] = True
    tokenizer = bert_tokenizer(tokens, tokenizer_settings, sizes)
    checkpoint, weights, encoder, fresh = load_bert(source, sizes, ("", "bert."))
    model = bert_embedder(encoder, pooling=pooling, normalize=normalize)
    progress(
        f"BERT encoder: {sizes['num_layers']} layers, width {sizes['hidden_dim']}, "
        f"{sizes['num_heads']} heads, {len(tokens)} tokens; pooling {pooling}"
        f"{', normalized' if normalize else ''}, max_length {max_length}"
        + ("" if from_st else " (no sentence-transformers files: defaults)")
    )
    if fresh:
        progress("No pooler in the checkpoint: the pooler keeps random weights.")
    left = [n for n in checkpoint.unused() if not n.endswith("position_ids")]
    unused = [n for n in left if n.startswith(weights.prefix)]
    heads = [n for n in left if not n.startswith(weights.prefix)]
    if heads:
        progress(
            f"Not converted (task heads; this run embeds): {heads[:4]}"
            + (f" and {len(heads) - 4} more" if len(heads) > 4 else "")
        )
    refuse_unused(source, unused)
    manifest = SentenceEmbeddingManifest(
        tokenizers={"text": wordpiece_entry(tokenizer)},
        max_length=max_length,
        pooling=pooling,
        normalize=normalize,
    )
    return write_bert_run(
        staging, manifest, model, tokenizer, sizes, pooling=pooling, normalize=normalize
    )


def convert_bert_classifier(source, config, sizes, staging, progress):
    """A `BertForSequenceClassification` checkpoint (encoder, pooler and the
    `classifier` linear head on the pooled [CLS]) into a
    `text_classification` run in `staging`."""
    from tfformer.models import bert_classifier

    labels = sequence_classification_labels(config)
    tokens, tokenizer_settings = wordpiece_vocabulary(source)
    tokenizer = bert_tokenizer(tokens, tokenizer_settings, sizes)
    checkpoint, weights, encoder, fresh = load_bert(source, sizes, ("bert.", ""))
    if fresh:
        raise ValueError(
            f"{source}: the checkpoint has no tensor "
            f"{weights.prefix + 'pooler.dense.weight'!r}; "
            "BertForSequenceClassification classifies the pooled [CLS]."
        )
    model = bert_classifier(encoder, len(labels), dropout=0.0)
    shape = (len(labels), sizes["hidden_dim"])
    linear(model.head, Weights(checkpoint, ""), "classifier", shape)
    refuse_unused(
        source, [n for n in checkpoint.unused() if not n.endswith("position_ids")]
    )
    max_length = sizes["max_sequence_length"]
    progress(
        f"BERT classifier: {sizes['num_layers']} layers, width "
        f"{sizes['hidden_dim']}, {sizes['num_heads']} heads, {len(tokens)} tokens; "
        f"labels {labels}, max_length {max_length}"
    )
    manifest = TextClassificationManifest(
        tokenizers={"text": wordpiece_entry(tokenizer)},
        max_length=max_length,
        labels=tuple(labels),
        pairs=False,
    )
    return write_bert_run(staging, manifest, model, tokenizer, sizes)


def wordpiece_entry(tokenizer):
    """The manifest entry of a converted WordPiece tokenizer."""
    return TokenizerEntry("wordpiece", tokenizer.lower_case, **tokenizer.options())


def write_bert_run(staging, manifest, model, tokenizer, sizes, **model_keys):
    """Writes a converted BERT's run (WordPiece vocabulary, model and
    `manifest`) into `staging`; returns its training config (`model_keys`
    added to its model section)."""
    run = RunDirectory(staging)
    tokenizer.save(run.file(tokenizer_file("wordpiece", "text")))
    model.save(run.file("model.keras"))
    run.write_manifest(manifest)
    return {
        "task": manifest.task,
        "data": {
            "tokenizer": "wordpiece",
            "vocabulary_size": tokenizer.vocabulary_size,
            "lower_case": tokenizer.lower_case,
            "max_length": manifest.max_length,
        },
        "model": {
            "num_layers": sizes["num_layers"],
            "hidden_dim": sizes["hidden_dim"],
            "num_heads": sizes["num_heads"],
            "intermediate_dim": sizes["intermediate_dim"],
            "dropout": 0.0,
            "activation_dropout": HIDDEN_DROPOUT,
            **model_keys,
        },
    }


# -- ViT -----------------------------------------------------------------------


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
    if image_size % patch:
        raise ValueError(
            f"config.json: image_size ({image_size}) must be a multiple of "
            f"patch_size ({patch})."
        )
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise ValueError(
            f"config.json: hidden_act must be 'gelu' (exact, as ViT). Received: {act!r}"
        )
    channels = config_value(config, "num_channels", int, default=3)
    if channels != 3:
        raise ValueError(
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
        raise ValueError(
            "config.json: 'id2label' must map class ids to names. Received: "
            f"{id2label!r}"
        )
    try:
        ids = sorted(int(k) for k in id2label)
    except ValueError:
        raise ValueError(
            "config.json: 'id2label' keys must be class ids (0, 1, ...). "
            f"Received: {sorted(id2label)[:5]}"
        ) from None
    if ids != list(range(len(ids))):
        raise ValueError(
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
        raise ValueError(
            f"{where}: the image processor must be one of "
            f"{[k for k in VIT_PROCESSORS if k]} (resize, rescale, normalize). "
            f"Received: {kind!r}"
        )
    if settings.get("do_center_crop") or settings.get("crop_size"):
        raise ValueError(f"{where}: center cropping is not supported.")
    scale = 1.0
    if settings.get("do_rescale", True):
        scale = float(
            config_value(settings, "rescale_factor", (int, float), where, 1 / 255)
        )
        if scale <= 0:
            raise ValueError(
                f"{where}: 'rescale_factor' must be positive. Received: {scale!r}"
            )
    mean, std = [0.0] * 3, [1.0] * 3
    if settings.get("do_normalize", True):
        mean = settings.get("image_mean", [0.5] * 3)
        std = settings.get("image_std", [0.5] * 3)
        for key, values in (("image_mean", mean), ("image_std", std)):
            if (
                not isinstance(values, list)
                or len(values) != 3
                or not all(isinstance(v, int | float) for v in values)
            ):
                raise ValueError(
                    f"{where}: {key!r} must be 3 numbers. Received: {values!r}"
                )
        if min(std) <= 0:
            raise ValueError(f"{where}: 'image_std' must be positive. Received: {std}")
    # (x * scale - mean) / std = (x - mean / scale) / (std / scale)
    return [m / scale for m in mean], [s / scale for s in std]


def load_vit(model, weights, sizes, num_classes):
    """Copies a Hugging Face ViT's tensors into an `ImageClassifier`."""
    d, inner, p = sizes["hidden_dim"], sizes["intermediate_dim"], sizes["patch_size"]
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
        attention = block.self_attention
        layer = f"encoder.layer.{i}"
        for part, dense in (
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ):
            name = f"{layer}.attention.attention.{part}"
            assign(dense.kernel, weights(f"{name}.weight", (d, d)).T, name)
            if sizes["qkv_bias"]:
                assign(dense.bias, weights(f"{name}.bias", (d,)), f"{name}.bias")
            else:  # Hugging Face's Linear(bias=False): a bias tensor is unused
                dense.bias.assign(np.zeros((d,), dense.bias.dtype))
        linear(
            attention.output_dense, weights, f"{layer}.attention.output.dense", (d, d)
        )
        bert_norm(block.self_attention_norm, weights, f"{layer}.layernorm_before", d)
        linear(
            block.ffn.intermediate_dense,
            weights,
            f"{layer}.intermediate.dense",
            (inner, d),
        )
        linear(block.ffn.output_dense, weights, f"{layer}.output.dense", (d, inner))
        bert_norm(block.ffn_norm, weights, f"{layer}.layernorm_after", d)
    bert_norm(model.backbone.encoder_norm, weights, "layernorm", d)
    head = Weights(weights.checkpoint, "")
    linear(model.head, head, "classifier", (num_classes, d))


def convert_vit(source, config, staging, progress):
    """A ViT image classifier (`ViTForImageClassification`) into an
    `image_classification` run in `staging`."""
    import keras

    from tfformer.models import vit

    sizes = vit_sizes(config)
    qkv_bias = config.get("qkv_bias", True)
    if not isinstance(qkv_bias, bool):
        raise ValueError(
            f"config.json: 'qkv_bias' must be true or false. Received: {qkv_bias!r}"
        )
    labels = vit_labels(config, progress)
    mean, std = vit_pixel_statistics(source)
    checkpoint = Checkpoint(source)
    if "classifier.weight" not in checkpoint:
        raise ValueError(
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
    run = RunDirectory(staging)
    model.save(run.file("model.keras"))
    run.write_manifest(
        ImageClassificationManifest(
            tokenizers={}, image_size=sizes["image_size"], labels=tuple(labels)
        )
    )
    return {
        "task": "image_classification",
        "data": {"image_size": sizes["image_size"], "class_names": labels},
        "model": {
            "preset": "vit_tiny",
            "patch_size": sizes["patch_size"],
            "num_layers": sizes["num_layers"],
            "hidden_dim": sizes["hidden_dim"],
            "num_heads": sizes["num_heads"],
            "intermediate_dim": sizes["intermediate_dim"],
            "dropout": 0.0,
            "activation_dropout": HIDDEN_DROPOUT,
        },
    }


# -- decoders: ids shifted by one -----------------------------------------------

# A decoder checkpoint's id 0 is a real token (GPT-2's and Llama 3's "!",
# Llama 2's "<unk>"; SmolLM's "<|endoftext|>") and tfformer's models mask
# id 0: the converted model's ids are the checkpoint's plus one, and id 0's
# logit is this constant (padding takes no probability). The run's token-id
# tokenizer adds and removes the one.
ID_OFFSET = 1
PADDING_LOGIT = -1e4


def shifted_rows(matrix):
    """`matrix` (V, d) under a zero row: row k + 1 holds the checkpoint's id k."""
    return np.concatenate([np.zeros_like(matrix[:1]), matrix], axis=0)


def decoder_special_id(config, key, default, vocabulary_size, progress):
    """config.json's `bos_token_id` or `eos_token_id` (a list, as Llama 3's
    eos: its first, said), in the model's ids."""
    value = config.get(key, default)
    if isinstance(value, list) and value:
        progress(f"{key} lists {value}: generation stops at the first, {value[0]}.")
        value = value[0]
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value < vocabulary_size
    ):
        raise ValueError(
            f"config.json: {key} must be a token id below vocab_size "
            f"({vocabulary_size}). Received: {value!r}"
        )
    return value + ID_OFFSET


def write_decoder_run(staging, model, tokenizer, kind, sizes):
    """Writes a converted decoder's `causal_lm` run into `staging`; returns
    its training config."""
    run = RunDirectory(staging)
    tokenizer.save(run.file(tokenizer_file(kind, "text")))
    model.save(run.file("model.keras"))
    context = sizes["max_sequence_length"]
    run.write_manifest(
        CausalLMManifest(tokenizers={"text": TokenizerEntry(kind)}, max_length=context)
    )
    return {
        "task": "causal_lm",
        "data": {
            "tokenizer": kind,
            "vocabulary_size": sizes["vocabulary_size"],
            "max_length": context,
        },
        "model": {
            "num_layers": sizes["num_layers"],
            "hidden_dim": sizes["hidden_dim"],
            "num_heads": sizes["num_heads"],
            "intermediate_dim": sizes["intermediate_dim"],
            "dropout": 0.0,
            "activation_dropout": HIDDEN_DROPOUT,
        },
    }


# -- Llama ---------------------------------------------------------------------


def llama_sizes(config):
    """`LlamaBackbone` keyword arguments from a Llama config.json (plus
    `vocabulary_size`, in the model's ids: one more than the checkpoint's)."""
    hidden, heads = attention_sizes(config)
    kv_heads = config_value(config, "num_key_value_heads", int, default=heads)
    if heads % kv_heads:
        raise ValueError(
            f"config.json: num_attention_heads ({heads}) must be a multiple of "
            f"num_key_value_heads ({kv_heads})."
        )
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim != hidden // heads:
        raise ValueError(
            "config.json: head_dim must be hidden_size / num_attention_heads "
            f"({hidden // heads}). Received: {head_dim!r}"
        )
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(
            f"config.json: hidden_act must be 'silu' (SwiGLU). Received: {act!r}"
        )
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key, False):
            raise ValueError(
                f"config.json: {key} must be false (tfformer's Llama has no "
                f"biases). Received: {config[key]!r}"
            )
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling")
    plain = (None, {"rope_type": "default"}, {"type": "default"})
    if scaling not in plain or rope.get("rope_type", "default") != "default":
        raise ValueError(
            "config.json: rope_scaling must be null (plain rotary positions; "
            f"Llama 3's and linear scaling are not supported). Received: "
            f"{scaling if scaling is not None else rope!r}"
        )
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0:
        raise ValueError(
            f"config.json: rope_theta must be positive. Received: {theta!r}"
        )
    return {
        "vocabulary_size": config_value(config, "vocab_size", int) + ID_OFFSET,
        "num_layers": config_value(config, "num_hidden_layers", int),
        "hidden_dim": hidden,
        "num_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_dim": config_value(config, "intermediate_size", int),
        "max_sequence_length": config_value(config, "max_position_embeddings", int),
        "layer_norm_epsilon": float(
            config_value(config, "rms_norm_eps", (int, float), default=1e-6)
        ),
        "rope_max_wavelength": float(theta),
        "tie_embeddings": bool(config.get("tie_word_embeddings", False)),
    }


def load_llama(model, weights, sizes, checkpoint):
    """Copies a Hugging Face Llama's tensors into a `CausalLM` on a
    `LlamaBackbone`."""
    d, inner = sizes["hidden_dim"], sizes["intermediate_dim"]
    kv = sizes["num_key_value_heads"] * (d // sizes["num_heads"])
    vocab = sizes["vocabulary_size"] - ID_OFFSET
    embedding = model.backbone.token_embedding
    name = "embed_tokens.weight"
    assign(embedding.token_embeddings, shifted_rows(weights(name, (vocab, d))), name)
    if not sizes["tie_embeddings"]:
        head = Weights(checkpoint, "")("lm_head.weight", (vocab, d))
        assign(embedding.reverse_embeddings, shifted_rows(head).T, "lm_head.weight")
    elif "lm_head.weight" in checkpoint:
        checkpoint.get("lm_head.weight", (vocab, d))  # tied: the same matrix
    for i, block in enumerate(model.backbone.decoder_blocks):
        attention = block.self_attention
        layer = f"layers.{i}"
        for part, dense, units in (
            ("q", attention.query_dense, d),
            ("k", attention.key_dense, kv),
            ("v", attention.value_dense, kv),
        ):
            name = f"{layer}.self_attn.{part}_proj.weight"
            assign(dense.kernel, weights(name, (units, d)).T, name)
        name = f"{layer}.self_attn.o_proj.weight"
        assign(attention.output_dense.kernel, weights(name, (d, d)).T, name)
        ffn = block.ffn
        for part, dense, shape in (
            ("gate", ffn.gate_dense, (inner, d)),
            ("up", ffn.intermediate_dense, (inner, d)),
            ("down", ffn.output_dense, (d, inner)),
        ):
            name = f"{layer}.mlp.{part}_proj.weight"
            assign(dense.kernel, weights(name, shape).T, name)
        for norm, target in (
            ("input_layernorm", block.self_attention_norm),
            ("post_attention_layernorm", block.ffn_norm),
        ):
            name = f"{layer}.{norm}.weight"
            assign(target.gamma, weights(name, (d,)), name)
    assign(model.backbone.final_norm.gamma, weights("norm.weight", (d,)), "norm.weight")


def convert_llama(source, config, staging, progress):
    """A Llama-style decoder (`LlamaForCausalLM`) into a `causal_lm` run
    that reads and writes token ids."""
    import keras

    from tfformer.models import CausalLM, LlamaBackbone
    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer

    sizes = llama_sizes(config)
    vocab = sizes["vocabulary_size"]
    start = decoder_special_id(config, "bos_token_id", 1, vocab - ID_OFFSET, progress)
    end = decoder_special_id(config, "eos_token_id", 2, vocab - ID_OFFSET, progress)
    tokenizer = TokenIdTokenizer(vocab, start, end, pad_id=0, id_offset=ID_OFFSET)
    checkpoint = Checkpoint(source)
    weights = Weights(
        checkpoint, find_prefix(checkpoint, "embed_tokens.weight", ("model.", ""))
    )
    keras.utils.set_random_seed(0)
    backbone = LlamaBackbone(
        dropout=0.0,
        activation_dropout=HIDDEN_DROPOUT,
        padding_logit=PADDING_LOGIT,
        **sizes,
    )
    model = CausalLM(backbone, name="llama")
    load_llama(model, weights, sizes, checkpoint)
    progress(
        f"Llama decoder: {sizes['num_layers']} layers, width {sizes['hidden_dim']}, "
        f"{sizes['num_heads']} heads ({sizes['num_key_value_heads']} key/value), "
        f"{vocab - ID_OFFSET} tokens, context {sizes['max_sequence_length']}; "
        f"token ids in and out (the checkpoint's; the model's are one higher, id "
        f"0 padding), start {start - ID_OFFSET}, end {end - ID_OFFSET}"
    )
    unused = [n for n in checkpoint.unused() if "rotary_emb" not in n]
    refuse_unused(source, unused)
    return write_decoder_run(staging, model, tokenizer, "ids", sizes)


# -- GPT-2 ---------------------------------------------------------------------

# config.json's activation_function: the tanh form ("gelu_new", GPT-2's) or
# the exact one.
GPT2_ACTIVATIONS = {
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "gelu": "gelu",
    "relu": "relu",
}


def gpt2_sizes(config):
    """`gpt_decoder` keyword arguments from a GPT-2 config.json (in the
    model's ids: one more token than the checkpoint's)."""
    hidden = config_value(config, "n_embd", int)
    heads = config_value(config, "n_head", int)
    if hidden % heads:
        raise ValueError(
            f"config.json: n_embd ({hidden}) must be a multiple of n_head ({heads})."
        )
    act = config.get("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise ValueError(
            f"config.json: activation_function must be one of "
            f"{sorted(GPT2_ACTIVATIONS)}. Received: {act!r}"
        )
    for key, supported in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if config.get(key, supported) is not supported:
            raise ValueError(
                f"config.json: {key} must be {str(supported).lower()} (tfformer's "
                f"GPT-2 attention). Received: {config[key]!r}"
            )
    inner = config.get("n_inner")
    if inner is None:
        inner = 4 * hidden
    return {
        "vocabulary_size": config_value(config, "vocab_size", int) + ID_OFFSET,
        "num_layers": config_value(config, "n_layer", int),
        "hidden_dim": hidden,
        "num_heads": heads,
        "intermediate_dim": config_value({"n_inner": inner}, "n_inner", int),
        "max_sequence_length": config_value(config, "n_positions", int),
        "activation": GPT2_ACTIVATIONS[act],
        "layer_norm_epsilon": float(
            config_value(config, "layer_norm_epsilon", (int, float), default=1e-5)
        ),
        "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
    }


def load_gpt2(model, weights, sizes, checkpoint):
    """Copies a Hugging Face GPT-2's tensors into a `gpt_decoder` whose ids
    are the checkpoint's plus one. Conv1D weights are (in, out) already."""
    d, inner = sizes["hidden_dim"], sizes["intermediate_dim"]
    vocab = sizes["vocabulary_size"] - ID_OFFSET
    embedding = model.backbone.token_embedding
    name = "wte.weight"
    assign(embedding.token_embeddings, shifted_rows(weights(name, (vocab, d))), name)
    name = "wpe.weight"
    assign(
        embedding.position_embedding.position_embeddings,
        weights(name, (sizes["max_sequence_length"], d)),
        name,
    )
    if not sizes["tie_embeddings"]:
        name = "lm_head.weight"
        head = Weights(checkpoint, "")(name, (vocab, d))
        assign(embedding.reverse_embeddings, shifted_rows(head).T, name)
    elif "lm_head.weight" in checkpoint:
        checkpoint.get("lm_head.weight", (vocab, d))  # tied: the same matrix

    def norm(target, name):
        assign(target.gamma, weights(f"{name}.weight", (d,)), f"{name}.weight")
        assign(target.beta, weights(f"{name}.bias", (d,)), f"{name}.bias")

    def conv1d(dense, name, shape):
        assign(dense.kernel, weights(f"{name}.weight", shape), f"{name}.weight")
        assign(dense.bias, weights(f"{name}.bias", shape[1:]), f"{name}.bias")

    for i, block in enumerate(model.backbone.decoder_blocks):
        attention = block.self_attention
        layer = f"h.{i}"
        norm(block.self_attention_norm, f"{layer}.ln_1")
        name = f"{layer}.attn.c_attn"
        kernel = weights(f"{name}.weight", (d, 3 * d))
        bias = weights(f"{name}.bias", (3 * d,))
        for k, dense in enumerate(
            (attention.query_dense, attention.key_dense, attention.value_dense)
        ):
            part = slice(k * d, (k + 1) * d)
            assign(dense.kernel, kernel[:, part], f"{name}.weight")
            assign(dense.bias, bias[part], f"{name}.bias")
        conv1d(attention.output_dense, f"{layer}.attn.c_proj", (d, d))
        norm(block.ffn_norm, f"{layer}.ln_2")
        conv1d(block.ffn.intermediate_dense, f"{layer}.mlp.c_fc", (d, inner))
        conv1d(block.ffn.output_dense, f"{layer}.mlp.c_proj", (inner, d))
    norm(model.backbone.final_norm, "ln_f")


def _bpe_vocabulary(vocab, where):
    """Tokens in id order from a {token: id} map, the ids 0..n-1."""
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError(f"{where}: the vocabulary must be a {{token: id}} object.")
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(vocab):
            raise ValueError(
                f"{where}: ids must be 0..{len(vocab) - 1}. Received: {token!r}: {i!r}"
            )
        tokens[i] = token
    if None in tokens:
        raise ValueError(f"{where}: ids repeat; id {tokens.index(None)} is missing.")
    return tokens


def _bpe_merges(merges, where):
    pairs = []
    for rank, merge in enumerate(merges):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{where}: merge {rank} is not a pair: {merge!r}")
        pairs.append(tuple(pair))
    return pairs


def _added_tokens(added, tokens, where):
    """The contents of tokenizer.json's `added_tokens`, each matched
    literally in the text; one whose id is past the vocabulary's end is
    appended to `tokens` (ids must then run on from its end)."""
    contents = []
    for entry in sorted(
        added, key=lambda e: e.get("id", -1) if isinstance(e, dict) else -1
    ):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("content"), str)
            or not entry["content"]
            or isinstance(entry.get("id"), bool)
            or not isinstance(entry.get("id"), int)
        ):
            raise ValueError(
                f"{where}: added_tokens entries need a content and an id. "
                f"Received: {entry!r}"
            )
        content, i = entry["content"], entry["id"]
        for key in ("lstrip", "rstrip", "single_word"):
            if entry.get(key):
                raise ValueError(
                    f"{where}: added token {content!r} has {key}, which tfformer "
                    "does not reproduce."
                )
        if i == len(tokens) and content not in tokens:
            tokens.append(content)
        elif not (0 <= i < len(tokens) and tokens[i] == content):
            raise ValueError(
                f"{where}: added token {content!r} has id {i}, which is neither "
                f"its id in model.vocab nor the next id ({len(tokens)})."
            )
        contents.append(content)
    return contents


def _expect(value, expected, where):
    if value != expected:
        raise ValueError(
            f"{where} must be {expected!r} (GPT-2's byte-level BPE). Received: "
            f"{value!r}"
        )


def gpt2_tokenizer(source, config, vocab_size, progress):
    """The byte-level BPE tokenizer of a GPT-2 checkpoint directory, from
    `tokenizer.json` (Hugging Face's fast tokenizer) or `vocab.json` and
    `merges.txt`; None when it has neither. Its ids are the model's (one
    higher than the checkpoint's)."""
    from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer

    settings = read_json(source, "tokenizer_config.json", required=False) or {}
    spec = read_json(source, "tokenizer.json", required=False)
    if spec is not None:
        where = f"{source}/tokenizer.json"
        model = spec.get("model") or {}
        _expect(model.get("type"), "BPE", f"{where}: model.type")
        for key, expected in (
            ("dropout", None),
            ("continuing_subword_prefix", ""),
            ("end_of_word_suffix", ""),
            ("byte_fallback", False),
            ("ignore_merges", False),
        ):
            value = model.get(key)
            if key == "dropout" and value == 0:
                value = None  # no dropout
            if value is not None or expected is None:  # null means unset
                _expect(value, expected, f"{where}: model.{key}")
        _expect(spec.get("normalizer"), None, f"{where}: normalizer")
        pre = spec.get("pre_tokenizer") or {}
        _expect(pre.get("type"), "ByteLevel", f"{where}: pre_tokenizer.type")
        _expect(pre.get("use_regex", True), True, f"{where}: pre_tokenizer.use_regex")
        for part in ("post_processor", "decoder"):
            kind = (spec.get(part) or {}).get("type")
            if kind not in (None, "ByteLevel"):
                raise ValueError(
                    f"{where}: {part}.type must be null or 'ByteLevel' (nothing "
                    f"added around the text, bytes decoded). Received: {kind!r}"
                )
        tokens = _bpe_vocabulary(model.get("vocab"), where)
        merges = _bpe_merges(model.get("merges") or [], where)
        special = _added_tokens(spec.get("added_tokens") or [], tokens, where)
        # transformers' GPT2TokenizerFast rebuilds the pre-tokenizer with
        # tokenizer_config.json's add_prefix_space when it has one.
        add_prefix_space = bool(
            settings.get("add_prefix_space", pre.get("add_prefix_space", False))
        )
    elif os.path.isfile(os.path.join(source, "vocab.json")):
        where = f"{source}/vocab.json"
        tokens = _bpe_vocabulary(read_json(source, "vocab.json"), where)
        path = os.path.join(source, "merges.txt")
        if not os.path.isfile(path):
            raise ValueError(f"{source} has vocab.json but no merges.txt.")
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
        lines = [x for x in lines if x and not x.startswith("#version")]
        merges = _bpe_merges(lines, path)
        special = []
        add_prefix_space = bool(settings.get("add_prefix_space", False))
    else:
        return None
    if len(tokens) > vocab_size:
        raise ValueError(
            f"{where}: {len(tokens)} tokens, more than config.json's vocab_size "
            f"({vocab_size})."
        )
    names = {}
    for key in ("bos_token_id", "eos_token_id"):
        value = config.get(key, 50256)
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and 0 <= value < len(tokens)
        ):
            names[key] = tokens[value]
        else:
            raise ValueError(
                f"config.json: {key} ({value!r}) is not an id of the tokenizer's "
                f"{len(tokens)} tokens."
            )
    for token in names.values():
        if token not in special:
            special.append(token)
    try:
        tokenizer = ByteLevelBPETokenizer(
            tokens,
            merges,
            special_tokens=special,
            start_token=names["bos_token_id"],
            end_token=names["eos_token_id"],
            id_offset=ID_OFFSET,
            add_prefix_space=add_prefix_space,
        )
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    import tensorflow as tf

    try:  # its patterns compile when first run: here, not in a served model
        tokenizer.tokenize([" ".join(["a", *special])])
    except tf.errors.OpError as e:
        raise ValueError(
            f"{where}: the tokenizer does not run with special tokens {special}: "
            f"{e.message}"
        ) from None
    progress(
        f"Tokenizer: byte-level BPE from {os.path.basename(where)}, "
        f"{len(tokens)} tokens, {len(merges)} merges, special {special}"
    )
    return tokenizer


def convert_gpt2(source, config, staging, progress):
    """A GPT-2 (`GPT2LMHeadModel` or `GPT2Model`) into a `causal_lm` run:
    text in and out with its byte-level BPE tokenizer, or the checkpoint's
    token ids when the directory has no tokenizer files."""
    import keras

    from tfformer.models import CausalLM, GPTBackbone
    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer

    sizes = gpt2_sizes(config)
    vocab = sizes["vocabulary_size"]
    start = decoder_special_id(
        config, "bos_token_id", 50256, vocab - ID_OFFSET, progress
    )
    end = decoder_special_id(config, "eos_token_id", 50256, vocab - ID_OFFSET, progress)
    tokenizer = gpt2_tokenizer(source, config, vocab - ID_OFFSET, progress)
    kind = "bpe"
    if tokenizer is None:
        progress("No tokenizer.json or vocab.json: the run reads and writes token ids.")
        tokenizer = TokenIdTokenizer(vocab, start, end, pad_id=0, id_offset=ID_OFFSET)
        kind = "ids"
    checkpoint = Checkpoint(source)
    weights = Weights(
        checkpoint, find_prefix(checkpoint, "wte.weight", ("transformer.", ""))
    )
    keras.utils.set_random_seed(0)
    backbone = GPTBackbone(
        dropout=0.0,
        activation_dropout=HIDDEN_DROPOUT,
        position="learned",
        normalize_first=True,
        padding_logit=PADDING_LOGIT,
        **sizes,
    )
    model = CausalLM(backbone, name="gpt2")
    load_gpt2(model, weights, sizes, checkpoint)
    progress(
        f"GPT-2 decoder: {sizes['num_layers']} layers, width {sizes['hidden_dim']}, "
        f"{sizes['num_heads']} heads, {vocab - ID_OFFSET} tokens, context "
        f"{sizes['max_sequence_length']} (the model's ids are the checkpoint's plus "
        f"one, id 0 padding), end {end - ID_OFFSET}"
    )
    # Older checkpoints keep each layer's causal-mask buffers.
    buffer = re.compile(r"(transformer\.)?h\.\d+\.attn\.(masked_)?bias")
    unused = [n for n in checkpoint.unused() if not buffer.fullmatch(n)]
    refuse_unused(source, unused)
    return write_decoder_run(staging, model, tokenizer, kind, sizes)


CONVERTERS = {
    "bert": convert_bert,
    "vit": convert_vit,
    "llama": convert_llama,
    "gpt2": convert_gpt2,
}


def convert(source, out, *, progress=print):
    """Converts the Hugging Face checkpoint directory `source` into the run
    directory `out` (which must not exist yet, or be empty).

    Returns:
        `out`.

    Raises:
        ValueError: naming the file, tensor or config key that is missing,
            malformed or unsupported; `out` is then left as it was.
    """
    from tfformer.training.config import config_from_dict

    if not isinstance(source, str | os.PathLike) or not os.path.isdir(source):
        raise ValueError(
            f"--from must be a Hugging Face checkpoint directory. Received: {source!r}"
        )
    if not isinstance(out, str | os.PathLike) or not os.fspath(out):
        raise ValueError(f"--out must be a directory path. Received: {out!r}")
    source, out = os.fspath(source), os.path.abspath(os.fspath(out))
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ValueError(f"--out must be a new or empty directory. Received: {out!r}")
    config = read_json(source, "config.json")
    if not isinstance(config, dict):
        raise ValueError(f"{source}/config.json must hold a JSON object.")
    model_type = config.get("model_type")
    if model_type not in CONVERTERS:
        raise ValueError(
            f"{source}/config.json: model_type must be one of {sorted(CONVERTERS)}. "
            f"Received: {model_type!r}"
        )
    # Parents made here are removed again on failure (nothing is written).
    made, parent = [], os.path.dirname(out)
    while not os.path.isdir(parent):
        made.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(made):
        os.mkdir(directory)
    staging = tempfile.mkdtemp(prefix=".convert-", dir=os.path.dirname(out))
    # mkdtemp's 0700 would keep a serving user out of the run: the umask's.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    try:
        training_config = CONVERTERS[model_type](source, config, staging, progress)
        config_from_dict(training_config)  # what Task.load will read back
        RunDirectory(staging).write_config(training_config)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked above)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for directory in made:
            if os.path.isdir(directory) and not os.listdir(directory):
                os.rmdir(directory)
        raise
    progress(f"Wrote {out}")
    return out
