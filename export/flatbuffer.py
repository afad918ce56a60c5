"""Reads a `.tflite` flatbuffer with the schema module `ai_edge_litert` ships
(the exporter checks integer-only models with it; the tests inspect ops,
types and stored weights).

The interpreter's `get_tensor_details()` and `_get_ops_details()` list the main
subgraph only; the decoding loop's body is a subgraph of its own. Reading the
flatbuffer sees every subgraph and every buffer, so a weight stored twice
shows as two buffers wherever it lives.
"""

import dataclasses

from ai_edge_litert import schema_py_generated as schema

TYPE_NAMES = {
    value: name
    for name, value in vars(schema.TensorType).items()
    if not name.startswith("_")
}
FLOAT_TYPES = ("FLOAT32", "FLOAT16", "FLOAT64")
OP_NAMES = {
    value: name
    for name, value in vars(schema.BuiltinOperator).items()
    if not name.startswith("_")
}


@dataclasses.dataclass(frozen=True)
class Op:
    subgraph: str
    name: str  # builtin name: "FULLY_CONNECTED"
    inputs: tuple  # tensor type names: ("INT8", "INT8", "INT32")
    outputs: tuple


def read_model(flatbuffer):
    return schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(flatbuffer, 0))


def constant_buffers(model, tensor_type):
    """`{buffer index: (shape, bytes)}` of the constant tensors of
    `tensor_type` ("INT8") over all subgraphs: one entry per stored copy."""
    found = {}
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            buffer = model.buffers[tensor.buffer]
            stored = len(buffer.data) if buffer.data is not None else buffer.size
            if stored and TYPE_NAMES[tensor.type] == tensor_type:
                found[tensor.buffer] = (tuple(int(d) for d in tensor.shape), stored)
    return found


def ops(model):
    """Every op of every subgraph with its tensors' types."""
    listed = []
    for subgraph in model.subgraphs:
        name = subgraph.name.decode() if subgraph.name else ""
        for op in subgraph.operators:
            code = model.operatorCodes[op.opcodeIndex]
            # Codes above 127 live in builtinCode only; older ones in both.
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)

            def types(indices, tensors=subgraph.tensors):
                return tuple(TYPE_NAMES[tensors[i].type] for i in indices if i >= 0)

            listed.append(
                Op(name, OP_NAMES[builtin], types(op.inputs), types(op.outputs))
            )
    return listed


def signature_types(model):
    """`(input types, output types)` of the main subgraph."""
    main = model.subgraphs[0]
    return (
        tuple(TYPE_NAMES[main.tensors[i].type] for i in main.inputs),
        tuple(TYPE_NAMES[main.tensors[i].type] for i in main.outputs),
    )


def float_ops(flatbuffer):
    """`{op name: count}` of the ops of every subgraph that read or write a
    float tensor (empty for an integer-only model)."""
    counts = {}
    for op in ops(read_model(flatbuffer)):
        if any(t in FLOAT_TYPES for t in op.inputs + op.outputs):
            counts[op.name] = counts.get(op.name, 0) + 1
    return counts
