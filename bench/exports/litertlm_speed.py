"""Prefill and decode speed of a converted decoder in Google's LiteRT-LM
runtime against tfformer's Python reference runtime on the same `.tflite`.

The model: a Llama-style decoder of SmolLM-135M's shape (30 layers, width
576, 9 heads with 3 key/value heads, feed-forward 1,536, 49,152 tokens, tied
embeddings), written as a Hugging Face checkpoint with **random weights**
(speed only), converted with `tfformer-convert` (a run of token ids) and
exported once to a float32 prefill/decode `.tflite` with the bundle's
prefill lengths; the `.litertlm` bundle is built from that file with the
functions `tfformer-export --format litertlm` uses, so both runtimes run
the same model. The context is `--context` tokens (SmolLM's is 2,048).

Contenders, alternating in each round (`--repeats` rounds), 2 threads each:
- `litert_lm`: `litert_lm.Benchmark` (its C++ engine, CPU backend): a
  prompt of `--prefill` tokens, then `--decode` tokens; prefill and decode
  tokens/s as the engine reports them.
- `reference_runtime`: `export/runtimes/generate.py`'s `LiteRTGenerator`
  (ai-edge-litert's interpreter, NumPy sampling in Python): the same
  prompt length through `prefill`, then `--decode` greedy `decode` steps,
  each timed.
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
"""

import os
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
    """(the `.tflite` path, the `.litertlm` path, parameters, export seconds)."""
    import json

    from tfformer.export import litertlm
    from tfformer.export.tflite import export_tflite
    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
    from tfformer.runs.directory import RunDirectory
    from tfformer.training.convert import convert

    parameters = write_checkpoint(os.path.join(root, "hf"), shape, context)
    run = convert(os.path.join(root, "hf"), os.path.join(root, "run"), progress=print)
    began = time.perf_counter()
    tflite = export_tflite(
        run,
        os.path.join(root, "tflite"),
        quantize=quantize,
        prefill_lengths=litertlm.prefill_lengths(context),
        progress=print,
    )
    seconds = time.perf_counter() - began
    tokenizer = TokenIdTokenizer.load(RunDirectory(run).tokenizer("text").path)
    described = os.path.join(root, "tokenizer.json")
    with open(described, "w") as f:
        json.dump(litertlm.token_id_tokenizer_json(tokenizer), f)
    metadata = os.path.join(root, "metadata.textproto")
    with open(metadata, "w") as f:
        f.write(litertlm.llm_metadata(None, [tokenizer.end_id], context))
    bundle = os.path.join(root, "model.litertlm")
    litertlm.build_bundle(tflite, described, metadata, bundle)
    return tflite, bundle, parameters, seconds


def litert_lm_round(bundle, prompt, decode, threads):
    import litert_lm

    litert_lm.set_min_log_severity(litert_lm.LogSeverity.ERROR)
    info = litert_lm.Benchmark(
        model_path=bundle,
        backend=litert_lm.Backend.CPU(thread_count=threads),
        prefill_tokens=len(prompt),
        decode_tokens=decode,
        # The bundle reads ids as text: the checkpoint's ids, one lower.
        prompt=" ".join(str(i - 1) for i in prompt),
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


def main():
    parser = common.argument_parser(__doc__)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--decode", type=int, default=64)
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

    shape = {**SMOLLM_135M, "num_hidden_layers": args.layers}
    with tempfile.TemporaryDirectory() as root:
        tflite, bundle, parameters, export_seconds = build(
            root, shape, args.context, args.quantize
        )
        generator = LiteRTGenerator(tflite, num_threads=args.threads)
        rng = np.random.default_rng(1)
        prompt = [int(i) for i in rng.integers(3, 49152, size=args.prefill)]
        reference_round(generator, prompt, 2)  # its delegates' first calls
        runs = {"litert_lm": [], "reference_runtime": []}
        for r in range(args.repeats):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                if name == "litert_lm":
                    result = litert_lm_round(bundle, prompt, args.decode, args.threads)
                else:
                    result = reference_round(generator, prompt, args.decode)
                print(name, r, result, flush=True)
                runs[name].append(result)
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
    common.write_result(
        args.output,
        {
            "model": {
                "shape": shape,
                "parameters": parameters,
                "weights": "random (speed only)",
                "context": args.context,
                "precision": {"none": "float32"}.get(args.quantize, args.quantize),
                **sizes,
            },
            "export_seconds": export_seconds,
            "prefill_tokens": args.prefill,
            "decode_tokens": args.decode,
            "threads": args.threads,
            "repeats": args.repeats,
            "summary": summary,
            "rounds": runs,
        },
    )


if __name__ == "__main__":
    main()
