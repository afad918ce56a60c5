"""LoRA against full fine-tuning at the same budget: all-MiniLM-L6-v2
(converted) fine-tuned on sentence polarity by `polarity_minilm.yaml` as
written (every weight trains), and the same config with `model.lora_rank`
(adapters on the query and value projections, the new head in full), the
learning rate raised to `--lora-learning-rate` (adapters start at zero and
are usually trained 10x faster than full fine-tuning). Per run: test
accuracy (`tfformer-evaluate`), trainable parameters, wall seconds and
peak memory (`/usr/bin/time -v`), the size of model.keras and of the
adapters alone (float32).

Usage:
  python -m bench.quality.lora_polarity --init-from ~/.cache/tfformer/minilm/run \\
      --seeds 0 --output bench/results/lora_polarity.json
"""

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
    p.add_argument("--init-from", required=True, help="the converted MiniLM run")
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
    runs = []
    for seed in args.seeds:
        for kind, sets in kinds.items():
            out = os.path.join(args.work, f"{kind}_seed{seed}")
            if os.path.exists(out):
                sys.exit(f"{out} exists; remove it or pass another --work")
            argv = [
                "/usr/bin/time",
                "-v",
                *train_command(
                    CONFIG,
                    out,
                    [
                        f"model.init_from={args.init_from}",
                        f"train.seed={seed}",
                        *sets,
                    ],
                ),
            ]
            wall, cpu = common.run_logged(argv, out + ".log")
            with open(out + ".log", errors="replace") as f:
                log = f.read()
            found = re.search(r"LoRA: .*?; ([\d,]+) of ([\d,]+) parameters", log)
            scores = test_scores(out)
            run = {
                "kind": kind,
                "seed": seed,
                "test_accuracy": scores["accuracy"],
                "wall_seconds": wall,
                "cpu_seconds": cpu,
                "peak_memory_mb": peak_memory_mb(out + ".log"),
                "model_keras_bytes": os.path.getsize(os.path.join(out, "model.keras")),
            }
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
            "config": CONFIG,
            "init_from": os.path.abspath(args.init_from),
            "rank": args.rank,
            "lora_learning_rate": args.lora_learning_rate,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
