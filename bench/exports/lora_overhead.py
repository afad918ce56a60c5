"""What keeping a LoRA run's adapters apart costs on device: the run's
bundle with the adapters merged (`--lora merge`) against the bundle with
LoRA inputs (`--lora file`), in LiteRT-LM (`litert_lm.Benchmark`, CPU;
the benchmark passes no LoRA file, which changes the tokens, not the work)
and in the reference runtime (`generate.py`, with `lora.tflite`), in
alternating rounds: prefill and decode tokens/s, medians with their
spread, and the files' sizes.

Usage:
  python -m bench.exports.lora_overhead --run RUNS/lora_gpt/lora_r8_seed0 \\
      --output bench/results/lora_overhead.json
"""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--run", required=True, help="a causal_lm run trained with LoRA")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output", required=True)
    args = p.parse_args()

    from bench.exports import litertlm_speed
    from tfformer.export import litertlm
    from tfformer.export.runtimes.generate import LiteRTGenerator
    from tfformer.export.tflite import export_tflite
    from tfformer.runs.directory import RunDirectory

    run = RunDirectory(args.run)
    context = run.manifest.max_length
    prefill = context // 2
    decode = context - prefill - 1
    prompt, text = litertlm_speed.validation_prompt(run.path, prefill)
    forms = {}
    with tempfile.TemporaryDirectory() as root:
        for lora in ("merge", "file"):
            out = os.path.join(root, lora)
            bundle = litertlm.export_litertlm(run.path, out, lora=lora)
            tflite = export_tflite(
                run.path,
                os.path.join(out, "tflite"),
                prefill_lengths=litertlm.prefill_lengths(context),
                lora=lora,
            )
            adapters = os.path.join(out, "tflite", "lora.tflite")
            forms[lora] = {
                "bundle": bundle,
                "tflite": tflite,
                "lora": adapters if lora == "file" else None,
                "litertlm_bytes": os.path.getsize(bundle),
                "lora_file_bytes": (
                    os.path.getsize(adapters) if lora == "file" else None
                ),
            }
        rounds = {name: [] for name in forms}
        for r, order in common.rounds(forms, args.repeats):
            for name in order:
                form = forms[name]
                lm = litertlm_speed.litert_lm_round(
                    form["bundle"], prompt, decode, args.threads, text
                )
                generator = LiteRTGenerator(
                    form["tflite"], num_threads=args.threads, lora=form["lora"]
                )
                reference = litertlm_speed.reference_round(generator, prompt, decode)
                result = {
                    "litert_lm_prefill_tokens_per_second": lm[
                        "prefill_tokens_per_second"
                    ],
                    "litert_lm_decode_tokens_per_second": lm[
                        "decode_tokens_per_second"
                    ],
                    "reference_prefill_tokens_per_second": reference[
                        "prefill_tokens_per_second"
                    ],
                    "reference_decode_tokens_per_second": reference[
                        "decode_tokens_per_second"
                    ],
                }
                print(name, r, result, flush=True)
                rounds[name].append(result)
    summary = {}
    for name, results in rounds.items():
        summary[name] = {
            "litertlm_bytes": forms[name]["litertlm_bytes"],
            "lora_file_bytes": forms[name]["lora_file_bytes"],
            **{k: common.median_min_max([x[k] for x in results]) for k in results[0]},
        }
    common.write_result(
        args.output,
        {
            "run": run.path,
            "prefill_tokens": len(prompt),
            "decode_tokens": decode,
            "threads": args.threads,
            "repeats": args.repeats,
            "forms": summary,
            "rounds": rounds,
        },
    )


if __name__ == "__main__":
    main()
