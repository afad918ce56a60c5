"""What the decoder-only architectures (GPT-2, Llama, Mistral) share: token
ids shifted by one, the token embedding and output head, the `CausalLM`
they become and the `causal_lm` run they write.

A decoder checkpoint's id 0 is a real token (GPT-2's and Llama 3's "!",
Llama 2's "<unk>"; SmolLM's "<|endoftext|>") and tfformer's models mask id
0: the converted model's ids are the checkpoint's plus one, and id 0's
logit is a constant (padding takes no probability). The run's tokenizer
adds and removes the one.
"""

import os

import keras
import numpy as np

from tfformer.errors import InputError
from tfformer.models import CausalLM
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.runs.directory import CHAT_TEMPLATE
from tfformer.runs.manifest import CausalLMManifest, TokenizerEntry
from tfformer.training.convert.huggingface.checkpoint import (
    Weights,
    assign,
    read_json,
)
from tfformer.training.convert.huggingface.runs import (
    HIDDEN_DROPOUT,
    model_section,
    write_run,
)

ID_OFFSET = 1
PADDING_LOGIT = -1e4


def shifted_rows(matrix):
    """`matrix` (V, d) under a zero row: row k + 1 holds the checkpoint's id k."""
    return np.concatenate([np.zeros_like(matrix[:1]), matrix], axis=0)


def special_id(config, key, default, vocabulary_size, progress):
    """config.json's `bos_token_id` or `eos_token_id` in the model's ids (of
    a list, as Llama 3.1 Instruct's eos: the first; `end_ids` has them all)."""
    ids = special_ids(config, key, default, vocabulary_size)
    if len(ids) > 1:
        listed = [i - ID_OFFSET for i in ids]
        progress(
            f"{key} lists {listed}: generation ends at any of them."
            if key == "eos_token_id"
            else f"{key} lists {listed}: texts start with the first."
        )
    return ids[0]


def special_ids(config, key, default, vocabulary_size, where="config.json"):
    """config.json's `key` (an id, or a non-empty list of ids as Llama 3.1
    Instruct's `eos_token_id`) as a list of the model's ids, repeats dropped
    (`where` names the file in errors)."""
    value = config.get(key, default)
    values = value if isinstance(value, list) and value else [value]
    for item in values:
        if (
            isinstance(item, bool)
            or not isinstance(item, int)
            or not 0 <= item < vocabulary_size
        ):
            raise InputError(
                f"{where}: {key} must be a token id below vocab_size "
                f"({vocabulary_size}) or a non-empty list of them. "
                f"Received: {value!r}"
            )
    return [v + ID_OFFSET for v in dict.fromkeys(values)]


def end_ids(source, config, default, vocabulary_size):
    """The run manifest's `end_ids`: every eos id of config.json and
    generation_config.json (which transformers' `generate` reads; some
    checkpoints list the end-of-turn ids there only) in the model's ids,
    or None when they name one."""
    ids = special_ids(config, "eos_token_id", default, vocabulary_size)
    generation = read_json(source, "generation_config.json", required=False) or {}
    if generation.get("eos_token_id") is not None:
        ids += special_ids(
            generation, "eos_token_id", None, vocabulary_size, "generation_config.json"
        )
    ids = list(dict.fromkeys(ids))
    return ids if len(ids) > 1 else None


def token_id_tokenizer(sizes, start, end):
    """The run's tokenizer when it reads and writes the checkpoint's ids."""
    return TokenIdTokenizer(
        sizes["vocabulary_size"], start, end, pad_id=0, id_offset=ID_OFFSET
    )


def causal_lm(backbone_class, sizes, name, **options):
    """A `CausalLM` on a `backbone_class` of `sizes` (model ids), without
    dropout, id 0 padding; its weights are to be loaded."""
    keras.utils.set_random_seed(0)
    backbone = backbone_class(
        dropout=0.0,
        activation_dropout=HIDDEN_DROPOUT,
        padding_logit=PADDING_LOGIT,
        **options,
        **sizes,
    )
    return CausalLM(backbone, name=name)


def load_token_embeddings(model, weights, name, sizes):
    """The checkpoint's token embedding `name` (and its `lm_head.weight`,
    unless tied) into `model`'s, shifted by one row."""
    d = sizes["hidden_dim"]
    vocab = sizes["vocabulary_size"] - ID_OFFSET
    embedding = model.backbone.token_embedding
    assign(embedding.token_embeddings, shifted_rows(weights(name, (vocab, d))), name)
    checkpoint = weights.checkpoint
    if not sizes["tie_embeddings"]:
        head = Weights(checkpoint, "")("lm_head.weight", (vocab, d))
        assign(embedding.reverse_embeddings, shifted_rows(head).T, "lm_head.weight")
    elif "lm_head.weight" in checkpoint:
        checkpoint.get("lm_head.weight", (vocab, d))  # tied: the same matrix


def write_decoder_run(staging, model, tokenizer, kind, sizes, chat=None, ends=None):
    """Writes a converted decoder's `causal_lm` run into `staging` (with its
    `ChatTemplate` when `chat` is given, and `ends` as its `end_ids`);
    returns its training config."""
    context = sizes["max_sequence_length"]
    manifest = CausalLMManifest(
        tokenizers={"text": TokenizerEntry(kind)},
        max_length=context,
        chat_template=None if chat is None else CHAT_TEMPLATE,
        end_ids=ends,
    )
    if chat is not None:
        chat.save(os.path.join(staging, CHAT_TEMPLATE))
    write_run(staging, manifest, model, tokenizer, kind)
    return {
        "task": "causal_lm",
        "data": {
            "tokenizer": kind,
            "vocabulary_size": sizes["vocabulary_size"],
            "max_length": context,
        },
        "model": model_section(sizes),
    }
