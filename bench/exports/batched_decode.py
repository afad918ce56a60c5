"""Several conversations per model: tokens per second of B sequences decoded
together by `generate.py`'s `BatchedGenerator` (one `decode_batch` call
per step, `tfformer-export --decode-batch B`) against the same B sequences
served one after another by `LiteRTGenerator.generate` (one `decode` call
per token), for B = 1, 2, 4, 8, on the same `.tflite` file per B (its
prefill signature of the prompt's length; each way prefills each prompt
alone).

The model, by default: a Llama-style decoder of SmolLM-135M's shape (30
layers, width 576, 9 heads with 3 key/value heads, 49,152 tokens) with
random weights (speed only), converted with `tfformer-convert`, context
`--context`; with `--run RUN`, a trained causal-LM run instead. Each
sequence: a prompt of `--prompt` tokens, then up to `--new` greedy tokens
(a sequence that chooses an end id stops there, in both ways alike; the
rates count the tokens generated). Rounds alternate the two ways
(`--repeats`); medians with min and max. 2 interpreter threads
(`--threads`).

Usage:
  python -m bench.exports.batched_decode [--layers 30] \\
      [--output bench/results/batched_decode.json]
  python -m bench.exports.batched_decode --run ~/.cache/tfformer/gpt_10min_run \\
      --output bench/results/batched_decode_gpt.json
"""

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from bench import common

BATCHES = (1, 2, 4, 8)


def served(path, prompts, new, threads, batched):
    """(tokens generated, seconds) of every prompt: together or in turn."""
    from tfformer.export.runtimes.generate import BatchedGenerator, LiteRTGenerator

    if not batched:
        generator = LiteRTGenerator(path, num_threads=threads)
        began, count = time.perf_counter(), 0
        for prompt in prompts:
            count += len(generator.generate(prompt, new, greedy=True)[0])
        return count, time.perf_counter() - began
    batch = BatchedGenerator(path, num_threads=threads)
    began = time.perf_counter()
    joined = [batch.join(prompt, new, greedy=True) for prompt in prompts]
    while batch.live:
        batch.step()
    seconds = time.perf_counter() - began
    return sum(len(batch.tokens(s)[0]) for s in joined), seconds


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--run", help="a trained causal-LM run (default: SmolLM shape)")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default="bench/results/batched_decode.json")
    args = parser.parse_args()

    from bench.exports.litertlm_speed import SMOLLM_135M, write_checkpoint
    from tfformer.export.tflite import export_tflite
    from tfformer.runs.directory import RunDirectory

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as root:
        if args.run:
            run = RunDirectory(args.run)
            model = {"run": os.path.abspath(args.run), "weights": "trained"}
            from bench.exports.litertlm_speed import validation_prompt

            ids, _ = validation_prompt(run.path, args.prompt * max(args.batches))
            prompts = [
                ids[k * args.prompt : (k + 1) * args.prompt]
                for k in range(max(args.batches))
            ]
        else:
            from tfformer.training.convert import convert

            shape = {**SMOLLM_135M, "num_hidden_layers": args.layers}
            write_checkpoint(os.path.join(root, "hf"), shape, args.context)
            path = convert(
                os.path.join(root, "hf"), os.path.join(root, "run"), progress=print
            )
            run = RunDirectory(path)
            model = {"shape": shape, "weights": "random (speed only)"}
            prompts = [
                [int(i) for i in rng.integers(3, shape["vocab_size"], args.prompt)]
                for _ in range(max(args.batches))
            ]
        context = run.manifest.max_length
        if args.prompt + args.new > context:
            raise SystemExit(f"--prompt + --new exceed the context ({context})")
        results = {}
        for b in args.batches:
            began = time.perf_counter()
            path = export_tflite(
                run.path,
                os.path.join(root, f"b{b}"),
                # One prefill of the prompt's length (the default, the
                # context, would compute a whole context per prompt).
                prefill_lengths=[args.prompt],
                decode_batch=b if b > 1 else None,
                progress=print,
            )
            exported = time.perf_counter() - began
            rates = {"batched": [], "one_after_another": []}
            for r, order in common.rounds(rates, args.repeats):
                for name in order:
                    if name == "batched" and b == 1:
                        continue  # B = 1 is the plain decode
                    count, seconds = served(
                        path, prompts[:b], args.new, args.threads, name == "batched"
                    )
                    rates[name].append(count / seconds)
                    print(b, name, r, count, round(seconds, 2), flush=True)
            if b == 1:
                rates["batched"] = rates["one_after_another"]
            results[str(b)] = {
                "export_seconds": exported,
                "tflite_bytes": os.path.getsize(path),
                **{
                    f"{name}_tokens_per_second": common.median_min_max(values)
                    for name, values in rates.items()
                },
                "speedup": common.median_min_max(
                    a / s
                    for a, s in zip(
                        rates["batched"], rates["one_after_another"], strict=True
                    )
                ),
                "rounds": rates,
            }
            print(b, {k: v for k, v in results[str(b)].items() if k != "rounds"})
    common.write_result(
        args.output,
        {
            "model": {**model, "context": context},
            "prompt_tokens": args.prompt,
            "new_tokens": args.new,
            "threads": args.threads,
            "repeats": args.repeats,
            "batches": results,
        },
    )


if __name__ == "__main__":
    main()
