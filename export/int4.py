"""int4 weights for a text generator's TFLite models, through Google's
`ai-edge-quantizer`, and the quality gate every int4 export passes (and
every other quantized text generator is measured by:
`tfformer.export.tflite.QualityGate`).

TensorFlow's converter has no int4 post-training quantization. The float32
models the converter writes are quantized by `ai-edge-quantizer`'s dynamic
recipe: int4 weights of every supported op (FULLY_CONNECTED, the embedding
GATHER), in blocks of `block` weights along the input dimension with one
scale each ("channel": one scale per output channel), activations quantized
on the fly. (Its weight-only recipe with blocks leaves this version's models
in float32: 3.42 MB of 3.43 for the 10-minute tinyshakespeare GPT; it is
not offered.)

The gate. A quantized model that nobody measured is a trap (small LLMs
collapse under per-channel int4: litert-torch#1068), so the export scores
the int4 model and the float32 model of the same run, teacher-forced through
the reference runtime's `decode` signature, on held-out text: the run's
held-out tail (the last `data.holdout_fraction` of `data.text_path`), or a
file the user passes (a converted checkpoint has none). It reports nats per
token of both and the share of positions where their most likely next
token agrees; an int4 model that loses more than `max_increase` nats per
token is refused (nothing written) unless forced.

Measured by this gate on the 10-minute tinyshakespeare GPT (0.83 M
parameters, 512 held-out bytes; float32 1.327 nats per byte): float16
+0.000, dynamic int8 +0.008 (top-1 agreement 97.7 %), int4 in blocks of 32
+0.088 (86.5 %), of 64 +0.086 (83.6 %), of 128 +0.099 (81.5 %), per
channel +0.124 (80.1 %). Blocks of 32 are the default (the best
agreement). The default threshold, 0.1 nats per token (a perplexity 10.5 %
higher), lets blockwise int4 pass there and refuses per-channel int4.
"""

import json
import os

import numpy as np

from tfformer.errors import InputError
from tfformer.runs.files import atomic_write_text

BLOCKS = ("32", "64", "128", "256", "channel")
DEFAULT_BLOCK = "32"
DEFAULT_MAX_INCREASE = 0.1
# Held-out tokens scored per model: windows of at most 64 tokens.
QUALITY_TOKENS = 512
QUALITY_FILE = "quality.json"
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
    quantized = bytes(result.quantized_model)
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


def heldout_text(run, quality_text=None):
    """(text, where it comes from): the file `quality_text`, or the run's
    held-out tail; (None, why not) when there is neither."""
    path = quality_text
    if path is None:
        data = run.read_config().get("data", {})
        path, fraction = data.get("text_path"), data.get("holdout_fraction", 0.1)
        if not path or not os.path.isfile(path):
            return None, (
                "the run has no held-out text (data.text_path "
                f"{path!r}); pass --quality-text FILE"
            )
    try:
        if str(path).endswith(".gz"):
            import gzip

            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            with open(path, "rb") as f:
                raw = f.read()
    except OSError as e:
        raise InputError(f"--quality-text {path!r} is unreadable: {e}") from None
    text = raw.decode("utf-8", "replace")
    if quality_text is None:
        text = text[int(len(text) * (1 - fraction)) :]
        return text, f"the held-out tail of {path}"
    return text, str(path)


def heldout_ids(task_run, text, where):
    """The causal-LM run's token ids of `text` (its first 50,000
    characters: more than QUALITY_TOKENS of any tokenizer's), or ValueError
    naming `where` when there are fewer than 2."""
    from tfformer.export.tasks.causal_lm.run import core_tokenizer

    ids = core_tokenizer(task_run).tokenize([text[:50_000]])[0].numpy().tolist()
    if len(ids) < 2:
        raise InputError(f"{where} holds fewer than 2 tokens to measure on.")
    return ids


def score(model_path, ids, window):
    """(nats per token, each position's most likely next token) of the
    TFLite generator `model_path` on `ids`, cut into windows of `window`
    tokens, each read from an empty cache one `decode` at a time."""
    from tfformer.export.runtimes.generate import LiteRTGenerator

    generator = LiteRTGenerator(model_path)
    nll, count, top = 0.0, 0, []
    for start in range(0, len(ids) - 1, window):
        piece = ids[start : start + window + 1]
        cache = generator.new_cache()
        for i in range(len(piece) - 1):
            logits, cache = generator.decode(piece[i], i, cache)
            logits = np.asarray(logits, np.float64).reshape(-1)
            shifted = logits - logits.max()
            log_probs = shifted - np.log(np.exp(shifted).sum())
            nll -= log_probs[piece[i + 1]]
            count += 1
            top.append(int(np.argmax(logits)))
    return nll / max(count, 1), top


def measure(float_path, quantized_path, ids, context):
    """The gate's figures for `quantized_path` against `float_path` on
    `ids` (at most QUALITY_TOKENS of them, windows of at most 64 tokens
    inside `context`)."""
    ids = list(ids[: QUALITY_TOKENS + 1])
    window = max(1, min(64, context - 1))
    base, base_top = score(float_path, ids, window)
    nats, top = score(quantized_path, ids, window)
    agreement = float(np.mean([a == b for a, b in zip(top, base_top, strict=True)]))
    return {
        "tokens": len(top),
        "float32_nats_per_token": round(float(base), 4),
        "nats_per_token": round(float(nats), 4),
        "increase": round(float(nats - base), 4),
        "top1_agreement": round(agreement, 4),
    }


def gate(figures, max_increase, force, name):
    """ValueError (nothing is written) when the int4 model `name` loses more
    than `max_increase` nats per token and `force` is not set."""
    if figures["increase"] > max_increase and not force:
        raise InputError(
            f"{name} loses {figures['increase']:.4f} nats per token against "
            f"float32 ({figures['nats_per_token']:.4f} against "
            f"{figures['float32_nats_per_token']:.4f} on {figures['tokens']} "
            f"held-out tokens; top-1 agreement {figures['top1_agreement']:.1%}), "
            f"more than --max-loss-increase {max_increase}: not written. Smaller "
            "--int4-block, or --force to write it anyway."
        )


def record(out_dir, name, figures):
    """Adds `name`'s figures to `out_dir/quality.json`."""
    path = os.path.join(out_dir, QUALITY_FILE)
    known = {}
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                known = json.load(f)
        except (OSError, json.JSONDecodeError):
            known = {}
    if not isinstance(known, dict):
        known = {}
    known[name] = figures
    atomic_write_text(path, json.dumps(known, indent=2) + "\n")
