"""Is a faster training recipe also a correct one? The same config trained
under each recipe (`bench/training_speed/recipes.py`'s precision and
compile mode) with the same seeds (`train.seed`; the data's split and
shuffle seeds stay the config's), recipes alternating: the validation loss
after each epoch, at equal steps (a run of fixed epochs) or at an equal
wall-clock budget (`--set train.time_budget_minutes=M`).

Equal steps: a recipe's curve matches the first recipe's when, at every
epoch, the difference of the seeds' means is within the first recipe's
seed-to-seed range (max - min) there; the JSON holds both per epoch. Equal
budget: the same test on each run's last validation loss, with the steps
each recipe reached. Each run is `tfformer-train` in a process of its own;
its epochs' `real_tokens_per_second` (metrics.json) are the trainer's own
speed, pipeline included.

Usage:
  python -m bench.quality.recipe_quality \\
      --config training/configs/shakespeare_gpt.json \\
      --set train.epochs=6 train.steps_per_epoch=100 --seeds 0 1 2 \\
      --output bench/results/recipe_quality_gpt.json
"""

import json
import os
import shutil
import statistics
import sys

from bench import common
from bench.quality.bert_pretraining import train_command

RECIPES = common.TRAINING_RECIPES


def run_once(config, out, recipe, seed, sets):
    precision, jit = RECIPES[recipe]
    argv = train_command(
        config,
        out,
        [
            f"train.precision={precision}",
            f"train.jit_compile={jit}",
            f"train.seed={seed}",
            *sets,
        ],
    )
    wall, cpu = common.run_logged(argv, out + ".log")
    with open(os.path.join(out, "metrics.json")) as f:
        epochs = json.load(f)["epochs"]
    with open(out + ".log", errors="replace") as f:
        kernels = [line.strip() for line in f if line.startswith("Kernels:")]
    return dict(
        recipe=recipe,
        seed=seed,
        wall_seconds=wall,
        cpu_seconds=cpu,
        kernels=kernels[0] if kernels else None,
        steps=sum(e["steps"] for e in epochs),
        val_loss=[e["val_loss"] for e in epochs],
        epoch_steps=[e["steps"] for e in epochs],
        real_tokens_per_second=[e["real_tokens_per_second"] for e in epochs],
    )


def summary(runs, recipes, value):
    """Each recipe's mean, min and max of `value(run)` over seeds; the
    difference of each recipe's mean from the first recipe's, and whether
    it is within the first's seed-to-seed range."""
    base = recipes[0]
    row = {}
    for recipe in recipes:
        values = [value(r) for r in runs if r["recipe"] == recipe]
        row[recipe] = dict(
            mean=statistics.fmean(values), min=min(values), max=max(values)
        )
    spread = row[base]["max"] - row[base]["min"]
    for recipe in recipes[1:]:
        difference = row[recipe]["mean"] - row[base]["mean"]
        row[recipe]["minus_" + base] = difference
        row[recipe]["within_" + base + "_range"] = abs(difference) <= spread
    return row


def compare(runs, recipes):
    """Equal steps: a `summary` of the validation loss per epoch that every
    run reached."""
    epochs = min(len(r["val_loss"]) for r in runs)
    return [
        dict(epoch=e + 1, **summary(runs, recipes, lambda r, e=e: r["val_loss"][e]))
        for e in range(epochs)
    ]


def compare_budget(runs, recipes):
    """Equal budget: a `summary` of each run's last validation loss, and of
    the steps it reached."""
    return dict(
        last_val_loss=summary(runs, recipes, lambda r: r["val_loss"][-1]),
        steps=summary(runs, recipes, lambda r: r["steps"]),
    )


def plot(runs, recipes, path):
    plt = common.pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for i, recipe in enumerate(recipes):
        for run in (r for r in runs if r["recipe"] == recipe):
            steps = [
                sum(run["epoch_steps"][: e + 1]) for e in range(len(run["val_loss"]))
            ]
            axis.plot(
                steps,
                run["val_loss"],
                color=f"C{i}",
                alpha=0.8,
                marker="o",
                markersize=3,
                label=recipe if run["seed"] == runs[0]["seed"] else None,
            )
    axis.set_xlabel("training steps")
    axis.set_ylabel("validation loss (nats per token)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--recipes", default="float32_xla,bfloat16_graph")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--set", nargs="*", default=[], help="SECTION.KEY=VALUE, all runs")
    p.add_argument("--work", default=os.path.expanduser("~/.cache/tfformer/recipes"))
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument("--output", default="bench/results/recipe_quality.json")
    args = p.parse_args()
    recipes = args.recipes.split(",")
    if set(recipes) - set(RECIPES) or len(recipes) < 2:
        p.error(f"--recipes takes two or more of {sorted(RECIPES)}: {args.recipes}")
    if len(args.seeds) < 2:
        p.error(f"--seeds needs two or more (a spread). Received: {args.seeds}")
    budget = any(s.startswith("train.time_budget_minutes=") for s in args.set)
    name = os.path.splitext(os.path.basename(args.output))[0]
    work = os.path.join(args.work, name)
    if os.path.exists(work):
        p.error(f"{work} exists; remove it or pass another --work")
    os.makedirs(work)
    runs = []
    for i, seed in enumerate(args.seeds):
        for recipe in recipes if i % 2 == 0 else recipes[::-1]:
            out = os.path.join(work, f"{recipe}_seed{seed}")
            runs.append(run_once(args.config, out, recipe, seed, args.set))
            print(json.dumps(runs[-1]), flush=True)
            if not args.keep:
                shutil.rmtree(out)
    rows = compare(runs, recipes)
    for row in [*rows, *(compare_budget(runs, recipes).items() if budget else ())]:
        label, row = (f"epoch {row['epoch']}", row) if "epoch" in row else row
        print(
            f"{label}: "
            + "; ".join(
                f"{r} {row[r]['mean']:.4f} ({row[r]['min']:.4f}-{row[r]['max']:.4f})"
                for r in recipes
            )
        )
    plot(runs, recipes, args.output.removesuffix(".json") + ".png")
    common.write_result(
        args.output,
        dict(
            config=args.config,
            sets=args.set,
            recipes=recipes,
            mode="equal budget" if budget else "equal steps",
            runs=runs,
            by_epoch=rows,
            budget=compare_budget(runs, recipes) if budget else None,
        ),
    )
    if not args.keep:
        shutil.rmtree(work)  # the runs' logs; the JSON holds what they said
    return 0


if __name__ == "__main__":
    sys.exit(main())
