"""`.litertlm` bundles: a causal-LM run for Google's LiteRT-LM runtime.

A bundle, written with `litert-lm-builder`, holds:
- the float32 `prefill`/`decode` model of `tfformer.export.tflite` (caches
  `(1, kv_heads, context, head_dim)`, the layout LiteRT-LM reads; prefill
  signatures of several lengths, `prefill_lengths`);
- the tokenizer in the model's ids: for runs trained on bytes, a Hugging
  Face `tokenizer.json` of a byte-level BPE without merges; for converted
  GPT-2, Llama 3 and Qwen2 runs, their byte-level BPE (Qwen2's after its
  NFC normalizer) with every id one higher
  and a padding token at id 0 (what the converted model reads); for
  converted Llama 2 and Gemma runs, their SentencePiece model as a
  `tokenizer.model`, likewise shifted by a control piece at id 0;
- an `LlmMetadata` record: the start token (which LiteRT-LM puts before a
  prompt: none for runs trained on bytes or WordPiece, which
  `tfformer-predict` continues from the prompt's own ids, `<|begin_of_text|>` for
  Llama 3, none for GPT-2, whose prompts start with their own text), the
  stop token (and, for a converted chat model, every stop id of its replies
  and its chat template, see `STRING_CONTENTS`), the context as
  `max_num_tokens`, and the `GenericModel` type.

Before the bundle is written, LiteRT-LM (its Python package, on this
machine's CPU) loads it and decodes greedily from a fixed prompt, and the
text it returns must be the text of `generate.py`'s greedy tokens (the
reference runtime, on the same TFLite model), to the last byte and the
same stopping point. A bundle the runtime cannot run, or runs differently,
is not written. A bundle with a chat template is checked in a LiteRT-LM
`Conversation` too (`CHECK_MESSAGES`, or its last message alone where the
three do not fit the context): the ids it prefills (its start token,
then its tokenizer's ids of the text its own Jinja renders) must be the ids
of tfformer's chat, and its greedy reply the reference runtime's. LiteRT-LM
renders `bos_token` and `eos_token` as nothing and puts the start token
first, so a template that writes them between turns (Llama 2's `</s><s>`)
cannot be read as the checkpoint's tokenizer reads it: such a bundle is
written without its chat template, and the export says so. The check sets
LiteRT-LM's process-wide log level to ERROR.

Supported: runs trained on bytes (`data.tokenizer=byte`), converted runs
with a byte-level BPE (GPT-2's, Llama 3's, Qwen2's) or a SentencePiece BPE
(Llama 2's, Gemma's), and converted runs of token ids (checkpoints whose
tokenizer tfformer does not reproduce): their bundle's tokenizer
reads and writes ids as text, as `tfformer-predict` does ("1 450 4996").
Runs trained on WordPiece bundle the equivalent Hugging Face tokenizer.json
(`tokenizer_json.wordpiece_tokenizer_json`) and no start token, as runs on
bytes.
"""

import json
import os
import tempfile

from tfformer.errors import InputError
from tfformer.export import quality, runtimes
from tfformer.export.tasks.causal_lm.lora import (
    LORA_FILE,
    NO_LORA_FILE,
    remove_stale_files,
)
from tfformer.export.tasks.causal_lm.run import CONVERTED_KINDS, converted_tokenizer
from tfformer.export.tflite import export_tflite
from tfformer.export.tokenizer_json import (
    BUNDLE_PADDING,
    bpe_tokenizer_json,
    byte_tokenizer_json,
    token_id_tokenizer_json,
    wordpiece_tokenizer_json,
)
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.text import END_ID
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.runs.directory import RunDirectory
from tfformer.runs.files import atomic_copy

BUNDLE = "model.litertlm"
# The runtime check's prompt and length.
CHECK_PROMPT = "ROMEO:"
# The conversation a bundle's chat template is checked on (a user first,
# then turns in turn: all Gemma's template allows).
CHECK_MESSAGES = [
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "How are you?"},
]
CHECK_TOKENS = 8


# Put before a checkpoint's chat template in a bundle: LiteRT-LM's
# Conversation hands the template each message's content as a list of
# parts ([{"type": "text", "text": ...}]), where Hugging Face's templates
# (and tfformer's chat) take a string; this joins the text parts back into
# one, so that the template renders what it renders in tfformer.
STRING_CONTENTS = (
    "{%- set _tfformer = namespace(messages=[]) -%}"
    "{%- for _message in messages -%}"
    "{%- if _message['content'] is string -%}"
    "{%- set _content = _message['content'] -%}"
    "{%- else -%}"
    "{%- set _content = namespace(text='') -%}"
    "{%- for _part in _message['content'] -%}"
    "{%- if _part['type'] == 'text' -%}"
    "{%- set _content.text = _content.text + _part['text'] -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- set _content = _content.text -%}"
    "{%- endif -%}"
    "{%- set _tfformer.messages = _tfformer.messages + "
    "[{'role': _message['role'], 'content': _content}] -%}"
    "{%- endfor -%}"
    "{%- set messages = _tfformer.messages -%}"
)


