"""BERT-family encoders (`model_type` "bert": BERT, MiniLM,
sentence-transformers models) into a `sentence_embedding` run, which
`tfformer-predict`, `tfformer-export` and a text classifier's
`model.init_from` read; a `BertForSequenceClassification` into a
`text_classification` run, its head included. The WordPiece tokenizer is
converted (`vocab.txt` or `tokenizer.json`)."""

import os

import keras

from tfformer.errors import InputError
from tfformer.models import bert_classifier, bert_embedder, bert_encoder
from tfformer.runs.manifest import (
    SentenceEmbeddingManifest,
    TextClassificationManifest,
)
from tfformer.training.convert.huggingface.checkpoint import (
    Weights,
    assign,
    attention_sizes,
    config_choice,
    config_flag,
    config_value,
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
from tfformer.training.convert.huggingface.tokenizers import (
    bert_tokenizer,
    wordpiece_entry,
    wordpiece_vocabulary,
)

MODEL_TYPES = ("bert",)

BERT_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}


def bert_sizes(config):
    """`bert_encoder` keyword arguments from a BERT config.json."""
    hidden, heads = attention_sizes(config)
    position = config.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise InputError(
            "config.json: position_embedding_type must be 'absolute' (relative "
            f"position embeddings are not supported). Received: {position!r}"
        )
    act = config_choice(config, "hidden_act", BERT_ACTIVATIONS, "gelu")
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


