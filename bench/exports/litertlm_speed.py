"""Prefill and decode speed of a decoder in Google's LiteRT-LM runtime
against tfformer's Python reference runtime on the same `.tflite`, and
against the same Keras model's prefill and decode steps under XLA.

The model, by default: a Llama-style decoder of SmolLM-135M's shape (30 layers, width
576, 9 heads with 3 key/value heads, feed-forward 1,536, 49,152 tokens, tied
embeddings), written as a Hugging Face checkpoint with **random weights**
(speed only), converted with `tfformer-convert` (a run of token ids) and
exported once to a float32 prefill/decode `.tflite` with the bundle's
prefill lengths; the `.litertlm` bundle is built from that file with the
functions `tfformer-export --format litertlm` uses, so both runtimes run
the same model. The context is `--context` tokens (SmolLM's is 2,048).
With `--run RUN`, the model is that causal-LM run instead (a trained
tinyshakespeare GPT: bytes, its own context), and the prompt is the
start token and the first bytes of its validation text.

Contenders, alternating in each round (`--repeats` rounds), 2 threads each:
- `litert_lm`: `litert_lm.Benchmark` (its C++ engine, CPU backend): a
  prompt of `--prefill` tokens, then `--decode` tokens; prefill and decode
  tokens/s as the engine reports them.
- `reference_runtime`: `export/runtimes/generate.py`'s `LiteRTGenerator`
  (ai-edge-litert's interpreter, NumPy sampling in Python): the same
  prompt length through `prefill`, then `--decode` greedy `decode` steps,
  each timed.
- `keras_xla`: the run's Keras model through the functions the `.tflite`
  is converted from (`CachedDecoder.step` over a cache of the context's
  length: the prompt in one call, then one call per token, greedy argmax
  in the graph), each an XLA-compiled `tf.function`, timed as the
  reference runtime is.
- `keras_generate_xla` (timed after the others, not alternated): the
  product's whole search, `Generator(...).generate` compiled with XLA over
  a cache of the context's length, as `tfformer-predict` sizes it (the
  prompt in one step, then a step per token): prefill tokens/s from calls
  that make one token, decode tokens/s from the difference to calls that
  make `--decode`.
Each runtime cuts the prompt into its prefill signatures its own way. The
reference runtime runs once untimed first (its delegates' first calls);
LiteRT-LM's engine start is outside its tokens/s. Figures are medians with
min and max over the rounds.

`--quantize float16` or `int8` (dynamic range) exports and bundles that
variant instead (`tfformer-export --format litertlm --quantize ...`); each
precision is its own run of the script, written to
bench/results/litertlm_speed.json (float32) or litertlm_speed_<quantize>.json.

Usage:
  python -m bench.exports.litertlm_speed [--quantize float16|int8]
  python -m bench.exports.litertlm_speed --run ~/.cache/tfformer/gpt_10min_run \
      --output bench/results/litertlm_speed_gpt.json
"""

import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from bench import common

SMOLLM_135M = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
}