def llm_metadata(start_id, stop_ids, context):
    """The `LlmMetadata` text proto of a generic model (no start token when
    `start_id` is None; one stop token per id of `stop_ids`)."""
    start = f"start_token {{ token_ids {{ ids: {start_id} }} }}\n"
    return (
        (start if start_id is not None else "")
        + "".join(f"stop_tokens {{ token_ids {{ ids: {i} }} }}\n" for i in stop_ids)
        + f"max_num_tokens: {context}\n"
        "llm_model_type { generic_model {} }\n"
    )


def prefill_lengths(context):
    """The bundle's prefill signatures: 16, 64, 256, ... below the context,
    and the context. LiteRT-LM prefills a prompt with a signature whose
    length fits the cache left after the positions already used; with the
    context's alone, no second turn of a conversation fits."""
    lengths, length = [], 16
    while length < context:
        lengths.append(length)
        length *= 4
    return [*lengths, context]


def require_packages():
    """`litertlm_builder` and `litert_lm`; ValueError naming the extra when
    either is missing."""
    try:
        import litert_lm
        from litert_lm_builder import litertlm_builder as builder
    except ImportError as e:
        raise InputError(
            f"--format litertlm needs litert-lm-builder and litert-lm-api ({e}): "
            'pip install "tfformer[litertlm]"'
        ) from None
    return builder, litert_lm


def build_bundle(tflite_path, tokenizer_path, metadata_path, out_path, template=None):
    """Writes the `.litertlm` file with `litert-lm-builder` (with the Jinja
    chat template in the file `template`, if given); a tokenizer file
    ending in `.model` is a SentencePiece model, any other a Hugging Face
    `tokenizer.json`."""
    builder, _ = require_packages()
    bundle = builder.LitertLmFileBuilder()
    bundle.add_llm_metadata(metadata_path, jinja_prompt_template_path=template)
    bundle.add_tflite_model(tflite_path, builder.TfLiteModelType.PREFILL_DECODE)
    if tokenizer_path.endswith(".model"):
        bundle.add_sentencepiece_tokenizer(tokenizer_path)
    else:
        bundle.add_hf_tokenizer(tokenizer_path)
    with open(out_path, "wb") as f:
        bundle.build(f)


def litert_lm_greedy(bundle_path, prompt, max_tokens, lora=None):
    """The text LiteRT-LM decodes greedily (top-k 1) from `prompt`: no
    prompt template, at most `max_tokens` tokens, up to the stop token;
    with the LoRA file `lora`, if given."""
    _, litert_lm = require_packages()
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    with litert_lm.Engine(bundle_path) as engine:
        session = engine.create_session(
            apply_prompt_template=False,
            sampler_config=litert_lm.SamplerConfig(top_k=1),
            max_output_tokens=max_tokens,
            lora_config=litert_lm.LoraConfig(lora_path=lora) if lora else None,
        )
        try:
            session.run_prefill([prompt])
            return session.run_decode().texts[0]
        finally:
            session.close()


def reference_greedy(
    tflite_path, prompt, max_tokens, tokenizer=None, stop_ids=(), lora=None
):
    """The text `generate.py`'s greedy search decodes from `prompt` (with
    the LoRA file `lora`, if given): at most `max_tokens` tokens, up to
    the end token (or the first of `stop_ids`, when given). The prompt's
    ids are its bytes (as predict reads them), or, for a converted run,
    its `tokenizer`'s (which start with the start token where the
    checkpoint's template puts it)."""
    if tokenizer is None:
        offset = ByteTokenizer.offset
        ids, end = [b + offset for b in prompt.encode("utf-8")], END_ID
    else:
        ids, end = tokenizer.tokenize([prompt])[0].numpy().tolist(), tokenizer.end_id
    tokens = greedy_ids(tflite_path, ids, max_tokens, set(stop_ids) or {end}, lora)
    if isinstance(tokenizer, TokenIdTokenizer):  # " 7 9", as the bundle decodes
        return "".join(f" {t - tokenizer.id_offset}" for t in tokens)
    if tokenizer is not None:
        return decoded(tokenizer, tokens)
    return bytes(t - offset for t in tokens if t >= offset).decode(
        "utf-8", errors="replace"
    )


