"""Reading Hugging Face `.safetensors` weight files with NumPy alone.

The format (https://huggingface.co/docs/safetensors): an 8-byte
little-endian header length N, N bytes of JSON `{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {...}}`, then the tensors'
little-endian bytes, offsets counted from the end of the header. A
checkpoint is one `model.safetensors`, or shards listed by
`model.safetensors.index.json` (`{"weight_map": {name: file}}`).

Every tensor is checked against the file (dtype known, offsets inside the
data and matching the shape), so a truncated or corrupt file is a
ValueError naming the file and the tensor, never a wrong array.
"""

import json
import os
import struct

import numpy as np

from tfformer.errors import InputError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# Header sizes above this are refused (the format's own limit is 100 MB).
MAX_HEADER_BYTES = 100_000_000


def _dtypes():
    import ml_dtypes  # a TensorFlow dependency: bfloat16 for NumPy

    return {
        "F64": np.dtype("<f8"),
        "F32": np.dtype("<f4"),
        "F16": np.dtype("<f2"),
        "BF16": np.dtype(ml_dtypes.bfloat16),
        "I64": np.dtype("<i8"),
        "I32": np.dtype("<i4"),
        "I16": np.dtype("<i2"),
        "I8": np.dtype("i1"),
        "U8": np.dtype("u1"),
        "BOOL": np.dtype("?"),
    }