def write_checkpoint(path, shape, context):
    """A LlamaForCausalLM checkpoint of `shape`, random weights."""
    import json

    from safetensors.numpy import save_file

    os.makedirs(path)
    rng = np.random.default_rng(0)
    d, inner = shape["hidden_size"], shape["intermediate_size"]
    head = d // shape["num_attention_heads"]
    kv = shape["num_key_value_heads"] * head

    def normal(*size):
        return (0.02 * rng.standard_normal(size, dtype="float32")).astype("float32")

    tensors = {
        "model.embed_tokens.weight": normal(shape["vocab_size"], d),
        "model.norm.weight": np.ones(d, "float32"),
    }
    for i in range(shape["num_hidden_layers"]):
        layer = f"model.layers.{i}"
        for name, size in {
            "self_attn.q_proj": (d, d),
            "self_attn.k_proj": (kv, d),
            "self_attn.v_proj": (kv, d),
            "self_attn.o_proj": (d, d),
            "mlp.gate_proj": (inner, d),
            "mlp.up_proj": (inner, d),
            "mlp.down_proj": (d, inner),
        }.items():
            tensors[f"{layer}.{name}.weight"] = normal(*size)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"{layer}.{norm}.weight"] = np.ones(d, "float32")
    save_file(tensors, os.path.join(path, "model.safetensors"), {"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **shape,
        "hidden_act": "silu",
        "max_position_embeddings": context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return sum(t.size for t in tensors.values())


def build(root, shape, context, quantize="none"):
    """(the run, the `.tflite` path, the `.litertlm` path, parameters,
    export seconds)."""
    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
    from tfformer.runs.directory import RunDirectory
    from tfformer.training.convert import convert

    parameters = write_checkpoint(os.path.join(root, "hf"), shape, context)
    run = convert(os.path.join(root, "hf"), os.path.join(root, "run"), progress=print)
    tokenizer = TokenIdTokenizer.load(RunDirectory(run).tokenizer("text").path)
    tflite, bundle, seconds = export_and_bundle(
        run, root, quantize, context, ("ids", tokenizer), None, [tokenizer.end_id]
    )
    return run, tflite, bundle, parameters, seconds


def export_and_bundle(run, root, quantize, context, tokenizer, start, stops, **gate):
    """(the run's `.tflite` with the bundle's prefill lengths, the bundle
    around it, export seconds), written into `root` with the functions
    `tfformer-export --format litertlm` uses; `tokenizer` is a (kind,
    tokenizer) pair for `litertlm.write_tokenizer`; `gate`: the quality
    gate's options of `export_tflite`."""
    from tfformer.export import litertlm
    from tfformer.export.tflite import export_tflite

    began = time.perf_counter()
    tflite = export_tflite(
        run,
        os.path.join(root, "tflite"),
        quantize=quantize,
        prefill_lengths=litertlm.prefill_lengths(context),
        progress=print,
        **gate,
    )
    seconds = time.perf_counter() - began
    described = litertlm.write_tokenizer(*tokenizer, root)
    metadata = os.path.join(root, "metadata.textproto")
    with open(metadata, "w") as f:
        f.write(litertlm.llm_metadata(start, stops, context))
    bundle = os.path.join(root, "model.litertlm")
    litertlm.build_bundle(tflite, described, metadata, bundle)
    return tflite, bundle, seconds


def build_trained(run_dir, root, quantize="none"):
    """What `build` returns, for a byte-level causal-LM run: the `.tflite`
    with the bundle's prefill lengths and the bundle `tfformer-export
    --format litertlm` writes around it (no start token, the end token,
    bytes)."""
    from tfformer.preprocessing.text import END_ID
    from tfformer.runs.directory import RunDirectory

    run = RunDirectory(run_dir)
    if run.task != "causal_lm" or run.tokenizer("text").kind != "byte":
        raise SystemExit(f"--run must be a causal_lm run on bytes: {run_dir}")
    context = run.manifest.max_length
    tflite, bundle, seconds = export_and_bundle(
        run.path, root, quantize, context, ("byte", None), None, [END_ID]
    )
    parameters = run.load_model().count_params()
    return run.path, tflite, bundle, parameters, seconds


def validation_prompt(run_dir, length):
    """The first `length` bytes (as ids) of the run's validation split, and
    those bytes as text (a prompt as predict and the bundle read it)."""
    from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
    from tfformer.training.config import load_config
    from tfformer.training.tasks import get_task

    config = load_config(os.path.join(run_dir, "config.json"))
    validation = get_task("causal_lm").raw_splits(config.data)["validation"]
    text = validation.encode("utf-8")[:length].decode("utf-8", "ignore")
    ids = [b + ByteTokenizer.offset for b in text.encode("utf-8")]
    return ids, text


def litert_lm_round(bundle, prompt, decode, threads, text=None):
    """`prompt` ids reach LiteRT-LM as `text`, or, for a bundle of token
    ids, as the ids written out."""
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    info = litert_lm.Benchmark(
        model_path=bundle,
        backend=litert_lm.Backend.CPU(thread_count=threads),
        prefill_tokens=len(prompt),
        decode_tokens=decode,
        # A bundle of ids reads them as text: the checkpoint's ids, one lower.
        prompt=text if text is not None else " ".join(str(i - 1) for i in prompt),
    ).run()
    return {
        "prefill_tokens_per_second": info.last_prefill_tokens_per_second,
        "decode_tokens_per_second": info.last_decode_tokens_per_second,
        "prefill_tokens": info.last_prefill_token_count,
        "decode_tokens": info.last_decode_token_count,
        "init_seconds": info.init_time_in_second,
    }


def reference_round(generator, prompt, decode):
    cache = generator.new_cache()
    began = time.perf_counter()
    cache = generator.prefill(prompt, cache)
    prefill_seconds = time.perf_counter() - began
    token, position, steps = int(prompt[-1]), len(prompt), []
    for _ in range(decode):
        began = time.perf_counter()
        logits, cache = generator.decode(token, position, cache)
        token = int(np.argmax(np.asarray(logits).reshape(-1)[1:])) + 1
        steps.append(time.perf_counter() - began)
        position += 1
    return {
        "prefill_tokens_per_second": len(prompt) / prefill_seconds,
        "decode_tokens_per_second": len(steps) / sum(steps),
    }


def keras_steps(run_dir):
    """(the decoder, its XLA-compiled step): the Keras model's prefill and
    decode as `CachedDecoder.step`, the next token chosen in the graph."""
    import tensorflow as tf

    from tfformer.models.cached_decoder import CachedDecoder
    from tfformer.runs.directory import RunDirectory

    decoder = CachedDecoder(RunDirectory(run_dir).load_model())

    def step(tokens, cache, index):
        logits, cache, _ = decoder.step(tokens, cache, index)
        # Never padding (id 0), as the reference runtime chooses.
        best = tf.argmax(logits[:, -1, 1:], axis=-1, output_type=tf.int32) + 1
        return best, cache

    return decoder, tf.function(step, jit_compile=True, autograph=False)


def keras_round(keras, prompt, decode, context):
    """As `reference_round`, through the Keras model's compiled steps."""
    import tensorflow as tf

    decoder, step = keras
    cache = decoder.init_cache(1, context)
    began = time.perf_counter()
    _, cache = step(tf.constant([prompt], tf.int32), cache, tf.constant(0))
    tf.nest.map_structure(lambda c: c.numpy(), cache[-1])  # wait for it
    prefill_seconds = time.perf_counter() - began
    token, position, steps = tf.constant([prompt[-1]], tf.int32), len(prompt), []
    for _ in range(decode):
        began = time.perf_counter()
        token, cache = step(token[:, None], cache, tf.constant(position))
        int(token[0])
        steps.append(time.perf_counter() - began)
        position += 1
    return {
        "prefill_tokens_per_second": len(prompt) / prefill_seconds,
        "decode_tokens_per_second": len(steps) / sum(steps),
    }


def generate_rates(run_dir, prompt, decode, repeats, context):
    """The whole-search rates (see the module doc): medians with min and
    max over `repeats` timed calls of each length."""
    import tensorflow as tf

    from tfformer.decoding import Generator
    from tfformer.runs.directory import RunDirectory

    model = RunDirectory(run_dir).load_model()
    # An end id past the vocabulary: no row stops before its max_new_tokens.
    generator = Generator(model, max_length=context, search="greedy", end_id=10**6)
    search = tf.function(generator.generate, jit_compile=True, autograph=False)
    inputs = tf.constant([prompt], tf.int32)
    seconds = {}
    for new in (1, decode):
        new_tokens = tf.constant([new], tf.int32)
        search(inputs, max_new_tokens=new_tokens)["token_ids"].numpy()  # compiles
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            search(inputs, max_new_tokens=new_tokens)["token_ids"].numpy()
            times.append(time.perf_counter() - began)
        seconds[new] = times
    prefill = [len(prompt) / t for t in seconds[1]]
    decode_rates = [
        (decode - 1) / (t - statistics.median(seconds[1])) for t in seconds[decode]
    ]
    return {
        "prefill_tokens_per_second": common.median_min_max(prefill),
        "decode_tokens_per_second": common.median_min_max(decode_rates),
        "seconds": {str(k): v for k, v in seconds.items()},
    }


def main():
    parser = common.argument_parser(__doc__)
    parser.add_argument("--run", help="a trained causal-LM run on bytes")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument(
        "--prefill", type=int, help="default: 128, or half a run's context"
    )
    parser.add_argument(
        "--decode", type=int, help="default: 64, or what a run's context leaves"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--layers", type=int, default=30, help="fewer for a quick check of the script"
    )
    parser.add_argument(
        "--quantize", choices=["none", "float16", "int8"], default="none"
    )
    parser.add_argument("--output", help="default: bench/results/litertlm_speed*.json")
    args = parser.parse_args()
    if args.output is None:
        suffix = "" if args.quantize == "none" else f"_{args.quantize}"
        args.output = f"bench/results/litertlm_speed{suffix}.json"

    from tfformer.export.runtimes.generate import LiteRTGenerator

    with tempfile.TemporaryDirectory() as root:
        text = None
        if args.run:
            run, tflite, bundle, parameters, export_seconds = build_trained(
                args.run, root, args.quantize
            )
            from tfformer.runs.directory import RunDirectory

            context = RunDirectory(run).manifest.max_length
            args.prefill = args.prefill or context // 2
            args.decode = args.decode or context - args.prefill - 1
            prompt, text = validation_prompt(run, args.prefill)
            model = {"run": os.path.abspath(args.run), "weights": "trained"}
        else:
            context = args.context
            args.prefill, args.decode = args.prefill or 128, args.decode or 64
            shape = {**SMOLLM_135M, "num_hidden_layers": args.layers}
            run, tflite, bundle, parameters, export_seconds = build(
                root, shape, context, args.quantize
            )
            rng = np.random.default_rng(1)
            prompt = [int(i) for i in rng.integers(3, 49152, size=args.prefill)]
            model = {"shape": shape, "weights": "random (speed only)"}
        if args.prefill + args.decode > context:
            raise SystemExit(
                f"--prefill {args.prefill} + --decode {args.decode} exceed the "
                f"context ({context})"
            )
        generator = LiteRTGenerator(tflite, num_threads=args.threads)
        keras = keras_steps(run)
        reference_round(generator, prompt, 2)  # its delegates' first calls
        keras_round(keras, prompt, 2, context)  # compiles both step shapes
        runs = {"litert_lm": [], "reference_runtime": [], "keras_xla": []}
        for r in range(args.repeats):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                if name == "litert_lm":
                    result = litert_lm_round(
                        bundle, prompt, args.decode, args.threads, text
                    )
                elif name == "keras_xla":
                    result = keras_round(keras, prompt, args.decode, context)
                else:
                    result = reference_round(generator, prompt, args.decode)
                print(name, r, result, flush=True)
                runs[name].append(result)
        generate = generate_rates(run, prompt, args.decode, args.repeats, context)
        print("keras_generate_xla", generate, flush=True)
        sizes = {
            "tflite_bytes": os.path.getsize(tflite),
            "litertlm_bytes": os.path.getsize(bundle),
        }
    summary = {}
    for name, results in runs.items():
        summary[name] = {
            key: common.median_min_max([r[key] for r in results])
            for key in ("prefill_tokens_per_second", "decode_tokens_per_second")
        }
    summary["keras_generate_xla"] = {
        key: generate[key]
        for key in ("prefill_tokens_per_second", "decode_tokens_per_second")
    }
    common.write_result(
        args.output,
        {
            "model": {
                **model,
                "parameters": parameters,
                "context": context,
                "precision": {"none": "float32"}.get(args.quantize, args.quantize),
                **sizes,
            },
            "export_seconds": export_seconds,
            "prefill_tokens": args.prefill,
            "decode_tokens": args.decode,
            "threads": args.threads,
            "repeats": args.repeats,
            "summary": summary,
            "rounds": {**runs, "keras_generate_xla_seconds": generate["seconds"]},
        },
    )


if __name__ == "__main__":
    main()
