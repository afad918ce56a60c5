"""Reading and writing a run directory.

Layout (what `tfformer-train` writes):

    run.json            the manifest: format version, task, tokenizers,
                        the task's inference settings (lengths, labels)
    config.json         the full training config (for resuming, and people)
    model.keras         the final model; best.keras: lowest validation loss
    <role>_vocab.txt    a WordPiece vocabulary, one token per line
    <role>_tokenizer.json   a byte tokenizer's description
    metrics.json, training_curves.png, logs/ (TensorBoard), backup/

Inference (predict, evaluate, export) needs only the manifest, the
tokenizer files and a model file; `RunDirectory` checks each and names the
file and what is wrong, once, for every command.
"""

import dataclasses
import json
import os

from tfformer.runs.files import atomic_write_text

FORMAT_VERSION = 1
MANIFEST = "run.json"
CONFIG = "config.json"
METRICS = "metrics.json"
CHECKPOINTS = ("model.keras", "best.keras")
TOKENIZER_KINDS = ("wordpiece", "byte", "ids", "bpe")


def tokenizer_file(kind, role):
    """File name of the `role` tokenizer ("source", "target", "text")."""
    if kind not in TOKENIZER_KINDS:
        raise ValueError(
            f"tokenizer must be one of {TOKENIZER_KINDS}. Received: {kind!r}"
        )
    return f"{role}_vocab.txt" if kind == "wordpiece" else f"{role}_tokenizer.json"


# Tokenizer entry fields beyond kind and lower_case (a WordPiece vocabulary
# converted from a checkpoint): {role: token}, "bert" or absent, bool.
TOKENIZER_OPTIONS = ("special_tokens", "normalizer", "strip_accents")


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """One tokenizer of a run: its kind, file (absolute path), casing and
    options (`TOKENIZER_OPTIONS`: a converted vocabulary's special tokens and
    normalization; empty for one tfformer learned)."""

    kind: str
    path: str
    lower_case: bool = False
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def vocabulary_file(self):
        """The vocabulary file to ship with an export, or None (bytes)."""
        return self.path if self.kind == "wordpiece" else None


class RunDirectory:
    """A run directory on disk.

    Args:
        path: the directory `tfformer-train` wrote.

    Raises:
        ValueError: `path` is not a directory.
    """

    def __init__(self, path):
        if not isinstance(path, str | os.PathLike) or not os.path.isdir(path):
            raise ValueError(
                "The run (--checkpoint) must be a tfformer-train run directory. "
                f"Received: {path!r} (not a directory)"
            )
        self.path = os.fspath(path)
        self._manifest = None

    def file(self, name):
        return os.path.join(self.path, name)

    def read_json(self, name):
        """A JSON file of the run; ValueError naming it if missing or broken."""
        path = self.file(name)
        if not os.path.isfile(path):
            raise ValueError(
                f"{self.path} is not a finished training run: {name} is missing."
            )
        with open(path, encoding="utf-8") as f:
            try:
                return json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} is not valid JSON: {e}") from None

    # -- the manifest ----------------------------------------------------------

    @property
    def manifest(self):
        if self._manifest is None:
            manifest = self.read_json(MANIFEST)
            where = self.file(MANIFEST)
            if not isinstance(manifest, dict):
                raise ValueError(f"{where} must hold a JSON object.")
            version = manifest.get("format_version")
            if version != FORMAT_VERSION:
                raise ValueError(
                    f"{where}: format_version {version!r} is not supported "
                    f"(this tfformer reads {FORMAT_VERSION})."
                )
            for key, kind in (("task", str), ("tokenizers", dict), ("settings", dict)):
                if not isinstance(manifest.get(key), kind):
                    raise ValueError(
                        f"{where}: {key!r} must be a {kind.__name__}. "
                        f"Received: {manifest.get(key)!r}"
                    )
            self._manifest = manifest
        return self._manifest

    @property
    def task(self):
        return self.manifest["task"]

    @property
    def settings(self):
        """The task's inference settings (lengths, labels, ...)."""
        return self.manifest["settings"]

    def setting(self, name):
        if name not in self.settings:
            raise ValueError(f"{self.file(MANIFEST)}: settings lack {name!r}.")
        return self.settings[name]

    def tokenizer(self, role):
        """The `TokenizerSpec` of `role`; its file is checked to exist."""
        entry = self.manifest["tokenizers"].get(role)
        where = self.file(MANIFEST)
        if not isinstance(entry, dict) or entry.get("kind") not in TOKENIZER_KINDS:
            raise ValueError(
                f"{where}: tokenizers.{role} must name a kind in "
                f"{TOKENIZER_KINDS}. Received: {entry!r}"
            )
        name = tokenizer_file(entry["kind"], role)
        if not os.path.isfile(self.file(name)):
            raise ValueError(f"{self.path} is not a finished run: {name} is missing.")
        options = {k: entry[k] for k in TOKENIZER_OPTIONS if k in entry}
        if options and entry["kind"] != "wordpiece":
            raise ValueError(
                f"{where}: tokenizers.{role} options {sorted(options)} apply to "
                f"wordpiece vocabularies only. Received: {entry!r}"
            )
        return TokenizerSpec(
            entry["kind"],
            self.file(name),
            bool(entry.get("lower_case", False)),
            options,
        )

    def write_manifest(self, task, tokenizers, settings):
        """Writes `run.json`.

        Args:
            task: the task's registered name.
            tokenizers: {role: (kind, lower_case)} or {role: (kind,
                lower_case, options)} (`TOKENIZER_OPTIONS`).
            settings: JSON-able inference settings the task's predictors and
                exporters read back.
        """
        manifest = {
            "format_version": FORMAT_VERSION,
            "task": task,
            "tokenizers": {
                role: {
                    "kind": entry[0],
                    "lower_case": bool(entry[1]),
                    **(entry[2] if len(entry) > 2 else {}),
                }
                for role, entry in tokenizers.items()
            },
            "settings": settings,
        }
        atomic_write_text(self.file(MANIFEST), json.dumps(manifest, indent=2) + "\n")
        self._manifest = None

    # -- models ----------------------------------------------------------------

    def checkpoint_path(self, checkpoint="model.keras"):
        if checkpoint not in CHECKPOINTS:
            raise ValueError(
                f"checkpoint file must be one of {CHECKPOINTS}. "
                f"Received: {checkpoint!r}"
            )
        path = self.file(checkpoint)
        if not os.path.isfile(path):
            raise ValueError(
                f"{self.path} is not a finished training run: {checkpoint} is missing."
            )
        return path

    def load_model(self, checkpoint="model.keras"):
        """The task model in `checkpoint` (uncompiled): a
        `tfformer.models.TaskModel`. A model saved before tfformer's
        backbones (a plain functional model) is rebuilt as one with its
        weights (`tfformer.models.upgrade_legacy_model`)."""
        import keras

        from tfformer.models import upgrade_legacy_model

        model = keras.saving.load_model(self.checkpoint_path(checkpoint), compile=False)
        return upgrade_legacy_model(model)
