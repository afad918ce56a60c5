"""`.litertlm` bundles: a causal-LM run for Google's LiteRT-LM runtime.

A bundle, written with `litert-lm-builder`, holds:
- the float32 `prefill`/`decode` model of `tfformer.export.tflite` (caches
  `(1, kv_heads, context, head_dim)`, the layout LiteRT-LM reads);
- the tokenizer as a Hugging Face `tokenizer.json`;
- an `LlmMetadata` record: the start token, the stop token, the context as
  `max_num_tokens`, and the `GenericModel` type.

Before the bundle is written, LiteRT-LM (its Python package, on this
machine's CPU) loads it and decodes greedily from a fixed prompt, and the
text it returns must be the text of `generate.py`'s greedy tokens (the
reference runtime, on the same TFLite model), to the last byte and the
same stopping point. A bundle the runtime cannot run, or runs differently,
is not written. The check sets LiteRT-LM's process-wide log level to ERROR.

Supported: runs trained on bytes (`data.tokenizer=byte`). Runs on WordPiece
and converted checkpoints (GPT-2's BPE, token ids) are refused, naming
their tokenizer.
"""

import json
import os
import tempfile

from tfformer.export.tflite import export_tflite
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.text import END_ID, RESERVED_TOKENS, START_ID
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import atomic_copy

BUNDLE = "model.litertlm"
# The runtime check's prompt and length.
CHECK_PROMPT = "ROMEO:"
CHECK_TOKENS = 8


def byte_level_alphabet():
    """GPT-2's map from each byte to the printable character that stands for
    it in a byte-level BPE vocabulary (Hugging Face's `bytes_to_unicode`)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(char) for byte, char in zip(printable, chars, strict=True)}


def byte_tokenizer_json():
    """tfformer's byte tokenizer (ids 0-3 reserved, byte b is id b + 4) as a
    Hugging Face `tokenizer.json`: a byte-level BPE without merges, so each
    byte is one token. The reserved tokens are in the vocabulary but not
    "added tokens", which Hugging Face would match in the text itself: a
    prompt holding "[END]" is five bytes, as in tfformer."""
    alphabet = byte_level_alphabet()
    vocabulary = {token: i for i, token in enumerate(RESERVED_TOKENS)}
    vocabulary.update({alphabet[b]: b + ByteTokenizer.offset for b in range(256)})
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": False,
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocabulary,
            "merges": [],
        },
    }


def llm_metadata(start_id, end_id, context):
    """The `LlmMetadata` text proto of a generic model."""
    return (
        f"start_token {{ token_ids {{ ids: {start_id} }} }}\n"
        f"stop_tokens {{ token_ids {{ ids: {end_id} }} }}\n"
        f"max_num_tokens: {context}\n"
        "llm_model_type { generic_model {} }\n"
    )


def require_packages():
    """`litertlm_builder` and `litert_lm`; ValueError naming the extra when
    either is missing."""
    try:
        import litert_lm
        from litert_lm_builder import litertlm_builder as builder
    except ImportError as e:
        raise ValueError(
            f"--format litertlm needs litert-lm-builder and litert-lm-api ({e}): "
            'pip install "tfformer[litertlm]"'
        ) from None
    return builder, litert_lm


def build_bundle(tflite_path, tokenizer_path, metadata_path, out_path):
    """Writes the `.litertlm` file with `litert-lm-builder`."""
    builder, _ = require_packages()
    bundle = builder.LitertLmFileBuilder()
    bundle.add_llm_metadata(metadata_path)
    bundle.add_tflite_model(tflite_path, builder.TfLiteModelType.PREFILL_DECODE)
    bundle.add_hf_tokenizer(tokenizer_path)
    with open(out_path, "wb") as f:
        bundle.build(f)


def litert_lm_greedy(bundle_path, prompt, max_tokens):
    """The text LiteRT-LM decodes greedily (top-k 1) from `prompt`: no
    prompt template, at most `max_tokens` tokens, up to the stop token."""
    _, litert_lm = require_packages()
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    with litert_lm.Engine(bundle_path) as engine:
        session = engine.create_session(
            apply_prompt_template=False,
            sampler_config=litert_lm.SamplerConfig(top_k=1),
            max_output_tokens=max_tokens,
        )
        try:
            session.run_prefill([prompt])
            return session.run_decode().texts[0]
        finally:
            session.close()


def reference_greedy(tflite_path, prompt, max_tokens):
    """The text `generate.py`'s greedy search decodes from [START] and the
    bytes of `prompt`: at most `max_tokens` tokens, up to [END]."""
    from tfformer.export.runtimes.generate import LiteRTGenerator

    offset = ByteTokenizer.offset
    ids = [START_ID, *(b + offset for b in prompt.encode("utf-8"))]
    tokens, _ = LiteRTGenerator(tflite_path).generate(ids, max_tokens, greedy=True)
    if END_ID in tokens:
        tokens = tokens[: tokens.index(END_ID)]
    return bytes(t - offset for t in tokens if t >= offset).decode(
        "utf-8", errors="replace"
    )


def check_bundle(
    bundle_path, tflite_path, prompt=CHECK_PROMPT, max_tokens=CHECK_TOKENS
):
    """Raises ValueError unless LiteRT-LM's greedy text from `prompt` is the
    reference runtime's (`generate.py`) on the bundled model."""
    try:
        got = litert_lm_greedy(bundle_path, prompt, max_tokens)
    except RuntimeError as e:
        raise ValueError(f"LiteRT-LM could not run the bundle: {e}") from None
    expected = reference_greedy(tflite_path, prompt, max_tokens)
    if got != expected:
        raise ValueError(
            f"LiteRT-LM decoded {got!r} from {prompt!r}; the reference runtime "
            f"decodes {expected!r}. The bundle is not written."
        )


def export_litertlm(run_dir, out_dir, *, checkpoint="model.keras", progress=print):
    """Writes `<out_dir>/model.litertlm` for a causal-LM run; returns its path."""
    require_packages()
    run = RunDirectory(run_dir)
    if run.task != "causal_lm":
        raise ValueError(
            f"--format litertlm is for causal_lm runs. Received: a {run.task!r} "
            f"run ({run.path})"
        )
    # From the manifest: the model is loaded once, by the TFLite export.
    kind = run.tokenizer("text").kind
    if kind != "byte":
        raise ValueError(
            "--format litertlm supports runs trained on bytes "
            f"(data.tokenizer=byte). Received: a run with the {kind!r} tokenizer"
        )
    progress(f"Converting {run.path} to the bundle's TFLite model...")
    with tempfile.TemporaryDirectory() as staging:
        tflite_dir = os.path.join(staging, "tflite")
        tflite = export_tflite(
            run.path, tflite_dir, checkpoint=checkpoint, progress=lambda *_: None
        )
        tokenizer = os.path.join(staging, "tokenizer.json")
        with open(tokenizer, "w", encoding="utf-8") as f:
            json.dump(byte_tokenizer_json(), f, ensure_ascii=False)
        metadata = os.path.join(staging, "llm_metadata.textproto")
        with open(metadata, "w", encoding="utf-8") as f:
            f.write(llm_metadata(START_ID, END_ID, run.manifest.max_length))
        bundle = os.path.join(staging, BUNDLE)
        build_bundle(tflite, tokenizer, metadata, bundle)
        progress("Checking the bundle in LiteRT-LM...")
        check_bundle(bundle, tflite)
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, BUNDLE)
        atomic_copy(bundle, path)
    progress(f"Wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB).")
    return path