class WordPieceBundle:
    """A trained WordPiece run's tokenizer for its bundle: `CoreWordPiece`
    (the SavedModel's, which the runtime check's reference reads prompts
    and writes text with) and its Hugging Face `tokenizer.json`, both over
    `FastWordpieceTokenizer`'s probed character classes."""

    def __init__(self, spec):
        from tfformer.export.tasks.text import make_tokenizer, special_ids
        from tfformer.export.wordpiece import probe_character_classes

        self.spec = spec
        self.classes = probe_character_classes()
        self.core = make_tokenizer(spec, self.classes)
        self.end_id = special_ids(spec, "end")[0]
        self.tokenize, self.detokenize = self.core.tokenize, self.core.detokenize

    def tokenizer_json(self):
        from tfformer.runs.files import read_lines

        vocabulary = read_lines(self.spec.path)
        if vocabulary and vocabulary[-1] == "":
            vocabulary.pop()
        return wordpiece_tokenizer_json(
            vocabulary,
            self.core.special_ids,
            self.core.unk_id,
            self.classes,
            lower_case=self.spec.lower_case,
            normalizer=self.spec.options.get("normalizer"),
            strip_accents=self.spec.options.get("strip_accents", False),
        )


def decoded(tokenizer, tokens):
    """A converted run's `tokenizer`'s text of `tokens` ("" for none)."""
    if not tokens:
        return ""
    return tokenizer.detokenize([tokens])[0].numpy().decode("utf-8", "replace")


def greedy_ids(tflite_path, ids, max_tokens, stops, lora=None):
    """`generate.py`'s greedy ids after `ids` (with the LoRA file `lora`):
    at most `max_tokens`, up to the first of `stops` (left out)."""
    from tfformer.export.runtimes.generate import LiteRTGenerator

    generator = LiteRTGenerator(tflite_path, lora=lora)
    tokens, _ = generator.generate(ids, max_tokens, greedy=True)
    return tokens[: next((i for i, t in enumerate(tokens) if t in stops), None)]


def litert_lm_chat(bundle_path, messages, start_id, max_tokens):
    """(the ids a LiteRT-LM `Conversation` prefills for `messages`: the
    start token, when the bundle has one, then its tokenizer's ids of the
    text its own Jinja renders; its greedy reply to the last message, at
    most `max_tokens` tokens)."""
    _, litert_lm = require_packages()
    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    with litert_lm.Engine(bundle_path) as engine:
        conversation = engine.create_conversation(
            messages=messages[:-1],
            sampler_config=litert_lm.SamplerConfig(top_k=1),
            max_output_tokens=max_tokens,
        )
        try:
            text = conversation.render_message_to_string(messages[-1])
            ids = [start_id] * (start_id is not None) + list(engine.tokenize(text))
            reply = conversation.send_message(messages[-1])
        finally:
            conversation.close()
    return ids, "".join(c.text for c in reply.contents)


def check_messages(chat, tokenizer, context):
    """The conversation a chat bundle is checked on: `CHECK_MESSAGES`, or
    its last message alone where the three leave less than `CHECK_TOKENS`
    of the context; None where neither does."""
    for messages in (CHECK_MESSAGES, CHECK_MESSAGES[-1:]):
        if len(chat.prompt_ids(messages, tokenizer)) + CHECK_TOKENS <= context:
            return messages
    return None


def check_chat(bundle_path, tflite_path, chat, tokenizer, start_id, messages):
    """Whether LiteRT-LM's `Conversation` reads `messages` into the ids
    tfformer's chat does (`ChatTemplate.prompt_ids`). ValueError when it
    does but its greedy reply is not the reference runtime's."""
    try:
        got, reply = litert_lm_chat(bundle_path, messages, start_id, CHECK_TOKENS)
    except RuntimeError as e:
        raise InputError(f"LiteRT-LM could not run the chat template: {e}") from None
    ids = chat.prompt_ids(messages, tokenizer)
    if got != ids:
        return False
    tokens = greedy_ids(tflite_path, ids, CHECK_TOKENS, set(chat.stop_ids))
    expected = decoded(tokenizer, tokens)
    if reply != expected:
        raise InputError(
            f"LiteRT-LM replied {reply!r} to {messages}; the reference "
            f"runtime replies {expected!r}. The bundle is not written."
        )
    return True