class SafetensorsFile:
    """The tensors of one `.safetensors` file, read on demand (memory-mapped).

    Args:
        path: the file.

    Raises:
        ValueError: the file is missing, or its header is not a valid
            safetensors header (named with the file and, for a tensor entry,
            the tensor).
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise InputError(f"Weights file not found. Received: {self.path!r}")
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError(f"{self.path} is not a safetensors file (too short).")
            (length,) = struct.unpack("<Q", head)
            if length > min(MAX_HEADER_BYTES, size - 8):
                raise InputError(
                    f"{self.path} is not a safetensors file (header length {length} "
                    f"in a file of {size} bytes)."
                )
            try:
                header = json.loads(f.read(length))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise InputError(
                    f"{self.path} is not a safetensors file (header: {e})."
                ) from None
        if not isinstance(header, dict):
            raise InputError(f"{self.path}: the header must be a JSON object.")
        self.metadata = header.pop("__metadata__", None) or {}
        self._start = 8 + length
        data_size = size - self._start
        dtypes = _dtypes()
        self._entries = {}
        for name, entry in header.items():
            where = f"{self.path}: tensor {name!r}"
            if not isinstance(entry, dict):
                raise InputError(
                    f"{where}: entry must be an object. Received: {entry!r}"
                )
            dtype = dtypes.get(entry.get("dtype"))
            if dtype is None:
                raise InputError(
                    f"{where}: dtype must be one of {sorted(dtypes)}. "
                    f"Received: {entry.get('dtype')!r}"
                )
            shape = entry.get("shape")
            offsets = entry.get("data_offsets")

            def integer(x):
                return isinstance(x, int) and not isinstance(x, bool)

            if (
                not isinstance(shape, list)
                or not all(integer(d) and d >= 0 for d in shape)
                or not isinstance(offsets, list)
                or len(offsets) != 2
                or not all(integer(o) for o in offsets)
            ):
                raise InputError(
                    f"{where}: shape and data_offsets are malformed. "
                    f"Received: shape={shape!r}, data_offsets={offsets!r}"
                )
            begin, end = offsets
            expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if not 0 <= begin <= end <= data_size or end - begin != expected:
                raise InputError(
                    f"{where}: data_offsets {offsets} do not hold a {entry['dtype']} "
                    f"tensor of shape {shape} inside the file's {data_size} data "
                    "bytes (truncated or corrupt file?)."
                )
            self._entries[name] = (dtype, tuple(shape), begin, end)
        # The tensors must tile the data exactly: in order of their offsets,
        # each starts where the one before ended, the last ends the file.
        # (Overlapping or aliased entries would read wrong arrays.)
        position = 0
        for name, (_, _, begin, end) in sorted(
            self._entries.items(), key=lambda item: (item[1][2], item[1][3])
        ):
            if begin != position:
                raise InputError(
                    f"{self.path}: tensor {name!r} starts at byte {begin} of the "
                    f"data, expected {position} (overlapping or gapped tensors: "
                    "a corrupt file)."
                )
            position = end
        if position != data_size:
            raise InputError(
                f"{self.path}: the tensors end at byte {position} of the data "
                f"but the file holds {data_size} (truncated or corrupt file?)."
            )
        self._data = None

    def keys(self):
        return list(self._entries)

    def __contains__(self, name):
        return name in self._entries

    def shape(self, name):
        return self._entries[name][1]

    def get(self, name):
        """The tensor `name` as a NumPy array (a copy, native byte order)."""
        if name not in self._entries:
            raise KeyError(name)
        dtype, shape, begin, _ = self._entries[name]
        if self._data is None:
            self._data = np.memmap(self.path, dtype="u1", mode="r")
        count = int(np.prod(shape, dtype=np.int64))
        start = self._start + begin
        flat = np.frombuffer(
            self._data[start : start + count * dtype.itemsize], dtype=dtype
        )
        return flat.reshape(shape).astype(dtype.newbyteorder("="), copy=True)


class Checkpoint:
    """The weights of a Hugging Face checkpoint directory: `model.safetensors`
    or the shards of `model.safetensors.index.json`.

    Args:
        directory: the checkpoint directory.

    Raises:
        ValueError: neither file is there (a PyTorch-only `pytorch_model.bin`
            is named as unsupported), or a shard is missing or broken.
    """

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        single = os.path.join(self.directory, SINGLE)
        index = os.path.join(self.directory, INDEX)
        self._files = {}
        if os.path.isfile(single):
            shard = SafetensorsFile(single)
            self._where = {name: shard for name in shard.keys()}
        elif os.path.isfile(index):
            with open(index, encoding="utf-8") as f:
                try:
                    weight_map = json.load(f)["weight_map"]
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    raise InputError(f"{index} is not JSON ({e}).") from None
                except (KeyError, TypeError) as e:
                    raise InputError(f"{index}: no weight_map ({e}).") from None
            if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
            ):
                raise InputError(
                    f"{index}: weight_map must map tensor names to file names."
                )
            self._where = {}
            for name, file in weight_map.items():
                if file not in self._files:
                    self._files[file] = SafetensorsFile(
                        os.path.join(self.directory, file)
                    )
                if name not in self._files[file]:
                    raise InputError(f"{index}: {file} has no tensor {name!r}.")
                self._where[name] = self._files[file]
        else:
            found = sorted(os.listdir(self.directory))
            bin_only = any(f.endswith(".bin") or f.endswith(".pt") for f in found)
            raise InputError(
                f"{self.directory} has no {SINGLE} (or {INDEX})"
                + (
                    ": PyTorch pickles (.bin) are not read; save the model "
                    "with safetensors (`model.save_pretrained(dir)` does by default)"
                    if bin_only
                    else ""
                )
                + f". Found: {found}"
            )
        self.used = set()

    def keys(self):
        return list(self._where)

    def __contains__(self, name):
        return name in self._where

    def shape(self, name):
        return self._where[name].shape(name)

    def get(self, name, shape=None):
        """The tensor `name`; with `shape`, checked to have it (ValueError
        naming the tensor and both shapes)."""
        if name not in self._where:
            raise InputError(
                f"{self.directory}: the checkpoint has no tensor {name!r}."
            )
        value = self._where[name].get(name)
        if shape is not None and tuple(value.shape) != tuple(shape):
            raise InputError(
                f"{self.directory}: tensor {name!r} has shape {list(value.shape)}; "
                f"the config implies {list(shape)}."
            )
        self.used.add(name)
        return value

    def unused(self):
        """Names never read by `get` (to report what a conversion left out)."""
        return sorted(set(self._where) - self.used)
