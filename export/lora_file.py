"""LiteRT-LM's LoRA file: the adapters of a LoRA run, which LiteRT-LM
(`litert_lm.LoraConfig(lora_path=...)`, CPU) and `generate.py` bind to the
`lora_*` inputs of a model exported with `--lora file`.

The layout is what LiteRT-LM 0.18's `LoRA::Init` reads (its LoRA file
has no published specification; `litert-torch`'s `LoRA.to_tflite` writes
the weights inline, which that reader does not take):
- a TFLite flatbuffer (`TFL3`) of one subgraph with a float32 tensor per
  weight, named as the model input it feeds
  (`lora_atten_{q,k,v,o}_{a,b}_prime_weight_<layer>`);
- each tensor's bytes after the flatbuffer, found through its buffer's
  `offset` and `size` (buffer 0 empty), the file padded to 4 KiB (the
  runtime maps it in pages);
- a metadata entry `lora_rank` whose buffer field holds the rank (LiteRT-LM
  on CPU takes 16 and 32).
A tensor the file lacks is bound to zeros by both runtimes.
"""

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from tfformer.runs.files import atomic_write_bytes

# Where LiteRT-LM's reader expects each tensor's bytes to start, and the
# page size it maps the file in.
ALIGN, PAGE = 64, 4096


def _pack(items, offsets, rank):
    model = schema.ModelT()
    model.version = 3
    model.description = "tfformer LoRA weights"
    model.buffers = [schema.BufferT()]
    subgraph = schema.SubGraphT()
    subgraph.name = "lora_params"
    subgraph.tensors, subgraph.inputs, subgraph.outputs = [], [], []
    subgraph.operators = []
    for k, ((name, array), offset) in enumerate(zip(items, offsets, strict=True)):
        buffer = schema.BufferT()
        buffer.offset, buffer.size = offset, array.nbytes
        model.buffers.append(buffer)
        tensor = schema.TensorT()
        tensor.name = name
        tensor.shape = list(array.shape)
        tensor.type = schema.TensorType.FLOAT32
        tensor.buffer = k + 1
        subgraph.tensors.append(tensor)
    model.subgraphs = [subgraph]
    metadata = schema.MetadataT()
    metadata.name, metadata.buffer = "lora_rank", rank
    model.metadata = [metadata]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _padded(n, to):
    return -(-n // to) * to


def lora_file_bytes(weights, rank):
    """The file of `weights` ({input name: float32 array}) at `rank`."""
    items = [(n, np.ascontiguousarray(a, np.float32)) for n, a in weights.items()]
    # Offsets are fixed-width fields: a first packing with non-zero
    # placeholders has the final size.
    size = len(_pack(items, [1] * len(items), rank))
    offsets, at = [], _padded(size, ALIGN)
    for _, array in items:
        offsets.append(at)
        at += _padded(array.nbytes, ALIGN)
    head = _pack(items, offsets, rank)
    if len(head) != size:  # flatbuffers changed how it packs
        raise RuntimeError("the LoRA file's header changed size while packing")
    out = bytearray(head)
    for (_, array), offset in zip(items, offsets, strict=True):
        out += b"\0" * (offset - len(out))
        out += array.tobytes()
    out += b"\0" * (_padded(len(out), PAGE) - len(out))
    return bytes(out)


def write_lora_file(path, weights, rank):
    atomic_write_bytes(path, lora_file_bytes(weights, rank))
