"""Every quantized variant of one run side by side: file size, load time,
speed and the quality gate's figures, for float32, float16, dynamic int8
and int4 in blocks of 32, 64 and 128.

Each variant is exported as `tfformer-export` writes it (the gate measures
it against float32 on the run's held-out data or `--quality-data`; here
with `--force` and no threshold, so every variant is kept, and the JSON
says whether the default threshold would have passed it).

- A text generator (`causal_lm` run on bytes): each variant's `.tflite`
  (with the bundle's prefill lengths) and the `.litertlm` bundle around it.
  Timed in `--repeats` rounds, variants alternating: the reference runtime
  (`LiteRTGenerator`: load seconds, prefill of the first `--prefill`
  validation bytes (default: half the context), `--decode` greedy steps
  (default: the rest of the context)) and LiteRT-LM
  (`litert_lm.Benchmark`, CPU: engine init seconds, prefill and decode
  tokens/s), 2 threads each (`bench.exports.litertlm_speed`'s rounds).
- A translator: load seconds and per-sentence latency of `translate.py`'s
  `Translator` (greedy, one thread) over the first `--texts` held-out
  source sentences, in the same alternating rounds.
- A sentence embedder: load seconds and per-sentence latency of `embed.py`'s
  `LiteRTEmbedder` (one thread, as BENCHMARKS' other embedder figures) over
  the `--quality-data` texts, in the same alternating rounds.

Usage:
  python -m bench.exports.variants --run ~/.cache/tfformer/gpt_10min_run \\
      --output bench/results/variants_gpt_10min.json
  python -m bench.exports.variants --run runs/minilm --quality-data TEXTS \\
      --output bench/results/variants_minilm.json
  python -m bench.exports.variants --run runs/de_en --texts 100 \\
      --output bench/results/variants_de_en.json
"""

import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from bench import common

VARIANTS = {
    "float32": ("none", None),
    "float16": ("float16", None),
    "int8": ("int8", None),
    "int4_32": ("int4", "32"),
    "int4_64": ("int4", "64"),
    "int4_128": ("int4", "128"),
}


def export_variant(run_dir, task, root, quantize, block, quality_data):
    """(the `.tflite`, the `.litertlm` bundle or None, the gate's figures
    or None, export seconds)."""
    from bench.exports import litertlm_speed
    from tfformer.export import quality
    from tfformer.export.tflite import export_tflite
    from tfformer.preprocessing.text import END_ID
    from tfformer.runs.directory import RunDirectory

    options = {}
    if quantize != "none":  # measured, never refused here
        options = {"force": True, "quality_data": quality_data, "max_quality_loss": 1e9}
    if block:
        options["int4_block"] = block
    began = time.perf_counter()
    if task == "causal_lm":
        run = RunDirectory(run_dir)
        context = run.manifest.max_length
        tflite, bundle, _ = litertlm_speed.export_and_bundle(
            run_dir, root, quantize, context, ("byte", None), None, [END_ID], **options
        )
    else:
        tflite = export_tflite(
            run_dir, os.path.join(root, "tflite"), quantize=quantize, **options
        )
        bundle = None
    seconds = time.perf_counter() - began
    figures = quality.recorded(os.path.dirname(tflite), os.path.basename(tflite))
    return tflite, bundle, figures, seconds


def generator_round(variant, prompt, text, decode, threads):
    from bench.exports import litertlm_speed
    from tfformer.export.runtimes.generate import LiteRTGenerator

    began = time.perf_counter()
    generator = LiteRTGenerator(variant["tflite"], num_threads=threads)
    load = time.perf_counter() - began
    reference = litertlm_speed.reference_round(generator, prompt, decode)
    lm = litertlm_speed.litert_lm_round(
        variant["bundle"], prompt, decode, threads, text
    )
    return {
        "reference_load_seconds": load,
        "reference_prefill_tokens_per_second": reference["prefill_tokens_per_second"],
        "reference_decode_tokens_per_second": reference["decode_tokens_per_second"],
        "litert_lm_init_seconds": lm["init_seconds"],
        "litert_lm_prefill_tokens_per_second": lm["prefill_tokens_per_second"],
        "litert_lm_decode_tokens_per_second": lm["decode_tokens_per_second"],
    }


