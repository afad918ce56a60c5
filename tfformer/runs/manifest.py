"""The typed manifest (`run.json`) of each task's run directory: one schema
per task, written by training and the converters, read by prediction,
evaluation and every exporter.

On disk (format version 1, unchanged since tfformer's first runs):

    {"format_version": 1, "task": "<task>",
     "tokenizers": {"<role>": {"kind": ..., "lower_case": ..., options}},
     "settings": {<the task's fields>}}

`RunManifest.from_manifest` checks every field's type and names the file,
the key and what it holds when something is wrong; `to_manifest` writes the
same layout back. A task's schema lists its tokenizer roles and its
settings as dataclass fields; `MANIFESTS` maps task names to schemas.
"""

import dataclasses
import types
import typing
from typing import ClassVar

from tfformer.errors import InputError, InputTypeError

FORMAT_VERSION = 1
TOKENIZER_KINDS = ("wordpiece", "byte", "ids", "bpe", "sentencepiece")
# Special-token roles a converted vocabulary names (`tfformer.preprocessing.text`).
SPECIAL_ROLES = ("pad", "unk", "start", "end", "mask")


@dataclasses.dataclass(frozen=True)
class TokenizerEntry:
    """One tokenizer of a run: its kind and casing, and for a vocabulary
    converted from a checkpoint its own special tokens and normalization
    (empty for one tfformer learned)."""

    kind: str
    lower_case: bool = False
    # {role: token} of a converted WordPiece vocabulary ([CLS], [SEP], ...).
    special_tokens: dict | None = None
    # "bert": BERT's cleanup and CJK spacing before WordPiece.
    normalizer: str | None = None
    strip_accents: bool = False

    @property
    def options(self):
        """The converted vocabulary's settings, as the tokenizers take them."""
        options = {}
        if self.special_tokens is not None:
            options["special_tokens"] = dict(self.special_tokens)
        if self.normalizer is not None:
            options["normalizer"] = self.normalizer
        if self.strip_accents:
            options["strip_accents"] = True
        return options

    def to_json(self):
        return {"kind": self.kind, "lower_case": self.lower_case, **self.options}

    @classmethod
    def from_json(cls, entry, where):
        if not isinstance(entry, dict) or entry.get("kind") not in TOKENIZER_KINDS:
            raise InputError(
                f"{where} must name a kind in {TOKENIZER_KINDS}. Received: {entry!r}"
            )
        unknown = sorted(set(entry) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise InputError(f"{where} has unknown keys {unknown}. Received: {entry!r}")
        tokenizer = cls(
            kind=entry["kind"],
            lower_case=_checked(
                f"{where}.lower_case", entry.get("lower_case", False), bool
            ),
            special_tokens=_checked(
                f"{where}.special_tokens", entry.get("special_tokens"), dict | None
            ),
            normalizer=_checked(
                f"{where}.normalizer", entry.get("normalizer"), str | None
            ),
            strip_accents=_checked(
                f"{where}.strip_accents", entry.get("strip_accents", False), bool
            ),
        )
        if tokenizer.options and tokenizer.kind != "wordpiece":
            raise InputError(
                f"{where} options {sorted(tokenizer.options)} apply to wordpiece "
                f"vocabularies only. Received: {entry!r}"
            )
        if tokenizer.special_tokens is not None:
            roles = set(tokenizer.special_tokens)
            if (
                not roles <= set(SPECIAL_ROLES)
                or not {"pad", "unk", "start", "end"} <= roles
            ):
                raise InputError(
                    f"{where}.special_tokens must name pad, unk, start and end (and "
                    f"may name mask). Received: {tokenizer.special_tokens!r}"
                )
        return tokenizer


def _checked(where, value, kind):
    """`value` if it is of `kind` (a type or a union; ints pass as floats,
    lists as tuples), else ValueError naming `where`."""
    options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    for option in options:
        if option is type(None) and value is None:
            return None
        origin = typing.get_origin(option) or option
        if origin is tuple and isinstance(value, list | tuple):
            (item,) = typing.get_args(option)[:1] or (object,)
            if all(isinstance(v, item) for v in value):
                return tuple(value)
            continue
        if (
            origin is float
            and isinstance(value, int | float)
            and not isinstance(value, bool)
        ):
            return float(value)
        if origin is int and isinstance(value, bool):
            continue
        if origin is not type(None) and isinstance(value, origin):
            return value
    raise InputError(f"{where} must be {_describe(kind)}. Received: {value!r}")


def _describe(kind):
    options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    names = []
    for option in options:
        origin = typing.get_origin(option) or option
        if origin is tuple:
            (item,) = typing.get_args(option)[:1] or (object,)
            names.append(f"a list of {item.__name__}")
        elif option is type(None):
            names.append("null")
        else:
            names.append(f"a {origin.__name__}")
    return " or ".join(names)


@dataclasses.dataclass(frozen=True)
class RunManifest:
    """The manifest of one task's run. Subclasses set `task` and `roles` and
    add their settings as fields (with defaults where older runs lack them).

    Attributes:
        tokenizers: {role: `TokenizerEntry`}, one per role in `roles`.
    """

    task: ClassVar[str] = None
    # The tokenizer roles this task's runs have ("source"/"target", "text").
    roles: ClassVar[tuple] = ()

    tokenizers: dict

    def settings(self):
        """The task's fields, as `run.json`'s `settings` holds them (a field
        that is None by default is left out while it is None)."""
        return {
            f.name: list(value) if isinstance(value, tuple) else value
            for f in dataclasses.fields(self)
            if f.name != "tokenizers"
            for value in [getattr(self, f.name)]
            if not (value is None and f.default is None)
        }

    def to_manifest(self):
        """The JSON object of `run.json`."""
        return {
            "format_version": FORMAT_VERSION,
            "task": self.task,
            "tokenizers": {
                role: entry.to_json() for role, entry in self.tokenizers.items()
            },
            "settings": self.settings(),
        }

    def __post_init__(self):
        if sorted(self.tokenizers) != sorted(self.roles):
            raise InputError(
                f"a {self.task} run has the tokenizers {list(self.roles)}. "
                f"Received: {sorted(self.tokenizers)}"
            )
        for role, entry in self.tokenizers.items():
            if not isinstance(entry, TokenizerEntry):
                raise InputTypeError(
                    f"tokenizers[{role!r}] must be a TokenizerEntry. "
                    f"Received: {entry!r}"
                )

    @classmethod
    def from_manifest(cls, manifest, where="run.json"):
        """The schema of `manifest` (the JSON object of `run.json`, read from
        `where`); ValueError naming the key and what it holds otherwise."""
        if not isinstance(manifest, dict):
            raise InputError(f"{where} must hold a JSON object.")
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise InputError(
                f"{where}: format_version {version!r} is not supported (this "
                f"tfformer reads {FORMAT_VERSION}; a newer tfformer wrote it?)."
            )
        task = manifest.get("task")
        schema = MANIFESTS.get(task) if cls is RunManifest else cls
        if schema is None or task != schema.task:
            known = sorted(MANIFESTS) if cls is RunManifest else [cls.task]
            raise InputError(
                f"{where}: task must be one of {known}. Received: task={task!r}"
            )
        for key, kind in (("tokenizers", dict), ("settings", dict)):
            if not isinstance(manifest.get(key), kind):
                raise InputError(
                    f"{where}: {key!r} must be a {kind.__name__}. "
                    f"Received: {manifest.get(key)!r}"
                )
        tokenizers = {
            role: TokenizerEntry.from_json(entry, f"{where}: tokenizers.{role}")
            for role, entry in manifest["tokenizers"].items()
        }
        settings = manifest["settings"]
        fields = {
            f.name: f for f in dataclasses.fields(schema) if f.name != "tokenizers"
        }
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise InputError(
                f"{where}: settings {unknown} are not part of a {task} run "
                f"(known: {sorted(fields)})."
            )
        hints = typing.get_type_hints(schema)
        values = {}
        for name, field in fields.items():
            if name not in settings:
                if field.default is dataclasses.MISSING:
                    raise InputError(f"{where}: settings lack {name!r}.")
                continue
            values[name] = _checked(
                f"{where}: settings.{name}", settings[name], hints[name]
            )
        try:
            return schema(tokenizers=tokenizers, **values)
        except (TypeError, ValueError) as e:
            raise InputError(f"{where}: {e}") from None


@dataclasses.dataclass(frozen=True)
class TranslationManifest(RunManifest):
    task: ClassVar[str] = "translation"
    roles: ClassVar[tuple] = ("source", "target")
    # Sources are cut to this many tokens; the decoder writes at most as many.
    max_length: int


@dataclasses.dataclass(frozen=True)
class CausalLMManifest(RunManifest):
    task: ClassVar[str] = "causal_lm"
    roles: ClassVar[tuple] = ("text",)
    # The decoder's context in tokens (the key/value caches' length).
    max_length: int
    # The run's chat template file (`tfformer.preprocessing.chat_template`),
    # for a converted checkpoint that has one.
    chat_template: str | None = None
    # Every model id at which generation ends, the tokenizer's end token
    # first, for a checkpoint whose config.json lists several eos ids (Llama
    # 3.1 Instruct: end of text, of a turn, of a tool call). None: the
    # tokenizer's end token alone.
    end_ids: tuple[int, ...] | None = None

    def ends(self, end_id):
        """Every id generation ends at for a run whose tokenizer ends at
        `end_id`: it first, then `end_ids`, once each."""
        return list(dict.fromkeys([end_id, *(self.end_ids or ())]))

    def __post_init__(self):
        super().__post_init__()
        if self.end_ids is not None and (
            not self.end_ids
            or not all(not isinstance(i, bool) and i >= 1 for i in self.end_ids)
        ):
            raise InputError(
                "end_ids must be null or a non-empty list of ids >= 1 (0 is "
                f"padding). Received: {list(self.end_ids)!r}"
            )


@dataclasses.dataclass(frozen=True)
class TextClassificationManifest(RunManifest):
    task: ClassVar[str] = "text_classification"
    roles: ClassVar[tuple] = ("text",)
    # Inputs are cut to this many tokens, [CLS] and [SEP] included.
    max_length: int
    # Class names in class-id order.
    labels: tuple[str, ...]
    # Each input is a pair of texts (segments 0 and 1).
    pairs: bool = False


@dataclasses.dataclass(frozen=True)
class MaskedLMManifest(RunManifest):
    task: ClassVar[str] = "masked_lm"
    roles: ClassVar[tuple] = ("text",)
    max_length: int
    mask_token: str = "[MASK]"


@dataclasses.dataclass(frozen=True)
class SentenceEmbeddingManifest(RunManifest):
    task: ClassVar[str] = "sentence_embedding"
    roles: ClassVar[tuple] = ("text",)
    max_length: int
    # sentence-transformers' pooling ("mean", "cls" or "max") and whether
    # the embedding is L2-normalized: what the model computes, for readers.
    pooling: str = "mean"
    normalize: bool = True


@dataclasses.dataclass(frozen=True)
class ImageClassificationManifest(RunManifest):
    task: ClassVar[str] = "image_classification"
    roles: ClassVar[tuple] = ()
    # Images are resized to image_size x image_size.
    image_size: int
    labels: tuple[str, ...]
    # Which files, with which labels, the test split came from (None for a
    # converted checkpoint, which has no test split).
    test_split_fingerprint: str | None = None


MANIFESTS = {
    schema.task: schema
    for schema in (
        TranslationManifest,
        CausalLMManifest,
        TextClassificationManifest,
        MaskedLMManifest,
        SentenceEmbeddingManifest,
        ImageClassificationManifest,
    )
}
