"""Hugging Face checkpoint directories into tfformer run directories.

A checkpoint directory is what `save_pretrained` writes: `config.json`
(`model_type` names the architecture), `model.safetensors` (or its sharded
index) and the tokenizer's files. `convert(source, out)` reads it with
NumPy alone (no transformers, no torch), builds the tfformer model, copies
every tensor into it (each checked against the shape the config implies)
and writes a run directory. Nothing is written unless the whole conversion
succeeds: the run is built in a temporary directory beside `out` and
renamed into place.

One module per architecture converts it (`bert`: BERT, MiniLM,
sentence-transformers and `BertForSequenceClassification`; `vit`; `gpt2`;
`llama`; ...), in the shape of keras-hub's `convert_<arch>.py`: its
config.json read into backbone arguments, its tensors loaded through the
backbone's typed handles, its run written with its task's manifest. What
more than one of them needs lives once: `checkpoint` (config.json values,
tensors into variables), `safetensors` (the weight files), `tokenizers`
(WordPiece, byte-level BPE), `decoders` (ids shifted by one, the causal LM
and its run) and `runs` (the files of a run).

Adding an architecture is one module here and one test file
(`tests/training/convert/huggingface/test_<module>.py`), nothing else
edited. The module declares

    MODEL_TYPES = ("qwen2",)  # config.json's model_type values it converts

    def convert(source, config, staging, progress):
        # source: the checkpoint directory; config: its config.json (a
        # dict); staging: the empty run directory to write (model,
        # manifest, tokenizer: `runs.write_run`); progress: a print-like
        # callable. Returns the run's training config (a dict: task, data,
        # model), which `convert` checks and writes as config.json.

and raises ValueError naming the key, file or tensor it cannot convert.
`architectures()` finds it by importing every module of this package; a
`model_type` no module claims is refused, naming those that are.
"""

import importlib
import os
import pkgutil
import shutil
import sys
import tempfile

from tfformer.errors import InputError
from tfformer.runs.directory import RunDirectory
from tfformer.training.convert.huggingface.checkpoint import read_json


def architectures(package=None):
    """{model_type: module} for every module of `package` (this one by
    default) that declares `MODEL_TYPES` and a `convert` function.

    Raises:
        TypeError: a module's `MODEL_TYPES` is not a tuple of strings, or it
            has no `convert`, or two modules claim one model_type.
    """
    package = package or sys.modules[__name__]
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        model_types = getattr(module, "MODEL_TYPES", None)
        if model_types is None:
            continue  # a helper module
        if not isinstance(model_types, tuple) or not all(
            isinstance(t, str) for t in model_types
        ):
            raise TypeError(  # a fault, not input
                f"{module.__name__}.MODEL_TYPES must be a tuple of strings. "
                f"Received: {model_types!r}"
            )
        if not callable(getattr(module, "convert", None)):
            raise TypeError(  # a fault, not input
                f"{module.__name__} declares MODEL_TYPES but has no convert"
                "(source, config, staging, progress)."
            )
        for model_type in model_types:
            if model_type in found:
                raise TypeError(  # a fault, not input
                    f"model_type {model_type!r} is claimed by both "
                    f"{found[model_type].__name__} and {module.__name__}."
                )
            found[model_type] = module
    return found


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
        raise InputError(
            f"--from must be a Hugging Face checkpoint directory. Received: {source!r}"
        )
    if not isinstance(out, str | os.PathLike) or not os.fspath(out):
        raise InputError(f"--out must be a directory path. Received: {out!r}")
    source, out = os.fspath(source), os.path.abspath(os.fspath(out))
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"--out must be a new or empty directory. Received: {out!r}")
    config = read_json(source, "config.json")
    if not isinstance(config, dict):
        raise InputError(f"{source}/config.json must hold a JSON object.")
    known = architectures()
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in known:
        raise InputError(
            f"{source}/config.json: model_type must be one of {sorted(known)}. "
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
        training_config = known[model_type].convert(source, config, staging, progress)
        config_from_dict(training_config)  # what tfformer.load will read back
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
