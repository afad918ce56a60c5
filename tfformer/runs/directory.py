"""Reading and writing a run directory.

Layout (what `tfformer-train` writes):

    run.json            the manifest: format version, task, tokenizers,
                        the task's inference settings (lengths, labels)
    config.json         the full training config (for resuming, and people)
    model.keras         the final model; best.keras: lowest validation loss
    <role>_vocab.txt    a WordPiece vocabulary, one token per line
    <role>_tokenizer.json   a byte tokenizer's description
    chat_template.json  a converted chat model's template and stop ids
    heldout.jsonl       the first examples of the test split, one JSON
                        object per line (heldout.npz: images), which the
                        export's quality gate measures quantized models on
    adapters.npz        a LoRA run's adapters (`tfformer.models.lora`), which
                        the export can ship apart from the model
    metrics.json, training_curves.png, logs/ (TensorBoard), backup/

Inference (predict, evaluate, export) needs only the manifest, the
tokenizer files and a model file; `RunDirectory` checks each and names the
file and what is wrong, once, for every command.
"""

import dataclasses
import json
import os

from tfformer.errors import InputError, InputTypeError
from tfformer.runs.files import atomic_write_text
from tfformer.runs.manifest import TOKENIZER_KINDS, RunManifest

MANIFEST = "run.json"
CONFIG = "config.json"
METRICS = "metrics.json"
CHECKPOINTS = ("model.keras", "best.keras")
FINAL_MODEL, BEST_MODEL = CHECKPOINTS
# What training keeps beside the model: the preemption backup, TensorBoard's
# logs and the plotted curves.
BACKUP = "backup"
LOGS = "logs"
TRAINING_CURVES = "training_curves.png"
# A converted chat model's template (`tfformer.preprocessing.chat_template`).
CHAT_TEMPLATE = "chat_template.json"
# The test split's first examples, for the export's quality gate
# (`tfformer.export.quality`): text tasks' as JSON lines, images' as arrays.
HELDOUT, HELDOUT_IMAGES = "heldout.jsonl", "heldout.npz"
# A LoRA run's final adapters (`tfformer.models.lora.save_adapters`).
ADAPTERS = "adapters.npz"


def tokenizer_file(kind, role):
    """File name of the `role` tokenizer ("source", "target", "text")."""
    if kind not in TOKENIZER_KINDS:
        raise InputError(
            f"tokenizer must be one of {TOKENIZER_KINDS}. Received: {kind!r}"
        )
    return f"{role}_vocab.txt" if kind == "wordpiece" else f"{role}_tokenizer.json"


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """One tokenizer of a run: its kind, file (absolute path), casing and
    options (a converted vocabulary's special tokens and normalization, as
    `TokenizerEntry.options` gives them; empty for one tfformer learned)."""

    kind: str
    path: str
    lower_case: bool = False
    options: dict = dataclasses.field(default_factory=dict)

    @property
    def vocabulary_file(self):
        """The vocabulary file to ship with an export, or None (bytes)."""
        return self.path if self.kind == "wordpiece" else None


