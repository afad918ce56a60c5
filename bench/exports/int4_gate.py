"""What the int4 export's quality gate measures on a text generator, for
every variant: float16, dynamic int8 and int4 in blocks of 32, 64, 128
(and 256 where it divides the weights) and per channel, each against the
float32 model of the same run, on the run's held-out tail
(`tfformer.export.tasks.causal_lm.quality.measure`: nats per token
teacher-forced through the reference runtime's `decode`, and top-1
agreement), with each file's size.
The figures behind the gate's defaults (`--int4-block`,
`--max-quality-loss`).

Usage: `python -m bench.exports.int4_gate --run RUN
[--output bench/results/int4_gate.json]`
"""

import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="a causal_lm run directory")
    parser.add_argument("--output", default="bench/results/int4_gate.json")
    args = parser.parse_args()

    from tfformer.errors import InputError
    from tfformer.export import int4
    from tfformer.export.tasks.causal_lm import EXPORTER, quality
    from tfformer.export.tflite import export_tflite
    from tfformer.runs.directory import RunDirectory

    run = RunDirectory(args.run)
    task_run = EXPORTER.read(run)
    text, where = quality.heldout_text(run)
    if text is None:
        raise SystemExit(where)
    ids = quality.heldout_ids(task_run, text, where)
    variants = {}
    with tempfile.TemporaryDirectory() as root:
        paths = {}
        for quantize in ("none", "float16", "int8"):
            paths[quantize] = export_tflite(
                args.run,
                os.path.join(root, quantize),
                quantize=quantize,
                progress=lambda *_: None,
            )
        with open(paths["none"], "rb") as f:
            float_model = f.read()
        for block in int4.BLOCKS:
            try:
                quantized = int4.quantize_int4(float_model, block)
            except InputError as e:
                variants[f"int4_{block}"] = {"refused": str(e)[:200]}
                continue
            paths[f"int4_{block}"] = os.path.join(root, f"int4_{block}.tflite")
            with open(paths[f"int4_{block}"], "wb") as f:
                f.write(quantized)
        for name, path in paths.items():
            figures = {"bytes": os.path.getsize(path)}
            if name != "none":
                measured = quality.measure(paths["none"], path, ids, task_run.context)
                figures.update(measured)
            variants[name] = figures
            print(name, figures, flush=True)
    common.write_result(
        args.output,
        {
            "run": run.path,
            "data": where,
            "parameters": task_run.model.count_params(),
            "variants": variants,
        },
    )


if __name__ == "__main__":
    main()
