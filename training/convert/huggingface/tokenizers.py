"""Tokenizer conversions: BERT's WordPiece (`vocab.txt` or
`tokenizer.json`, with tokenizer_config.json's casing), the byte-level
BPEs of GPT-2 (`tokenizer.json`, or `vocab.json` and `merges.txt`) and
Llama 3 (`tokenizer.json`), and SentencePiece BPE models (`tokenizer.model`:
Llama 2's, Gemma's), each checked to be what tfformer's graph-op
tokenizers reproduce."""

import json
import os

import tensorflow as tf

from tfformer.errors import InputError
from tfformer.preprocessing.bpe_tokenizer import (
    LLAMA3_SPLIT,
    QWEN2_SPLIT,
    ByteLevelBPETokenizer,
)
from tfformer.preprocessing.sentencepiece_tokenizer import (
    SentencePieceTokenizer,
    check_model,
    read_model_file,
)
from tfformer.runs.files import read_lines
from tfformer.runs.manifest import TokenizerEntry
from tfformer.training.convert.huggingface.checkpoint import config_flag, read_json
from tfformer.training.convert.huggingface.decoders import ID_OFFSET
from tfformer.training.text.wordpiece import WordPieceTokenizer

TOKENIZER_CONFIG = "tokenizer_config.json"

