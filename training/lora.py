"""What training does for LoRA (`model.lora_rank`, `tfformer.models.lora`):
adapt the built model, say how much of it trains, and back up only what
training changes (`AdapterWeights`). Each is a no-op for a run without
`model.lora_rank`."""

import hashlib
import json
import zipfile

import keras
import numpy as np

from tfformer.errors import InputError


def adapt(model, model_config, progress, seed=None):
    """Freezes `model`'s backbone, adds the config's adapters (A drawn from
    `seed`, the run's) and says how many of the parameters train."""
    if model_config.lora_rank is None:
        return
    from tfformer.models.lora import enable_lora

    c = model_config
    enable_lora(model, c.lora_rank, c.lora_targets, c.lora_alpha, seed=seed)
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    progress(
        f"LoRA: rank {model_config.lora_rank} on "
        f"{', '.join(model_config.lora_targets)}; {trainable:,} of "
        f"{model.count_params():,} parameters train"
    )


class AdapterWeights:
    """A LoRA run's backup (`ResumableBackup`'s `weights_file`): the weights
    training changes (the adapters, the layers outside the backbone such as
    a new head) and the optimizer's state, without the frozen backbone,
    which a resumed run reads from `model.init_from` again. Keras's own
    `save_weights` would write each adapted kernel merged and restore it
    with zero adapters.

    The backup records a SHA-256 of the frozen weights: a resume whose
    `model.init_from` now holds other weights is refused rather than
    continued on the wrong base. `.npz`, no pickles.
    """

    file = "latest.adapters.npz"

    def __init__(self):
        self.saved_fingerprint = None  # the frozen weights do not change

    @staticmethod
    def _parts(model):
        frozen = [v for v in model.backbone.weights if not v.trainable]
        ids = {id(v) for v in frozen}
        kept = [v for v in model.weights if id(v) not in ids]
        return frozen, kept, list(model.optimizer.variables)

    @staticmethod
    def _fingerprint(frozen):
        digest = hashlib.sha256()
        for v in frozen:
            digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(v)).data)
        return digest.hexdigest()

    def save(self, model, path):
        frozen, kept, optimizer = self._parts(model)
        if self.saved_fingerprint is None:
            self.saved_fingerprint = self._fingerprint(frozen)
        meta = {
            "model": [v.path for v in kept],
            "optimizer": [v.path for v in optimizer],
            "frozen_sha256": self.saved_fingerprint,
        }
        arrays = {f"model/{i}": v for i, v in enumerate(kept)}
        arrays.update({f"optimizer/{i}": v for i, v in enumerate(optimizer)})
        arrays = {k: keras.ops.convert_to_numpy(v) for k, v in arrays.items()}
        with open(path, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)

    def load(self, model, path):
        """Sets the saved weights and optimizer state; ValueError naming
        what does not match."""
        from tfformer.training.callbacks import DAMAGED_BACKUP

        def damaged(detail):
            return InputError(f"{path} cannot be read ({detail}): {DAMAGED_BACKUP}")

        frozen, kept, optimizer = self._parts(model)
        try:
            with np.load(path, allow_pickle=False) as f:
                meta = json.loads(str(f["meta"]))
                saved = {k: f[k] for k in f.files if k != "meta"}
        except (zipfile.BadZipFile, KeyError, EOFError, json.JSONDecodeError) as e:
            raise damaged(f"not a LoRA backup: {e}") from None
        # The optimizer's variable names carry Keras's per-process counters:
        # they are matched by count and shape, in the model's order.
        if meta.get("model") != [v.path for v in kept] or len(
            meta.get("optimizer", ())
        ) != len(optimizer):
            raise damaged("its variables are not this run's")
        for group, variables in (("model", kept), ("optimizer", optimizer)):
            for i, v in enumerate(variables):
                value = saved.get(f"{group}/{i}")
                if value is None or tuple(value.shape) != tuple(v.shape):
                    raise damaged(f"{v.path} is missing or misshapen")
        if meta.get("frozen_sha256") != self._fingerprint(frozen):
            raise InputError(
                "the frozen weights from model.init_from are not those this "
                f"run's backup {path} was trained on: keep model.init_from as "
                "it was, or pass --start-over"
            )
        for group, variables in (("model", kept), ("optimizer", optimizer)):
            for i, v in enumerate(variables):
                v.assign(saved[f"{group}/{i}"])


def save_adapters(model, run, write):
    """Writes a LoRA run's final adapters beside `model.keras`
    (`adapters.npz`; the export can ship them apart from the model)."""
    from tfformer.models import lora
    from tfformer.runs.directory import ADAPTERS
    from tfformer.training.callbacks import save_target

    if lora.adapted(model):
        with save_target(run.file(ADAPTERS), write) as tmp:
            lora.save_adapters(model, tmp)


def backup_weights(model_config):
    """The `weights_file` of a run's backups: `AdapterWeights` for a LoRA
    run, None (every weight) otherwise."""
    return None if model_config.lora_rank is None else AdapterWeights()
