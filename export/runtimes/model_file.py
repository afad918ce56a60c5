"""Opens a `.tflite` model and the files beside it for the portable runtimes
shipped with this file, in Python with the standard library and
`ai_edge_litert` only: a missing, cut or changed model, a missing neighbour
and a damaged settings file are refused in one line naming the file.

A TFLite flatbuffer holds no checksum of its own: LiteRT runs most models
with a changed byte (computing something else) and fails on others deep in
AllocateTensors. So tfformer-export records each model's SHA-256 in
`SHA256SUMS` beside it, in the format of `sha256sum` (`sha256sum -c
SHA256SUMS` checks a copied export the same way), and `open_interpreter`
compares before loading. A model that `SHA256SUMS` does not list (one
quantized by another tool, say) is loaded as it is.

Port this check with the runtime: an app that downloads a model can hash it
against the same file.
"""

import hashlib
import importlib.util
import json
import os

SUMS = "SHA256SUMS"
HEX = frozenset("0123456789abcdef")


def neighbour(directory, name):
    """The path of `name` in `directory`; FileNotFoundError naming it if
    it is not there (the exporter writes it next to the model)."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{name} is missing from {directory} (tfformer-export writes it "
            "next to the model)"
        )
    return path


def load_module(directory, name):
    """The Python module `name`.py in `directory` (`tokenizer`)."""
    path = neighbour(directory, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"tfformer_device_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_digests(directory):
    """{file name: SHA-256 hex} of `directory/SHA256SUMS` ({} without one).

    Raises:
        ValueError: the file is not UTF-8 or a line is not
            `<64 hex digits>  <file name>` (named, with the line).
    """
    path = os.path.join(directory, SUMS)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"{path} is damaged: it is not UTF-8 text") from None
    digests = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        # `sha256sum` writes "<digest>  <name>", or "<digest> *<name>" in
        # binary mode; the digest may be in capitals.
        digest, mode, name = line[:64].lower(), line[64:66], line[66:]
        well_formed = len(digest) == 64 and set(digest) <= HEX and bool(name)
        if not well_formed or mode not in ("  ", " *"):
            raise ValueError(
                f"{path} is damaged: line {number} is not '<sha256>  <file "
                f"name>'. Received: {line[:80]!r}"
            )
        digests[name] = digest
    return digests


def file_digest(path):
    """The SHA-256 hex digest of the file at `path`, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_model(path):
    """Raises FileNotFoundError when there is no file at `path`, ValueError
    when `SHA256SUMS` beside it records another digest for it."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no model at {path!r} (a tfformer-export .tflite)")
    directory, name = os.path.split(os.path.abspath(path))
    expected = recorded_digests(directory).get(name)
    if expected is not None and file_digest(path) != expected:
        raise ValueError(
            f"{path} is damaged: its SHA-256 is not the one {SUMS} records "
            "for it (a copy cut short or a changed byte); copy or export it "
            "again"
        )


def read_settings(path, required=()):
    """The JSON object in the settings file at `path` (`text.json`,
    `image.json`).

    Raises:
        ValueError: the file is not UTF-8 JSON, not an object, or lacks a
            key of `required` (the file and the key named).
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        settings = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path} is damaged: not UTF-8 JSON ({e})") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path} is damaged: not a JSON object")
    missing = [key for key in required if key not in settings]
    if missing:
        raise ValueError(
            f"{path} is damaged: it has no {missing[0]!r}; export the model again"
        )
    return settings


def open_interpreter(path, num_threads=None, check=True):
    """The `ai_edge_litert` Interpreter of the model at `path`, checked
    against `SHA256SUMS` first (`check=False`: the caller has called
    `check_model`, before reading the files beside the model).

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: the model does not match `SHA256SUMS`, or LiteRT cannot
            read it as a model (both named).
    """
    from ai_edge_litert.interpreter import Interpreter

    if check:
        check_model(path)
    try:
        return Interpreter(model_path=path, num_threads=num_threads)
    except (RuntimeError, ValueError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{path} is not a TFLite model LiteRT can read ({reason})"
        ) from None


def read_lora_file(path):
    """({input name: float32 array}, rank) of a LoRA file
    (`tfformer-export --lora file`'s `lora.tflite`, checked against
    `SHA256SUMS` as a model is). Each tensor's bytes lie at its buffer's
    offset in the file (LiteRT-LM's layout).

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: not such a file, or a tensor that is not float32 or
            lies outside it (named).
    """
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema

    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no LoRA file at {path!r} (tfformer-export --lora file)"
        )
    check_model(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        if not schema.Model.ModelBufferHasIdentifier(data, 0):
            raise ValueError("no TFL3 identifier")
        model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
        ranks = [m.buffer for m in model.metadata or () if m.name == b"lora_rank"]
        tensors = model.subgraphs[0].tensors or []
    except Exception as e:  # flatbuffers raises anything on garbage
        raise ValueError(
            f"{path} is not a LoRA file ({type(e).__name__}: {e})"
        ) from None
    if len(ranks) != 1:
        raise ValueError(f"{path} is not a LoRA file: no lora_rank metadata")
    weights = {}
    for tensor in tensors:
        name = tensor.name.decode("utf-8", "replace")
        if not 0 < tensor.buffer < len(model.buffers or ()):
            raise ValueError(f"{path} is damaged: tensor {name!r} has no buffer")
        buffer = model.buffers[tensor.buffer]
        shape = tuple(int(d) for d in tensor.shape)
        size = 4 * int(np.prod(shape))
        end = int(buffer.offset) + int(buffer.size)
        if (
            tensor.type != schema.TensorType.FLOAT32
            or buffer.size != size
            or end > len(data)
        ):
            raise ValueError(
                f"{path} is damaged: tensor {name!r} is not float32 {shape} "
                "inside the file"
            )
        weights[name] = np.frombuffer(
            data, np.float32, size // 4, int(buffer.offset)
        ).reshape(shape)
    return weights, int(ranks[0])