def translator_round(variant, texts):
    from tfformer.export.runtimes.translate import Translator

    began = time.perf_counter()
    translator = Translator(variant["tflite"], num_threads=1)
    load = time.perf_counter() - began
    translator.translate(texts[:1])  # its delegate's first call
    _, seconds = common.timed_each(lambda t: translator.translate([t]), texts)
    return {"load_seconds": load, "ms_per_sentence": 1000 * float(np.median(seconds))}


def embedder_round(variant, texts):
    from tfformer.export.runtimes.embed import LiteRTEmbedder

    began = time.perf_counter()
    embedder = LiteRTEmbedder(variant["tflite"], num_threads=1)
    load = time.perf_counter() - began
    embedder.embed(texts[0])  # its delegate's first call
    _, seconds = common.timed_each(embedder.embed, texts)
    return {"load_seconds": load, "ms_per_sentence": 1000 * float(np.median(seconds))}


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument(
        "--run", required=True, help="a causal_lm or sentence_embedding run"
    )
    parser.add_argument("--quality-data", help="held-out data (an embedder: texts)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prefill", type=int, help="default: half the context")
    parser.add_argument("--decode", type=int, help="default: what the context leaves")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--texts", type=int, default=200, help="embedder: texts timed")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    from bench.exports import litertlm_speed
    from tfformer.runs.directory import RunDirectory

    run = RunDirectory(args.run)
    if run.task not in ("causal_lm", "sentence_embedding", "translation"):
        raise SystemExit(
            "--run must be a causal_lm, translation or sentence_embedding run: "
            f"{run.task}"
        )
    variants = {}
    with tempfile.TemporaryDirectory() as root:
        for name in args.variants:
            quantize, block = VARIANTS[name]
            folder = os.path.join(root, name)
            os.makedirs(folder)
            tflite, bundle, figures, seconds = export_variant(
                run.path, run.task, folder, quantize, block, args.quality_data
            )
            variants[name] = {
                "tflite": tflite,
                "bundle": bundle,
                "tflite_bytes": os.path.getsize(tflite),
                **({"litertlm_bytes": os.path.getsize(bundle)} if bundle else {}),
                "export_seconds": seconds,
                "quality": figures,
            }
            print(
                name,
                {k: v for k, v in variants[name].items() if k != "quality"},
                figures,
                flush=True,
            )
        if run.task == "causal_lm":
            context = run.manifest.max_length
            args.prefill = args.prefill or context // 2
            args.decode = args.decode or context - args.prefill - 1
            prompt, text = litertlm_speed.validation_prompt(run.path, args.prefill)
            call = lambda v: generator_round(v, prompt, text, args.decode, args.threads)  # noqa: E731
        elif run.task == "translation":
            from tfformer.export.tasks.translation import EXPORTER

            pairs, _ = EXPORTER.quality_samples(run, args.quality_data)
            texts = [source for source, _ in pairs][: args.texts]
            call = lambda v: translator_round(v, texts)  # noqa: E731
        else:
            from tfformer.export.tasks.sentence_embedding import EXPORTER

            texts, _ = EXPORTER.quality_samples(run, args.quality_data)
            texts = texts[: args.texts]
            call = lambda v: embedder_round(v, texts)  # noqa: E731
        rounds = {name: [] for name in variants}
        for r, order in common.rounds(variants, args.repeats):
            for name in order:
                result = call(variants[name])
                print(name, r, result, flush=True)
                rounds[name].append(result)
    summary = {}
    for name, results in rounds.items():
        keys = results[0].keys()
        v = variants[name]
        summary[name] = {
            "tflite_bytes": v["tflite_bytes"],
            **(
                {"litertlm_bytes": v["litertlm_bytes"]} if "litertlm_bytes" in v else {}
            ),
            **{key: common.median_min_max([x[key] for x in results]) for key in keys},
            "quality": v["quality"],
        }
    common.write_result(
        args.output,
        {
            "run": run.path,
            "task": run.task,
            "parameters": run.load_model().count_params(),
            "prefill_tokens": args.prefill if run.task == "causal_lm" else None,
            "decode_tokens": args.decode if run.task == "causal_lm" else None,
            "threads": args.threads if run.task == "causal_lm" else 1,
            "repeats": args.repeats,
            "variants": summary,
            "rounds": rounds,
        },
    )


if __name__ == "__main__":
    main()
