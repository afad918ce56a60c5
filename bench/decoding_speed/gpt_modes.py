"""GPT greedy generation, tfformer against keras-hub in each compile mode:
graph against graph, XLA against XLA, and each library's best.

The model is the 60-minute tinyshakespeare GPT's size (6 layers, d 192, 6
heads, FFN 768, 260 byte tokens, context 128) with random weights: speed
only, so no trained run is needed. Both libraries decode greedily with a KV
cache, float32, `--prompt-length` prompt tokens then `--new-tokens` new ones,
no stop token (every contender makes every token):
- `tfformer_graph` / `tfformer_xla`: `tfformer.decoding.Generator`, the
  whole search as one `tf.function` (`Generator.compiled(jit_compile=...)`).
- `keras_hub_graph` / `keras_hub_xla`: keras-hub's `GPT2CausalLM` of the
  same sizes, `compile(sampler="greedy", jit_compile=...)`, its own
  `make_generate_function()` (what `generate` runs).
Rounds alternate the contenders, reversed every other round; figures are
medians with min and max. `--precision bfloat16` builds both libraries'
models under Keras's bfloat16 policy (weights and compute in bfloat16:
half the bytes a step streams) for the same comparison.

Usage:
  python -m bench.decoding_speed.gpt_modes [--repeats 5] [--precision bfloat16]
      [--output bench/results/gpt_modes.json]
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from bench import common
from bench.peers import gpt2_greedy_generate
from tfformer.decoding import Generator
from tfformer.models import gpt_decoder
from tfformer.training.trainer import dtype_policy

SIZES = dict(num_layers=6, hidden_dim=192, num_heads=6, intermediate_dim=768)
VOCABULARY, CONTEXT = 260, 128


def tfformer_generate(model, length, jit_compile):
    generator = Generator(model, max_length=length, search="greedy")
    compiled = generator.compiled(jit_compile=jit_compile)
    return lambda prompts: compiled(prompts)["token_ids"].numpy()


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--prompt-length", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--precision", choices=("float32", "bfloat16"), default="float32")
    p.add_argument(
        "--output", default=os.path.join("bench", "results", "gpt_modes.json")
    )
    args = p.parse_args()
    length = args.prompt_length + args.new_tokens
    if length > CONTEXT:
        p.error(
            f"--prompt-length + --new-tokens must be at most {CONTEXT}. "
            f"Received: {length}"
        )
    batches = [int(b) for b in args.batches.split(",")]
    with dtype_policy(args.precision):
        model = gpt_decoder(
            VOCABULARY, max_sequence_length=CONTEXT, dropout=0.0, **SIZES
        )
    rng = np.random.default_rng(0)
    rows, hub_parameters = [], None
    for batch in batches:
        prompts = rng.integers(4, VOCABULARY, (batch, args.prompt_length), np.int32)
        with dtype_policy(args.precision):
            hub_graph, hub_parameters = gpt2_greedy_generate(
                SIZES, VOCABULARY, length, False, max_sequence_length=CONTEXT
            )
            hub_xla, _ = gpt2_greedy_generate(
                SIZES, VOCABULARY, length, True, max_sequence_length=CONTEXT
            )
        contenders = {
            "tfformer_graph": tfformer_generate(model, length, False),
            "tfformer_xla": tfformer_generate(model, length, True),
            "keras_hub_graph": hub_graph,
            "keras_hub_xla": hub_xla,
        }
        for name, generate in contenders.items():
            print(f"batch {batch}: warming up {name}", flush=True)
            generate(tf.constant(prompts))
        times = common.alternating_seconds(
            {
                n: lambda g=g, p=prompts: g(tf.constant(p))
                for n, g in contenders.items()
            },
            args.repeats,
            f"batch {batch}: ",
        )
        for name, seconds in times.items():
            median, fastest, slowest = common.median_min_max(seconds)
            rows.append(
                dict(
                    contender=name,
                    batch=batch,
                    median_seconds=round(median, 4),
                    min_seconds=round(fastest, 4),
                    max_seconds=round(slowest, 4),
                    tokens_per_second=round(batch * args.new_tokens / median, 1),
                    tokens_per_second_min=round(batch * args.new_tokens / slowest, 1),
                    tokens_per_second_max=round(batch * args.new_tokens / fastest, 1),
                )
            )
    ratios = {}
    for batch in batches:
        by = {
            r["contender"]: r["tokens_per_second"] for r in rows if r["batch"] == batch
        }
        ours = max(by["tfformer_graph"], by["tfformer_xla"])
        theirs = max(by["keras_hub_graph"], by["keras_hub_xla"])
        ratios[f"batch_{batch}"] = {
            "graph_vs_graph": round(by["tfformer_graph"] / by["keras_hub_graph"], 2),
            "xla_vs_xla": round(by["tfformer_xla"] / by["keras_hub_xla"], 2),
            "best_vs_best": round(ours / theirs, 2),
        }
    for r in rows:
        print(
            f"{r['contender']:<18}{r['batch']:>4}{r['tokens_per_second']:>10.1f}"
            f"  ({r['tokens_per_second_min']:.1f}-{r['tokens_per_second_max']:.1f})"
        )
    print(ratios)
    common.write_result(
        args.output,
        dict(
            model=dict(
                SIZES,
                vocabulary=VOCABULARY,
                context=CONTEXT,
                parameters=model.count_params(),
                keras_hub_parameters=hub_parameters,
            ),
            weights="random (speed only)",
            precision=args.precision,
            search="greedy, KV cache, no stop token",
            prompt_length=args.prompt_length,
            new_tokens=args.new_tokens,
            repeats=args.repeats,
            rows=rows,
            ratios=ratios,
        ),
    )


if __name__ == "__main__":
    main()
