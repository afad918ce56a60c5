"""LoRA against full fine-tuning at the same budget: all-MiniLM-L6-v2
(converted) fine-tuned on sentence polarity by `polarity_minilm.yaml` as
written (every weight trains), and the same config with `model.lora_rank`
(adapters on the query and value projections, the new head in full), the
learning rate raised to `--lora-learning-rate` (adapters start at zero and
are usually trained 10x faster than full fine-tuning). Per run: the test
split's scores (`tfformer-evaluate`: accuracy, or nats per token for a
language model), trainable parameters, wall seconds and peak memory
(`/usr/bin/time -v`), the size of model.keras, of the last backup and of
`adapters.npz`.

`--config` and `--set` run another pair: a GPT continuing on
tinyshakespeare from a tfformer run (`--set` applies to both contenders).
`--kinds` runs one contender only; `--append` adds the runs to those of an
existing `--output`.

Usage:
  python -m bench.quality.lora_polarity --init-from ~/.cache/tfformer/minilm/run \\
      --seeds 0 1 2 --output bench/results/lora_polarity.json
  python -m bench.quality.lora_polarity --init-from ~/.cache/tfformer/gpt_60min_run \\
      --config training/configs/shakespeare_gpt_60min.json \\
      --set train.time_budget_minutes=5 train.learning_rate=3e-4 \\
      --lora-learning-rate 3e-3 --output bench/results/lora_shakespeare.json
"""

import json
import os
import re
import sys

from bench import common
from bench.quality.bert_pretraining import test_scores, train_command

CONFIG = "training/configs/polarity_minilm.yaml"


def peak_memory_mb(log):
    with open(log, errors="replace") as f:
        for line in f:
            if "Maximum resident set size" in line:
                return int(line.rsplit(" ", 1)[1]) / 1024
    return None


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--init-from", required=True, help="the run to start from")
    p.add_argument("--config", default=CONFIG)
    p.add_argument("--set", nargs="*", default=[], help="SECTION.KEY=VALUE, both runs")
    p.add_argument("--kinds", nargs="+", help="default: full and lora_r<rank>")
    p.add_argument("--append", action="store_true")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--lora-learning-rate", type=float, default=5e-4)
    p.add_argument("--work", default=os.path.expanduser("~/.cache/tfformer/lora_cmp"))
    p.add_argument("--output", default="bench/results/lora_polarity.json")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    kinds = {
        "full": [],
        f"lora_r{args.rank}": [
            f"model.lora_rank={args.rank}",
            f"train.learning_rate={args.lora_learning_rate}",
        ],
    }
    kinds = {k: v for k, v in kinds.items() if not args.kinds or k in args.kinds}
    runs = []
    if args.append:
        with open(args.output) as f:
            runs = json.load(f)["runs"]
    for seed in args.seeds:
        for kind, sets in kinds.items():
            out = os.path.join(args.work, f"{kind}_seed{seed}")
            if os.path.exists(out):
                sys.exit(f"{out} exists; remove it or pass another --work")
            argv = [
                "/usr/bin/time",
                "-v",
                *train_command(
                    args.config,
                    out,
                    [
                        f"model.init_from={args.init_from}",
                        f"train.seed={seed}",
                        *args.set,
                        *sets,
                    ],
                ),
            ]
            wall, cpu = common.run_logged(argv, out + ".log")
            with open(out + ".log", errors="replace") as f:
                log = f.read()
            found = re.search(r"LoRA: .*?; ([\d,]+) of ([\d,]+) parameters", log)
            scores = test_scores(out)
            backup = os.path.join(out, "backup")
            adapters = os.path.join(out, "adapters.npz")
            run = {
                "kind": kind,
                "seed": seed,
                "test_scores": scores,
                "wall_seconds": wall,
                "cpu_seconds": cpu,
                "peak_memory_mb": peak_memory_mb(out + ".log"),
                "model_keras_bytes": os.path.getsize(os.path.join(out, "model.keras")),
                "backup_bytes": sum(
                    os.path.getsize(os.path.join(backup, f)) for f in os.listdir(backup)
                ),
                "adapters_npz_bytes": (
                    os.path.getsize(adapters) if os.path.exists(adapters) else None
                ),
            }
            if "accuracy" in scores:
                run["test_accuracy"] = scores["accuracy"]
            if found:
                trainable = int(found.group(1).replace(",", ""))
                run.update(
                    trainable_parameters=trainable,
                    parameters=int(found.group(2).replace(",", "")),
                    adapter_and_head_bytes=4 * trainable,
                )
            print(run, flush=True)
            runs.append(run)
    common.write_result(
        args.output,
        {
            "config": args.config,
            "sets": args.set,
            "init_from": os.path.abspath(args.init_from),
            "rank": args.rank,
            "lora_learning_rate": args.lora_learning_rate,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