class RunDirectory:
    """A run directory on disk: the only code that reads or writes its
    files by name.

    Args:
        path: the directory `tfformer-train` or `tfformer-convert` wrote.

    Raises:
        ValueError: `path` is not a directory.
    """

    @classmethod
    def create(cls, path):
        """The run directory at `path`, made (with its parents) if needed."""
        os.makedirs(path, exist_ok=True)
        return cls(path)

    def __init__(self, path):
        if not isinstance(path, str | os.PathLike) or not os.path.isdir(path):
            raise InputError(
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
            raise InputError(
                f"{self.path} is not a finished training run: {name} is missing."
            )
        with open(path, encoding="utf-8") as f:
            try:
                return json.load(f)
            except json.JSONDecodeError as e:
                raise InputError(f"{path} is not valid JSON: {e}") from None
            except UnicodeDecodeError as e:
                raise InputError(f"{path} is not UTF-8 text: {e}") from None

    def write_json(self, name, values):
        """Writes `values` as `name` (atomically)."""
        atomic_write_text(self.file(name), json.dumps(values, indent=2) + "\n")

    # -- the manifest ----------------------------------------------------------

    @property
    def manifest(self):
        """The run's typed manifest (the `RunManifest` subclass of its task)."""
        if self._manifest is None:
            self._manifest = RunManifest.from_manifest(
                self.read_json(MANIFEST), self.file(MANIFEST)
            )
        return self._manifest

    @property
    def task(self):
        return self.manifest.task

    def tokenizer(self, role):
        """The `TokenizerSpec` of `role`; its file is checked to exist."""
        entry = self.manifest.tokenizers.get(role)
        if entry is None:
            raise InputError(
                f"{self.file(MANIFEST)}: a {self.task} run has no {role!r} "
                f"tokenizer (it has {sorted(self.manifest.tokenizers)})."
            )
        name = tokenizer_file(entry.kind, role)
        if not os.path.isfile(self.file(name)):
            raise InputError(f"{self.path} is not a finished run: {name} is missing.")
        return TokenizerSpec(
            entry.kind, self.file(name), entry.lower_case, entry.options
        )

    def write_manifest(self, manifest):
        """Writes `run.json` from a `RunManifest`."""
        if not isinstance(manifest, RunManifest):
            raise InputTypeError(
                f"manifest must be a RunManifest. Received: {type(manifest).__name__}"
            )
        self.write_json(MANIFEST, manifest.to_manifest())
        self._manifest = None

    # -- the training config and metrics ---------------------------------------

    def read_config(self):
        """The training config as written (`config.json`: nested dicts)."""
        return self.read_json(CONFIG)

    def write_config(self, values):
        self.write_json(CONFIG, values)

    def read_metrics(self):
        """`metrics.json` (the training report), or None if there is none."""
        if not os.path.isfile(self.file(METRICS)):
            return None
        return self.read_json(METRICS)

    def write_metrics(self, values):
        self.write_json(METRICS, values)

    # -- held-out examples -----------------------------------------------------

    def write_heldout(self, rows):
        """Writes `rows` (JSON objects) as `heldout.jsonl`, atomically
        (nothing when there are none)."""
        if not rows:
            return
        lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in rows]
        atomic_write_text(self.file(HELDOUT), "".join(lines))

    def write_heldout_images(self, pixels, labels):
        """Writes uint8 `pixels` (N, H, W, 3) and int `labels` (N,) as
        `heldout.npz`, atomically."""
        import io

        import numpy as np

        from tfformer.runs.files import atomic_write_bytes

        buffer = io.BytesIO()
        np.savez_compressed(
            buffer, pixels=np.asarray(pixels, np.uint8), labels=np.asarray(labels)
        )
        atomic_write_bytes(self.file(HELDOUT_IMAGES), buffer.getvalue())

    def heldout_file(self):
        """The path of the run's held-out examples, or None (a converted
        run, or one trained before tfformer wrote them)."""
        for name in (HELDOUT, HELDOUT_IMAGES):
            if os.path.isfile(self.file(name)):
                return self.file(name)
        return None

    # -- models ----------------------------------------------------------------

    def checkpoint_path(self, checkpoint="model.keras"):
        if checkpoint not in CHECKPOINTS:
            raise InputError(
                f"checkpoint file must be one of {CHECKPOINTS}. "
                f"Received: {checkpoint!r}"
            )
        path = self.file(checkpoint)
        if not os.path.isfile(path):
            raise InputError(
                f"{self.path} is not a finished training run: {checkpoint} is missing."
            )
        return path

    def chat_template(self):
        """The run's `ChatTemplate`, or None when its manifest names none
        (ValueError naming a missing or damaged file)."""
        name = getattr(self.manifest, "chat_template", None)
        if name is None:
            return None
        if name != CHAT_TEMPLATE:  # a manifest names no other file
            raise InputError(
                f"{self.file(MANIFEST)}: settings.chat_template must be "
                f"{CHAT_TEMPLATE!r}. Received: {name!r}"
            )
        from tfformer.preprocessing.chat_template import ChatTemplate

        return ChatTemplate.load(self.file(name))

    def load_model(self, checkpoint="model.keras"):
        """The task model in `checkpoint` (uncompiled): a
        `tfformer.models.TaskModel`. A model saved before tfformer's
        backbones (a plain functional model) is rebuilt as one with its
        weights (`tfformer.models.upgrade_legacy_model`)."""
        import zipfile
        import zlib

        import keras

        from tfformer.models import upgrade_legacy_model

        path = self.checkpoint_path(checkpoint)
        # Keras reads a file that is no zip as a path to look for ("File not
        # found") and lets a damaged member's error through as a traceback.
        if not zipfile.is_zipfile(path):
            raise InputError(
                f"{path} is not a Keras model file (no zip archive: truncated, "
                "or another file saved under its name)."
            )
        try:
            model = keras.saving.load_model(path, compile=False)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, KeyError) as e:
            raise InputError(
                f"{path} is damaged ({type(e).__name__}: {e}); re-train or "
                "re-convert the run, or use the other checkpoint (--model)."
            ) from None
        except (ValueError, TypeError) as e:  # Keras cannot rebuild what it holds
            raise InputError(
                f"{path} is not a model this tfformer can rebuild "
                f"({type(e).__name__}: {e}); it may come from another version "
                "of tfformer or Keras."
            ) from None
        return upgrade_legacy_model(model)
