"""One finished translation run, scored as a user scores it: its training
record (`metrics.json`: steps, epochs, validation loss, speed, wall time)
and `tfformer-evaluate` on its test split with greedy search and with the
default beam search (4 beams, length penalty 0.6), in one result JSON.

It trains nothing: train first with the command given as `--trained-with`,
which the JSON records next to its own.

Usage:
  tfformer-train --config training/configs/translate_de_en.json \\
      --set train.time_budget_minutes=60 --set train.output_dir=RUN
  python -m bench.quality.translation_run --run RUN \\
      --trained-with "tfformer-train --config ... --set ..." \\
      --output bench/results/de_en_60min.json
"""

import json
import os
import sys

from bench.common import argument_parser, run_command, write_result

SEARCHES = {"greedy": ["--search", "greedy"], "beam 4, alpha 0.6": []}


def main(argv=None):
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a finished translation run")
    parser.add_argument(
        "--trained-with", required=True, help="the tfformer-train command it ran"
    )
    parser.add_argument("--output", required=True, help="the result JSON")
    args = parser.parse_args(argv)
    with open(os.path.join(args.run, "metrics.json"), encoding="utf-8") as f:
        report = json.load(f)
    with open(os.path.join(args.run, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    if config.get("task") != "translation":
        sys.exit(f"--run must be a translation run. Received: task {config['task']!r}")
    evaluation = {}
    for name, flags in SEARCHES.items():
        print(f"Evaluating with {name}...", file=sys.stderr, flush=True)
        out = run_command(
            [
                sys.executable,
                *("-m", "tfformer.training.commands.evaluate"),
                *("--checkpoint", args.run, *flags),
            ]
        )
        evaluation[name] = json.loads(out)
    write_result(
        args.output,
        {
            "what": "a translation run scored on its test split, greedy and beam",
            "trained_with": args.trained_with,
            "config": config,
            "training_epochs": report.get("epochs", []),
            "results": {k: v for k, v in report.items() if k != "epochs"},
            "evaluation": evaluation,
        },
    )
    for name, scores in evaluation.items():
        print(
            f"{name}: BLEU {scores.get('bleu_lowercased')} lowercased, "
            f"{scores.get('bleu_cased')} cased, chrF {scores.get('chrf_lowercased')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