def load_bert_encoder(encoder, weights, sizes):
    """Copies a Hugging Face BERT's tensors into a `bert_encoder`."""
    d = sizes["hidden_dim"]
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
    layer_norm(encoder.embeddings_norm, weights, "embeddings.LayerNorm", d)
    for i, block in enumerate(encoder.encoder_blocks):
        load_encoder_layer(
            block,
            weights,
            f"encoder.layer.{i}",
            sizes,
            attention="attention.self",
            norms=("attention.output.LayerNorm", "output.LayerNorm"),
        )
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
            raise InputError(
                f"{directory}/modules.json: modules must be among "
                f"{list(ST_MODULES)} (sentence-transformers); this one is not "
                f"converted. Received: {module!r}"
            )
        path = module.get("path", "")
        parts = path.replace("\\", "/").split("/") if isinstance(path, str) else None
        if parts is None or os.path.isabs(path) or ".." in parts:
            raise InputError(
                f"{directory}/modules.json: a module's path must be a folder "
                f"inside the checkpoint. Received: {module!r}"
            )
        kinds.append((short, path))
    names = [k for k, _ in kinds]
    if names.count("Transformer") != 1 or names[0] != "Transformer":
        raise InputError(
            f"{directory}/modules.json: one Transformer module, first, is "
            f"expected. Received: {modules!r}"
        )
    pooling_dirs = [path for kind, path in kinds if kind == "Pooling"]
    if len(pooling_dirs) != 1:
        raise InputError(
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
        raise InputError(
            f"{where}: exactly one of pooling_mode_mean_tokens, "
            "pooling_mode_cls_token and pooling_mode_max_tokens must be true "
            f"(concatenated or other poolings are not supported). Received: {config!r}"
        )
    normalize = names[-1] == "Normalize"
    if "Normalize" in names[:-1]:
        raise InputError(
            f"{directory}/modules.json: Normalize must be the last module. "
            f"Received: {modules!r}"
        )
    bert_config = read_json(directory, "sentence_bert_config.json", required=False)
    length = (bert_config or {}).get("max_seq_length", max_positions)
    if isinstance(length, bool) or not isinstance(length, int):
        length = None
    if length is None or not 4 <= length <= max_positions:
        raise InputError(
            f"{directory}/sentence_bert_config.json: max_seq_length must be an "
            f"int in [4, {max_positions}]. Received: "
            f"{(bert_config or {}).get('max_seq_length')!r}"
        )
    lower_case = config_flag(
        bert_config or {},
        "do_lower_case",
        False,
        f"{directory}/sentence_bert_config.json",
    )
    return chosen[0], normalize, length, lower_case, True


def sequence_classification_labels(config):
    """The label names of a `BertForSequenceClassification` config.json
    (`id2label` by id; Hugging Face's LABEL_i without one), refusing the
    heads tfformer's classifier is not: multi-label (sigmoid) and
    regression."""
    problem = config.get("problem_type")
    if problem not in (None, "single_label_classification"):
        raise InputError(
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
        raise InputError(
            "config.json: id2label must map the ids 0, 1, ... to label names. "
            f"Received: {id2label!r}"
        )
    labels = [str(id2label[str(i)]) for i in range(len(id2label))]
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise InputError(
            "config.json: id2label must name two or more distinct labels (one "
            f"output is a regression head). Received: {id2label!r}"
        )
    return labels


def load_bert(source, sizes, prefixes):
    """(weights, encoder, fresh): a `bert_encoder` of `sizes`
    holding the checkpoint's tensors (found under the first of `prefixes`
    that has them); `fresh` lists what kept random weights (the pooler)."""
    weights = Weights.open(source, "embeddings.word_embeddings.weight", prefixes)
    keras.utils.set_random_seed(0)
    encoder = bert_encoder(dropout=0.0, activation_dropout=HIDDEN_DROPOUT, **sizes)
    return weights, encoder, load_bert_encoder(encoder, weights, sizes)


def convert(source, config, staging, progress):
    """A BERT checkpoint into a `sentence_embedding` run in `staging`, or,
    for `BertForSequenceClassification`, a `text_classification` run."""
    sizes = bert_sizes(config)
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not all(
        isinstance(name, str) for name in architectures
    ):
        raise InputError(
            "config.json: architectures must be a list of class names. "
            f"Received: {architectures!r}"
        )
    if "BertForSequenceClassification" in architectures:
        return convert_classifier(source, config, sizes, staging, progress)
    return convert_embedder(source, sizes, staging, progress)


def convert_embedder(source, sizes, staging, progress):
    """A BERT encoder (pooling and normalization from sentence-transformers'
    files, when present) into a `sentence_embedding` run in `staging`."""
    tokens, tokenizer_settings = wordpiece_vocabulary(source)
    pooling, normalize, max_length, st_lower, from_st = sentence_transformers_settings(
        source, sizes["max_sequence_length"]
    )
    if st_lower and not tokenizer_settings["lower_case"]:
        # sentence-transformers lower-cases the text itself first.
        tokenizer_settings["lower_case"] = True
    tokenizer = bert_tokenizer(tokens, tokenizer_settings, sizes)
    weights, encoder, fresh = load_bert(source, sizes, ("", "bert."))
    checkpoint = weights.checkpoint
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


def convert_classifier(source, config, sizes, staging, progress):
    """A `BertForSequenceClassification` checkpoint (encoder, pooler and the
    `classifier` linear head on the pooled [CLS]) into a
    `text_classification` run in `staging`."""
    labels = sequence_classification_labels(config)
    tokens, tokenizer_settings = wordpiece_vocabulary(source)
    tokenizer = bert_tokenizer(tokens, tokenizer_settings, sizes)
    weights, encoder, fresh = load_bert(source, sizes, ("bert.", ""))
    checkpoint = weights.checkpoint
    if fresh:
        raise InputError(
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


def write_bert_run(staging, manifest, model, tokenizer, sizes, **model_keys):
    """Writes a converted BERT's run (WordPiece vocabulary, model and
    `manifest`) into `staging`; returns its training config (`model_keys`
    added to its model section)."""
    write_run(staging, manifest, model, tokenizer, "wordpiece")
    return {
        "task": manifest.task,
        "data": {
            "tokenizer": "wordpiece",
            "vocabulary_size": tokenizer.vocabulary_size,
            "lower_case": tokenizer.lower_case,
            "max_length": manifest.max_length,
        },
        "model": model_section(sizes, **model_keys),
    }