def check_bundle(
    bundle_path,
    tflite_path,
    prompt=CHECK_PROMPT,
    max_tokens=CHECK_TOKENS,
    tokenizer=None,
    stop_ids=(),
    lora=None,
):
    """Raises ValueError unless LiteRT-LM's greedy text from `prompt` is the
    reference runtime's (`generate.py`) on the bundled model (both with the
    LoRA file `lora`, if given), both stopping at the end token (or the
    first of `stop_ids`); returns that text."""
    try:
        got = litert_lm_greedy(bundle_path, prompt, max_tokens, lora)
    except RuntimeError as e:
        raise InputError(f"LiteRT-LM could not run the bundle: {e}") from None
    expected = reference_greedy(
        tflite_path, prompt, max_tokens, tokenizer, stop_ids, lora
    )
    if got != expected:
        raise InputError(
            f"LiteRT-LM decoded {got!r} from {prompt!r}; the reference runtime "
            f"decodes {expected!r}. The bundle is not written."
        )
    return expected


# The TFLite variants a bundle may hold: full_int8's activations need
# calibration text and integer_only's int8 output is no logits for LiteRT-LM.
BUNDLE_QUANTIZATIONS = ("none", "float16", "int8", "int4")


def write_tokenizer(kind, tokenizer, folder):
    """Writes the bundle's tokenizer of a run's tokenizer of `kind` (None
    for bytes; for WordPiece, the `WordPieceBundle`) into `folder`; returns
    its path."""
    if kind == "sentencepiece":
        path = os.path.join(folder, "tokenizer.model")
        with open(path, "wb") as f:
            f.write(tokenizer.model_proto(BUNDLE_PADDING))
        return path
    if tokenizer is None:
        described = byte_tokenizer_json()
    elif kind == "ids":
        described = token_id_tokenizer_json(tokenizer)
    elif kind == "wordpiece":
        described = tokenizer.tokenizer_json()
    else:
        described = bpe_tokenizer_json(tokenizer)
    path = os.path.join(folder, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(described, f, ensure_ascii=False)
    return path


def copy_quality(tflite_dir, tflite_name, out_dir, bundle_path):
    """The quality gate's figures of the bundled model, recorded under the
    bundle's name in `out_dir/quality.json` (none when it was unmeasured)."""
    figures = quality.recorded(tflite_dir, tflite_name)
    name = os.path.basename(bundle_path)
    if figures is None:
        quality.forget(out_dir, [name])  # an earlier bundle's figures
    else:
        quality.record(out_dir, name, figures)


def bundle_name(quantize):
    """model.litertlm, or model_<quantize>.litertlm for a quantized model."""
    return BUNDLE if quantize == "none" else f"model_{quantize}.litertlm"


def export_litertlm(
    run_dir,
    out_dir,
    *,
    checkpoint="model.keras",
    quantize="none",
    lora="merge",
    progress=print,
    **quality_options,
):
    """Writes `<out_dir>/model.litertlm` (`model_<quantize>.litertlm` for a
    float16, dynamic-range int8 or int4 model) for a causal-LM run; returns
    its path. `lora="file"`: a LoRA run's bundle holds the model it started
    from, and `<out_dir>/lora.tflite` its adapters, which LiteRT-LM loads
    per session (`litert_lm.LoraConfig`). Its runtime check compares
    LiteRT-LM with the reference runtime on the same (quantized) TFLite
    model. `quality_options`: the gate's (`export_tflite`'s `int4_block`,
    `max_quality_loss`, `force`, `quality_data`); its figures go to
    `out_dir/quality.json` under the bundle's name."""
    if quantize not in BUNDLE_QUANTIZATIONS:
        raise InputError(
            f"--format litertlm bundles a float32, float16, int8 (dynamic "
            f"range) or int4 model. Received: --quantize {quantize!r}"
        )
    require_packages()
    run = RunDirectory(run_dir)
    if run.task != "causal_lm":
        raise InputError(
            f"--format litertlm is for causal_lm runs. Received: a {run.task!r} "
            f"run ({run.path})"
        )
    # From the manifest: the model is loaded once, by the TFLite export.
    spec = run.tokenizer("text")
    if spec.kind not in ("byte", "wordpiece", "bpe", "sentencepiece", "ids"):
        raise InputError(
            "--format litertlm supports runs trained on bytes or WordPiece "
            "(data.tokenizer=byte, wordpiece) and converted runs with a byte-level "
            "BPE (GPT-2's, Llama 3's, Qwen2's), a SentencePiece BPE (Llama 2's, "
            "Gemma's) or of token ids. Received: a run with the "
            f"{spec.kind!r} tokenizer"
        )
    # A trained run reads a prompt's own ids (no start token), as predict
    # does.
    tokenizer, start, end, prompts = None, None, END_ID, [CHECK_PROMPT, "The"]
    if spec.kind == "wordpiece":
        tokenizer = WordPieceBundle(spec)
        end = tokenizer.end_id
    if spec.kind in CONVERTED_KINDS:
        tokenizer = converted_tokenizer(spec)
        # (Prompts of token ids hold their own start id.)
        adds_start = getattr(tokenizer, "add_start_token", False)
        start = tokenizer.start_id if adds_start else None
        end = tokenizer.end_id
    if spec.kind == "ids":
        words = tokenizer.vocabulary_size - tokenizer.id_offset
        prompts = [" ".join(str(k % words) for k in ks) for ks in ((5, 9, 13), (17, 3))]
    # A chat model's replies stop at its end-of-turn token too, and a
    # checkpoint that lists several eos ids stops at each.
    chat = run.chat_template()
    stops = run.manifest.ends(end) if chat is None else chat.stop_ids
    progress(f"Converting {run.path} to the bundle's TFLite model...")
    with tempfile.TemporaryDirectory() as staging:
        tflite_dir = os.path.join(staging, "tflite")
        tflite = export_tflite(
            run.path,
            tflite_dir,
            checkpoint=checkpoint,
            quantize=quantize,
            prefill_lengths=prefill_lengths(run.manifest.max_length),
            lora=lora,
            # (The quality gate's figures and warnings are said; the rest
            # is the staging copy's.)
            progress=lambda line: (
                progress(line) if "float32" in line or "warning" in line else None
            ),
            **quality_options,
        )
        tokenizer_path = write_tokenizer(spec.kind, tokenizer, staging)
        metadata = os.path.join(staging, "llm_metadata.textproto")
        with open(metadata, "w", encoding="utf-8") as f:
            f.write(llm_metadata(start, stops, run.manifest.max_length))
        template = None
        if chat is not None:
            template = os.path.join(staging, "chat_template.jinja")
            with open(template, "w", encoding="utf-8") as f:
                f.write(STRING_CONTENTS + chat.template)
        bundle = os.path.join(staging, bundle_name(quantize))
        build_bundle(tflite, tokenizer_path, metadata, bundle, template)
        progress("Checking the bundle in LiteRT-LM...")
        # A prompt whose first greedy token is a stop token checks nothing:
        # then the next prompt is tried too.
        # A LoRA bundle is checked with its adapters and without them (the
        # empty file: zeros in both runtimes).
        lora_files = [None]
        if lora == "file":
            lora_files = [
                os.path.join(tflite_dir, f) for f in (LORA_FILE, NO_LORA_FILE)
            ]
        for adapters in lora_files:
            for prompt in prompts:
                checked = check_bundle(
                    bundle,
                    tflite,
                    prompt,
                    tokenizer=tokenizer,
                    stop_ids=stops,
                    lora=adapters,
                )
                if checked:
                    break
            else:
                progress(
                    "warning: LiteRT-LM and the reference runtime both stopped at "
                    f"once on the check prompts {prompts}: the bundle's text is "
                    "unchecked."
                )
        context = run.manifest.max_length
        messages = None if chat is None else check_messages(chat, tokenizer, context)
        if chat is not None and messages is None:
            progress(
                f"warning: the chat check's one message does not fit the context "
                f"of {context} tokens: the bundle carries no chat template."
            )
            build_bundle(tflite, tokenizer_path, metadata, bundle)
        elif chat is not None and not check_chat(
            bundle, tflite, chat, tokenizer, start, messages
        ):
            # LiteRT-LM renders bos_token and eos_token as "" and puts the
            # start id first: special tokens between turns (Llama 2's
            # "</s><s>") are lost, and a SentencePiece tokenizer reads no
            # special token out of text.
            progress(
                "warning: LiteRT-LM reads the chat template's conversations into "
                "other ids than tfformer's chat (it renders bos_token and "
                "eos_token as nothing): the bundle carries no chat template."
            )
            build_bundle(tflite, tokenizer_path, metadata, bundle)
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, bundle_name(quantize))
        atomic_copy(bundle, path)
        if lora == "merge":
            remove_stale_files(out_dir)
        else:
            copies = [os.path.join(out_dir, f) for f in (LORA_FILE, NO_LORA_FILE)]
            for source, copy in zip(lora_files, copies, strict=True):
                atomic_copy(source, copy)
            runtimes.record_digests(out_dir, copies)
        if quantize != "none":
            copy_quality(tflite_dir, os.path.basename(tflite), out_dir, path)
    progress(f"Wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB).")
    return path
