"""int4 weights for any task's TFLite models, through Google's
`ai-edge-quantizer`; every int4 model passes the quality gate
(`tfformer.export.quality`) before it is written.

TensorFlow's converter has no int4 post-training quantization. The float32
models the converter writes are quantized by `ai-edge-quantizer`'s dynamic
recipe: int4 weights of every op it supports (FULLY_CONNECTED, and
EMBEDDING_LOOKUP, which these graphs do not use: their embedding is a
GATHER, which it leaves in float32), in blocks of `block`
weights along the input dimension with one scale each ("channel": one scale
per output channel), activations quantized on the fly. (Its weight-only
recipe with blocks leaves this version's models in float32: 3.42 MB of
3.43 for the 10-minute tinyshakespeare GPT; it is not offered.)

Measured by the gate on the 10-minute tinyshakespeare GPT (0.83 M
parameters, 512 held-out bytes; float32 1.327 nats per byte): int4 in
blocks of 32 +0.088 nats per byte (top-1 agreement 86.5 %), of 64 +0.086
(83.6 %), of 128 +0.099 (81.5 %), per channel +0.124 (80.1 %). Blocks of
32 are the default (the best agreement); the gate's default threshold for
generators, 0.1 nats per token, lets blockwise int4 pass there and refuses
per-channel int4.
"""

from tfformer.errors import InputError

BLOCKS = ("32", "64", "128", "256", "channel")
DEFAULT_BLOCK = "32"
# TFLite's TensorType of int4 (schema.fbs).
INT4 = 17


def require_quantizer():
    """`ai_edge_quantizer`'s quantizer and types, or ValueError saying what
    to install."""
    try:
        from ai_edge_quantizer import qtyping, quantizer
    except ImportError:
        raise InputError(
            "--quantize int4 needs Google's ai-edge-quantizer: pip install -e "
            '".[int4]" (or pip install "ai-edge-quantizer>=0.10,<0.11").'
        ) from None
    return quantizer, qtyping


def check_block(block):
    """`block` as one of BLOCKS, or ValueError naming it."""
    block = str(block)
    if block not in BLOCKS:
        raise InputError(
            f"--int4-block must be one of {', '.join(BLOCKS)} (weights per scale; "
            f"channel: one scale per output channel). Received: {block!r}"
        )
    return block


def quantize_int4(flatbuffer, block=DEFAULT_BLOCK):
    """The float32 TFLite `flatbuffer` with int4 weights (see the module's
    docstring), as bytes."""
    quantizer, qtyping = require_quantizer()
    granularity = (
        qtyping.QuantGranularity.CHANNELWISE
        if check_block(block) == "channel"
        else qtyping.QuantGranularity[f"BLOCKWISE_{block}"]
    )
    q = quantizer.Quantizer(bytearray(flatbuffer))
    q.add_dynamic_config(
        regex=".*",
        operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
        num_bits=4,
        granularity=granularity,
    )
    try:
        result = q.quantize(enable_progress_bar=False, enable_progress_report=False)
    except ValueError as e:  # a block size that does not divide a weight's rows
        raise InputError(f"--int4-block {block}: {e}") from None
    quantized = share_identical_buffers(bytes(result.quantized_model))
    if not int4_tensors(quantized):
        raise InputError(
            f"ai-edge-quantizer left the model without int4 weights (blocks of "
            f"{block}): not written."
        )
    return quantized


def int4_tensors(flatbuffer):
    """How many tensors of the TFLite `flatbuffer` are INT4."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils

    model = tfl_flatbuffer_utils.read_model(bytearray(flatbuffer))
    return sum(t.type == INT4 for g in model.subgraphs for t in g.tensors)


# Beyond this, a flatbuffer keeps its buffers outside (offsets), which
# `share_identical_buffers` does not rewrite.
INLINE_LIMIT = 1_900_000_000


def share_identical_buffers(flatbuffer):
    """The TFLite `flatbuffer` with every constant tensor whose bytes equal
    an earlier buffer's reading that one.

    ai-edge-quantizer gives each consumer of a float weight it does not
    quantize a buffer of its own: the token embedding, which the output
    layer reads as int4 and every signature's GATHER reads as float32, is
    stored once per signature (3 times in a model with two prefill
    signatures: 0.27 MB of the 10-minute GPT's 1.06 MB). The converter
    shares such buffers between signatures; this restores that.
    """
    if len(flatbuffer) > INLINE_LIMIT:
        return flatbuffer
    import hashlib

    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    # Buffers a variable tensor or the metadata reads are left alone.
    kept = {m.buffer for m in model.metadata or []}
    for subgraph in model.subgraphs:
        kept |= {t.buffer for t in subgraph.tensors if t.isVariable}
    first, moved = {}, {}
    for index, buffer in enumerate(model.buffers):
        if index in kept or buffer.data is None or len(buffer.data) == 0:
            continue
        key = hashlib.sha256(bytes(buffer.data)).digest()
        if key in first:
            moved[index] = first[key]
        else:
            first[key] = index
    if not moved:
        return flatbuffer
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            tensor.buffer = moved.get(tensor.buffer, tensor.buffer)
    for index in moved:
        model.buffers[index].data = None
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))