# -- WordPiece -----------------------------------------------------------------

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
        raise InputError(
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
        tokens = read_lines(vocab_txt)
        if tokens and tokens[-1] == "":
            tokens.pop()
    elif described is not None:
        origin = os.path.join(directory, "tokenizer.json")
        model = described.get("model") or {}
        if (
            not isinstance(model, dict)
            or model.get("type") != "WordPiece"
            or not isinstance(model.get("vocab"), dict)
        ):
            raise InputError(
                f"{origin}: model.type must be 'WordPiece' with a vocab. "
                f"Received: model={str(model)[:80]!r}"
            )
        if model.get("continuing_subword_prefix", "##") != "##":
            raise InputError(
                f"{origin}: continuing_subword_prefix must be '##'. "
                f"Received: {model.get('continuing_subword_prefix')!r}"
            )
        ids_are_ints = all(type(i) is int for i in model["vocab"].values())
        by_id = {i: t for t, i in model["vocab"].items()} if ids_are_ints else {}
        if (
            not ids_are_ints
            or sorted(by_id) != list(range(len(by_id)))
            or len(by_id) != len(model["vocab"])
        ):
            raise InputError(f"{origin}: the vocab's ids must be 0..N-1, each once.")
        tokens = [by_id[i] for i in range(len(by_id))]
    else:
        raise InputError(f"{directory} has neither vocab.txt nor tokenizer.json.")
    seen = set()
    for token in tokens:
        if token in seen:
            raise InputError(f"{origin}: token {token!r} appears twice.")
        seen.add(token)
    tokenizer_class = settings.get("tokenizer_class")
    if tokenizer_class not in BERT_TOKENIZER_CLASSES:
        raise InputError(
            "tokenizer_config.json: tokenizer_class must be one of "
            f"{list(BERT_TOKENIZER_CLASSES[1:])}. Received: {tokenizer_class!r}"
        )
    if settings.get("tokenize_chinese_chars", True) is not True:
        raise InputError(
            "tokenizer_config.json: tokenize_chinese_chars=false is not "
            "supported (BERT's pre-tokenizer splits CJK ideographs)."
        )
    lower_case = config_flag(settings, "do_lower_case", True, TOKENIZER_CONFIG)
    strip_accents = config_flag(settings, "strip_accents", None, TOKENIZER_CONFIG)
    if described is not None:
        where = os.path.join(directory, "tokenizer.json")
        normalizer = described.get("normalizer")
        if not isinstance(normalizer, dict) or normalizer.get("type") != (
            "BertNormalizer"
        ):
            raise InputError(
                f"{where}: normalizer must be a BertNormalizer. Received: "
                f"{normalizer!r}"
            )
        lower_case = config_flag(normalizer, "lowercase", True, where)
        strip_accents = config_flag(normalizer, "strip_accents", None, where)
        if not config_flag(normalizer, "clean_text", True, where) or not config_flag(
            normalizer, "handle_chinese_chars", True, where
        ):
            raise InputError(
                f"{where}: a BertNormalizer without clean_text or "
                f"handle_chinese_chars is not supported. Received: {normalizer!r}"
            )
        pre = described.get("pre_tokenizer")
        if not isinstance(pre, dict) or pre.get("type") != "BertPreTokenizer":
            raise InputError(
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
            raise InputError(
                f"{origin}: the {role} token {token!r} (tokenizer_config.json, or "
                "BERT's default) is not in the vocabulary."
            )
    return tokens, {
        "lower_case": lower_case,
        "special_tokens": special,
        "normalizer": "bert",
        "strip_accents": bool(strip_accents),
    }


def bert_tokenizer(tokens, settings, sizes):
    """The WordPiece tokenizer of a BERT checkpoint's vocabulary `tokens`
    (`wordpiece_vocabulary`'s settings), its size checked against
    config.json's."""
    if len(tokens) != sizes["vocabulary_size"]:
        raise InputError(
            f"config.json: vocab_size is {sizes['vocabulary_size']} but the "
            f"tokenizer has {len(tokens)} tokens."
        )
    options = {k: v for k, v in settings.items() if k != "lower_case"}
    return WordPieceTokenizer(tokens, lower_case=settings["lower_case"], **options)


def wordpiece_entry(tokenizer):
    """The manifest entry of a converted WordPiece tokenizer."""
    return TokenizerEntry("wordpiece", tokenizer.lower_case, **tokenizer.options())


# -- byte-level BPE ------------------------------------------------------------


def _bpe_vocabulary(vocab, where):
    """Tokens in id order from a {token: id} map, the ids 0..n-1."""
    if not isinstance(vocab, dict) or not vocab:
        raise InputError(f"{where}: the vocabulary must be a {{token: id}} object.")
    tokens = [None] * len(vocab)
    for token, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(vocab):
            raise InputError(
                f"{where}: ids must be 0..{len(vocab) - 1}. Received: {token!r}: {i!r}"
            )
        tokens[i] = token
    if None in tokens:
        raise InputError(f"{where}: ids repeat; id {tokens.index(None)} is missing.")
    return tokens


def _bpe_merges(merges, where):
    pairs = []
    for rank, merge in enumerate(merges):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(pair, list) or len(pair) != 2:
            raise InputError(f"{where}: merge {rank} is not a pair: {merge!r}")
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
            raise InputError(
                f"{where}: added_tokens entries need a content and an id. "
                f"Received: {entry!r}"
            )
        content, i = entry["content"], entry["id"]
        for key in ("lstrip", "rstrip", "single_word"):
            if entry.get(key):
                raise InputError(
                    f"{where}: added token {content!r} has {key}, which tfformer "
                    "does not reproduce."
                )
        if i == len(tokens) and content not in tokens:
            tokens.append(content)
        elif not (0 <= i < len(tokens) and tokens[i] == content):
            raise InputError(
                f"{where}: added token {content!r} has id {i}, which is neither "
                f"its id in model.vocab nor the next id ({len(tokens)})."
            )
        contents.append(content)
    return contents


class UnsupportedTokenizer(InputError):
    """A tokenizer.json feature tfformer's tokenizers do not reproduce (a
    decoder conversion may then keep the checkpoint's token ids instead)."""


def _section(spec, key, where):
    """tokenizer.json's `key` object ({} when null or absent)."""
    value = spec.get(key) or {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: {key} must be an object. Received: {value!r}")
    return value


def _expect(value, expected, where):
    if value != expected:
        raise UnsupportedTokenizer(
            f"{where} must be {expected!r} (a byte-level BPE as GPT-2's or Llama "
            f"3's). Received: {value!r}"
        )


def _pre_tokenizer(pre, where):
    """(`ByteLevelBPETokenizer`'s pre_tokenizer, add_prefix_space) of
    tokenizer.json's pre_tokenizer: GPT-2's ByteLevel with its regex, or
    Llama 3's or Qwen2's Split on its pattern followed by ByteLevel without
    one."""
    if pre.get("type") == "ByteLevel":
        _expect(pre.get("use_regex", True), True, f"{where}.use_regex")
        return "gpt2", config_flag(pre, "add_prefix_space", False, where)
    parts = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    kinds = [p.get("type") if isinstance(p, dict) else None for p in parts or []]
    if kinds != ["Split", "ByteLevel"]:
        raise UnsupportedTokenizer(
            f"{where} must be GPT-2's ByteLevel or Llama 3's Sequence of Split and "
            f"ByteLevel. Received: {json.dumps(pre)[:300]}"
        )
    split, level = parts
    pattern = split.get("pattern")
    pattern = pattern.get("Regex") if isinstance(pattern, dict) else pattern
    patterns = {LLAMA3_SPLIT: "llama3", QWEN2_SPLIT: "qwen2"}
    if pattern not in patterns:
        raise UnsupportedTokenizer(
            f"{where}: the Split pattern must be Llama 3's {LLAMA3_SPLIT!r} or "
            f"Qwen2's {QWEN2_SPLIT!r}. Received: {pattern!r}"
        )
    _expect(split.get("behavior"), "Isolated", f"{where}: Split.behavior")
    _expect(split.get("invert", False), False, f"{where}: Split.invert")
    _expect(level.get("use_regex", True), False, f"{where}: ByteLevel.use_regex")
    prefix = level.get("add_prefix_space", False)
    _expect(prefix, False, f"{where}: ByteLevel.add_prefix_space")
    return patterns[pattern], False


def _bpe_normalizer(normalizer, where):
    """None, or "nfc" for Qwen2's NFC normalizer (alone or the one step of
    a Sequence); any other is refused."""
    if normalizer is None:
        return None
    steps = [normalizer]
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        steps = normalizer.get("normalizers")
    if (
        isinstance(steps, list)
        and len(steps) == 1
        and isinstance(steps[0], dict)
        and steps[0].get("type") == "NFC"
    ):
        return "nfc"
    raise UnsupportedTokenizer(
        f"{where} must be null or NFC (Qwen2's). Received: "
        f"{json.dumps(normalizer)[:300]}"
    )


def _template_start(post, where):
    """The special token tokenizer.json's post-processor puts before a text
    (Llama 3's TemplateProcessing: `<|begin_of_text|> $A`), or None; what
    else a post-processor adds is refused."""
    if not post:
        return None
    steps = post.get("processors") if post.get("type") == "Sequence" else [post]
    start = None
    for step in steps if isinstance(steps, list) else [None]:
        kind = step.get("type") if isinstance(step, dict) else None
        if kind == "ByteLevel":
            continue
        single = step.get("single") if kind == "TemplateProcessing" else None
        pieces = [
            next(iter(p), None) if isinstance(p, dict) else None for p in single or []
        ]
        if pieces == ["Sequence"]:
            continue
        if pieces == ["SpecialToken", "Sequence"] and isinstance(
            single[0]["SpecialToken"], dict
        ):
            start = single[0]["SpecialToken"].get("id")
            continue
        raise UnsupportedTokenizer(
            f"{where}.type must be null, ByteLevel or a TemplateProcessing that "
            f"puts at most a start token before the text. Received: "
            f"{json.dumps(post)[:300]}"
        )
    return start


def byte_level_bpe_tokenizer(
    source, config, vocab_size, progress, special_default, *, gpt2_files=True
):
    """The byte-level BPE tokenizer of a GPT-2-style checkpoint directory,
    from `tokenizer.json` (Hugging Face's fast tokenizer) or `vocab.json`
    and `merges.txt`; None when it has neither. Its ids are the model's
    (one higher than the checkpoint's); config.json's bos and eos ids
    default to `special_default` (an id, or a (bos, eos) pair).
    `vocab.json` and `merges.txt` are read as GPT-2's only with
    `gpt2_files` (they do not say how text is cut into pieces).

    Raises:
        UnsupportedTokenizer: a tokenizer.json feature tfformer does not
            reproduce, named.
        ValueError: files that are malformed or do not fit the model."""
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
        ):
            value = model.get(key)
            if key == "dropout" and value == 0:
                value = None  # no dropout
            if value is not None or expected is None:  # null means unset
                _expect(value, expected, f"{where}: model.{key}")
        normalizer = _bpe_normalizer(spec.get("normalizer"), f"{where}: normalizer")
        pre_tokenizer, prefix = _pre_tokenizer(
            _section(spec, "pre_tokenizer", where), f"{where}: pre_tokenizer"
        )
        ignore_merges = config_flag(model, "ignore_merges", False, where)
        kind = _section(spec, "decoder", where).get("type")
        if kind not in (None, "ByteLevel"):
            raise UnsupportedTokenizer(
                f"{where}: decoder.type must be null or 'ByteLevel' (bytes "
                f"decoded). Received: {kind!r}"
            )
        template_start = _template_start(
            _section(spec, "post_processor", where), f"{where}: post_processor"
        )
        tokens = _bpe_vocabulary(model.get("vocab"), where)
        merges = _bpe_merges(model.get("merges") or [], where)
        special = _added_tokens(spec.get("added_tokens") or [], tokens, where)
        # transformers' GPT2TokenizerFast rebuilds the pre-tokenizer with
        # tokenizer_config.json's add_prefix_space when it has one (other
        # classes, Llama 3's among them, keep tokenizer.json's).
        add_prefix_space = prefix
        if pre_tokenizer == "gpt2":
            add_prefix_space = config_flag(
                settings, "add_prefix_space", prefix, TOKENIZER_CONFIG
            )
    elif os.path.isfile(os.path.join(source, "vocab.json")):
        if not gpt2_files:
            raise UnsupportedTokenizer(
                f"{source} has vocab.json but no tokenizer.json: its pieces (GPT-2's, "
                "Qwen's, ...) are not known"
            )
        where = f"{source}/vocab.json"
        tokens = _bpe_vocabulary(read_json(source, "vocab.json"), where)
        path = os.path.join(source, "merges.txt")
        if not os.path.isfile(path):
            raise InputError(f"{source} has vocab.json but no merges.txt.")
        lines = read_lines(path)
        lines = [x for x in lines if x and not x.startswith("#version")]
        merges = _bpe_merges(lines, path)
        special = []
        add_prefix_space = config_flag(
            settings, "add_prefix_space", False, TOKENIZER_CONFIG
        )
        pre_tokenizer, ignore_merges, template_start = "gpt2", False, None
        normalizer = None
    else:
        return None
    if len(tokens) > vocab_size:
        raise InputError(
            f"{where}: {len(tokens)} tokens, more than config.json's vocab_size "
            f"({vocab_size})."
        )
    names = {}
    if not isinstance(special_default, tuple):
        special_default = (special_default, special_default)
    for key, default in zip(
        ("bos_token_id", "eos_token_id"), special_default, strict=True
    ):
        value = config.get(key, default)
        if isinstance(value, list) and value:
            value = value[0]  # Llama 3.1's eos list: the tokenizer's end token
            # is the first (generation ends at each: the manifest's end_ids)
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and 0 <= value < len(tokens)
        ):
            names[key] = tokens[value]
        else:
            raise InputError(
                f"config.json: {key} ({value!r}) is not an id of the tokenizer's "
                f"{len(tokens)} tokens."
            )
    if template_start is not None and template_start != names["bos_token_id"]:
        raise UnsupportedTokenizer(
            f"{where}: the post-processor starts a text with {template_start!r}, "
            f"not config.json's bos token {names['bos_token_id']!r} (with which "
            "tfformer starts one)."
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
            pre_tokenizer=pre_tokenizer,
            ignore_merges=ignore_merges,
            add_start_token=template_start is not None,
            normalizer=normalizer,
        )
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None
    try:  # its patterns compile when first run: here, not in a served model
        tokenizer.tokenize([" ".join(["a", *special])])
    except tf.errors.OpError as e:
        raise InputError(
            f"{where}: the tokenizer does not run with special tokens {special}: "
            f"{e.message}"
        ) from None
    progress(
        f"Tokenizer: byte-level BPE ({pre_tokenizer} pieces"
        + (", NFC first" if normalizer else "")
        + (", ignore_merges" if ignore_merges else "")
        + (f", {template_start} first" if template_start else "")
        + f") from {os.path.basename(where)}, "
        f"{len(tokens)} tokens, {len(merges)} merges, special {special}"
    )
    return tokenizer


# -- SentencePiece -------------------------------------------------------------


def _components(spec):
    """The normalizers or pre-tokenizers of a tokenizer.json section, a
    `Sequence`'s (nested ones too) in order; anything but an object is no
    component (an untrusted file's odd values read as nothing)."""
    if not isinstance(spec, dict):
        return []
    if spec.get("type") != "Sequence":
        return [spec]
    inner = spec.get("normalizers", spec.get("pretokenizers"))
    if not isinstance(inner, list):
        return []
    return [c for part in inner for c in _components(part)]


def dummy_prefix_rule(source, settings, add_dummy_prefix):
    """Where the checkpoint's Hugging Face tokenizer puts SentencePiece's
    dummy prefix in the text around a rendered chat template's special
    tokens: `SentencePieceTokenizer`'s `prefix_after_special` and
    `prefix_before_space` options, or None when its files contradict the
    model's `add_dummy_prefix`. tokenizer.json decides: a `Prepend("▁")`
    normalizer prefixes every text between special tokens; a `Metaspace`
    pre-tokenizer prefixes every one ("always") or the text's first only
    ("first"), and never one that starts with a space. Without
    tokenizer.json, transformers' slow LlamaTokenizer: every text when
    tokenizer_config.json's `legacy` is true (or absent), else the first."""
    spec = read_json(source, "tokenizer.json", required=False)
    if not isinstance(spec, dict):
        legacy = config_flag(settings, "legacy", True, TOKENIZER_CONFIG)
        return {"prefix_after_special": legacy, "prefix_before_space": True}
    rule, before_space = "never", True
    for normalizer in _components(spec.get("normalizer")):
        if normalizer.get("type") == "Prepend" and normalizer.get("prepend") == "▁":
            rule = "always"
    for pre in _components(spec.get("pre_tokenizer")):
        if pre.get("type") == "Metaspace":
            scheme = pre.get("prepend_scheme")
            if scheme is None:  # tokenizers < 0.14 wrote a flag
                scheme = "always" if pre.get("add_prefix_space") is True else "never"
            rule = scheme if scheme in ("always", "first") else "never"
            before_space = False
    if (rule != "never") != bool(add_dummy_prefix):
        return None
    return {
        "prefix_after_special": rule != "first",
        "prefix_before_space": before_space,
    }


def sentencepiece_tokenizer(source, config, vocab_size, progress, special_default):
    """The SentencePiece BPE tokenizer of a checkpoint directory's
    `tokenizer.model` (Llama 2's, Gemma's), or None when it has none. Its
    ids are the model's (one higher than the checkpoint's); its start and
    end tokens are config.json's bos and eos ids (`special_default`, a
    (bos, eos) pair, when absent), and a text starts with the start token
    when tokenizer_config.json's `add_bos_token` says so (true when absent,
    as Llama's and Gemma's tokenizers have it).

    Raises:
        UnsupportedTokenizer: a model tfformer does not reproduce, named.
        ValueError: a file that is damaged or does not fit the model."""
    path = os.path.join(source, "tokenizer.model")
    if not os.path.isfile(path):
        return None
    model = read_model_file(path)
    try:
        check_model(model, path)
    except InputError as e:
        raise UnsupportedTokenizer(str(e)) from None
    pieces = model["pieces"]
    if len(pieces) > vocab_size:
        raise InputError(
            f"{path}: {len(pieces)} pieces, more than config.json's vocab_size "
            f"({vocab_size})."
        )
    names = {}
    for key, default in zip(
        ("bos_token_id", "eos_token_id"), special_default, strict=True
    ):
        value = config.get(key, default)
        if isinstance(value, list) and value:
            value = value[0]  # the tokenizer's end token is the first
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and 0 <= value < len(pieces)
        ):
            names[key] = pieces[value][0]
        else:
            raise InputError(
                f"config.json: {key} ({value!r}) is not an id of {path}'s "
                f"{len(pieces)} pieces."
            )
    settings = read_json(source, TOKENIZER_CONFIG, required=False) or {}
    add_bos = config_flag(settings, "add_bos_token", True, TOKENIZER_CONFIG)
    unknown = model["trainer"]["unk_id"]
    dummy_prefix = model["normalizer"]["add_dummy_prefix"]
    # (A contradiction leaves the chat template out: chat.check_special_split.)
    rule = dummy_prefix_rule(source, settings, dummy_prefix) or {}
    try:
        tokenizer = SentencePieceTokenizer(
            pieces,
            add_dummy_prefix=dummy_prefix,
            remove_extra_whitespaces=model["normalizer"]["remove_extra_whitespaces"],
            start_token=names["bos_token_id"],
            end_token=names["eos_token_id"],
            unknown_token=pieces[unknown][0] if 0 <= unknown < len(pieces) else "",
            add_start_token=add_bos,
            id_offset=ID_OFFSET,
            **rule,
        )
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    progress(
        f"Tokenizer: SentencePiece BPE from tokenizer.model, {len(pieces)} pieces"
        + (", dummy prefix" if tokenizer.add_dummy_prefix else "")
        + (", extra whitespace removed" if tokenizer.remove_extra_whitespaces else "")
        + (f", {tokenizer.start_token} first" if add_bos else "")
        + f", end {tokenizer.end_token}"
    )
    return tokenizer
