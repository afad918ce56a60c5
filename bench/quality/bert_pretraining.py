"""The measured effect of masked-LM pre-training on sentence polarity.

1. Pre-training (`training/configs/polarity_mlm.yaml`, `tfformer-train`):
   masked-LM on the English text in ../shared/data (the polarity sentences
   without labels, Multi30k's English captions, tinyshakespeare) minus the
   polarity validation and test sentences, under a wall-clock budget.
2. For each seed, alternating: the classifier fine-tuned from it
   (`polarity_finetune.yaml`: AdamW, linear warmup and decay, peak 5e-4)
   and the same encoder from random weights with the from-scratch recipe
   (`polarity_bert.yaml` with the pre-trained run's sizes: Adam, the
   paper's schedule at scale 0.1, its own vocabulary learned from the
   training split). Both see the same training split for the same 4 epochs
   and are scored on the same 1,066 test sentences (accuracy and macro-F1,
   `tfformer-evaluate`'s numbers).

Every run is a `tfformer-train` subprocess; wall seconds and CPU seconds
(user + system of the child, both cores) are recorded per run. The issue's
budget (60 CPU-minutes in total) covers pre-training plus one fine-tune;
`budget` in the JSON adds their wall minutes, and each run's CPU seconds
are next to it.

A reused `--pretrained RUN` reports the wall and CPU seconds of the
`/usr/bin/time -v` report at the end of `RUN.log`, if there is one (the
command below writes it). `RUN` may also be a converted checkpoint
(`tfformer-convert`, no training of ours: no metrics.json); with
`--finetune-config training/configs/polarity_minilm.yaml --kinds
pretrained` the classifiers are fine-tuned from it with that recipe.

Usage:
  /usr/bin/time -v tfformer-train --config training/configs/polarity_mlm.yaml \
      --set train.output_dir=RUN --set train.verbose=2 > RUN.log 2>&1
  python -m bench.quality.bert_pretraining [--pretrained RUN | --pretrain-minutes 45]
      [--seeds 0 1 2] [--work ~/.cache/tfformer/bert]
      [--output bench/results/bert_pretraining.json] [--set-finetune K=V ...]
      [--set-pretrain K=V ...] [--kinds pretrained scratch]
      [--finetune-config training/configs/polarity_finetune.yaml]

Writes the JSON and a bar plot (PNG) next to it.
"""

import json
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common

PRETRAIN = os.path.join("training", "configs", "polarity_mlm.yaml")
FINETUNE = os.path.join("training", "configs", "polarity_finetune.yaml")
SCRATCH = os.path.join("training", "configs", "polarity_bert.yaml")


def time_log(path):
    """Wall and CPU seconds of a reused pre-training run, from the
    `/usr/bin/time -v` report at the end of its log (empty if none)."""
    if not os.path.isfile(path):
        return {}
    found = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith(("User time (seconds):", "System time (seconds):")):
                found["cpu_seconds"] = found.get("cpu_seconds", 0.0) + float(
                    line.rsplit(" ", 1)[1]
                )
            elif line.startswith("Elapsed (wall clock) time"):
                clock = line.rsplit(" ", 1)[1].split(":")
                seconds = 0.0
                for part in clock:
                    seconds = seconds * 60 + float(part)
                found["wall_seconds"] = seconds
    if found:
        found["measured_by"] = f"/usr/bin/time -v, {path}"
    return found


def train_command(config, output_dir, sets):
    return [
        sys.executable,
        "-m",
        "tfformer.training",
        "--config",
        config,
        f"--set=train.output_dir={output_dir}",
        "--set=train.verbose=2",
        *[f"--set={s}" for s in sets],
    ]


def test_scores(run_dir):
    """Accuracy and macro-F1 on the test split, as tfformer-evaluate prints."""
    out = run_dir + ".eval.json"
    argv = [
        sys.executable,
        "-m",
        "tfformer.training.commands.evaluate",
        "--checkpoint",
        run_dir,
        "--output",
        out,
    ]
    common.run_logged(argv, run_dir + ".eval.log")
    with open(out) as f:
        return json.load(f)


def final_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.json")) as f:
        return json.load(f)["results"]


def pretrained_metrics(pretrained, pre_config, args):
    """What our own pre-training run reports (metrics.json)."""
    results = final_metrics(pretrained)
    return {
        "run": pretrained,
        "config": PRETRAIN,
        "model": pre_config["model"],
        "steps": results["global_step"],
        "train_seconds": results.get("train_seconds"),
        "run_wall_seconds": results.get("wall_seconds"),
        "overrides": args.set_pretrain,
        # With next-sentence prediction Keras names the metrics after
        # the outputs (masked_lm_..., next_sentence_...).
        "val_masked_accuracy": results.get(
            "val_accuracy", results.get("val_masked_lm_accuracy")
        ),
        "test_masked_accuracy": results.get(
            "test_accuracy", results.get("test_masked_lm_accuracy")
        ),
        "test_masked_loss": results.get(
            "test_loss", results.get("test_masked_lm_loss")
        ),
        "test_next_sentence_accuracy": results.get("test_next_sentence_accuracy"),
    }


def summary(values):
    return {
        "mean": statistics.mean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--pretrained", help="an existing pre-training run to reuse")
    p.add_argument("--pretrain-minutes", type=float, default=45.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument(
        "--work",
        default=os.path.expanduser(os.path.join("~", ".cache", "tfformer", "bert")),
    )
    p.add_argument(
        "--output", default=os.path.join("bench", "results", "bert_pretraining.json")
    )
    p.add_argument("--set-finetune", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--finetune-config",
        default=FINETUNE,
        help="the fine-tuning recipe (polarity_minilm.yaml for a converted run)",
    )
    p.add_argument(
        "--set-pretrain",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="pre-training overrides (data.next_sentence_prediction=true)",
    )
    p.add_argument(
        "--kinds",
        nargs="+",
        choices=("pretrained", "scratch"),
        default=["pretrained", "scratch"],
        help="which classifiers to train per seed",
    )
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)

    pretrained = args.pretrained
    pretraining = {}
    if pretrained is None:
        pretrained = os.path.join(args.work, "pretrain")
        if os.path.exists(pretrained):
            sys.exit(f"{pretrained} exists; pass --pretrained {pretrained} to reuse it")
        print(f"pre-training for {args.pretrain_minutes} minutes into {pretrained}")
        wall, cpu = common.run_logged(
            train_command(
                PRETRAIN,
                pretrained,
                [
                    f"train.time_budget_minutes={args.pretrain_minutes}",
                    *args.set_pretrain,
                ],
            ),
            pretrained + ".log",
        )
        pretraining = {"wall_seconds": wall, "cpu_seconds": cpu}
    else:
        pretraining = time_log(pretrained + ".log")
    with open(os.path.join(pretrained, "config.json")) as f:
        pre_config = json.load(f)
    if not os.path.isfile(os.path.join(pretrained, "metrics.json")):
        # A converted checkpoint: nothing of ours trained it.
        pretraining.update(
            {"run": pretrained, "converted": True, "model": pre_config["model"]}
        )
    else:
        pretraining.update(pretrained_metrics(pretrained, pre_config, args))
    print(json.dumps(pretraining, indent=1))
    print(json.dumps(pretraining, indent=1))
    sizes = [
        f"model.{k}={v}"
        for k, v in pre_config["model"].items()
        if k in ("preset", "num_layers", "hidden_dim", "num_heads", "intermediate_dim")
        and v is not None
    ]

    runs = []
    for seed in args.seeds:
        for kind in args.kinds:
            out = os.path.join(args.work, f"{kind}_seed{seed}")
            if os.path.exists(out):
                sys.exit(f"{out} exists; remove it or use another --work")
            if kind == "pretrained":
                argv = train_command(
                    args.finetune_config,
                    out,
                    [
                        f"model.init_from={pretrained}",
                        f"train.seed={seed}",
                        *args.set_finetune,
                    ],
                )
            else:
                argv = train_command(SCRATCH, out, [f"train.seed={seed}", *sizes])
            print(f"{kind} seed {seed} ...", flush=True)
            wall, cpu = common.run_logged(argv, out + ".log")
            scores = test_scores(out)
            metrics = final_metrics(out)
            runs.append(
                {
                    "kind": kind,
                    "seed": seed,
                    "wall_seconds": wall,
                    "cpu_seconds": cpu,
                    "steps": metrics["global_step"],
                    "val_accuracy": metrics.get("val_accuracy"),
                    "test_accuracy": scores["accuracy"],
                    "test_macro_f1": scores["macro_f1"],
                    "confusion_matrix": scores["confusion_matrix"],
                }
            )
            print(
                f"  test accuracy {scores['accuracy']:.4f}, macro-F1 "
                f"{scores['macro_f1']:.4f}, {wall:.0f} s",
                flush=True,
            )

    by_kind = {}
    for kind in args.kinds:
        mine = [r for r in runs if r["kind"] == kind]
        by_kind[kind] = {
            "test_accuracy": summary([r["test_accuracy"] for r in mine]),
            "test_macro_f1": summary([r["test_macro_f1"] for r in mine]),
            "wall_seconds": summary([r["wall_seconds"] for r in mine]),
            "cpu_seconds": summary([r["cpu_seconds"] for r in mine]),
        }
    first = by_kind.get("pretrained", by_kind[args.kinds[0]])
    fine_tune = first["wall_seconds"]["mean"]
    report = {
        "pretraining": pretraining,
        "finetune_config": args.finetune_config,
        "finetune_overrides": args.set_finetune,
        "scratch_config": SCRATCH,
        "scratch_overrides": sizes,
        "runs": runs,
        "summary": by_kind,
        "budget": {
            "pretraining_wall_seconds": pretraining.get("wall_seconds"),
            "one_finetune_wall_seconds": fine_tune,
            "total_wall_minutes": (
                (pretraining["wall_seconds"] + fine_tune) / 60
                if "wall_seconds" in pretraining
                else None
            ),
        },
    }
    common.write_result(args.output, report)
    plot(by_kind, args.output.removesuffix(".json") + ".png")
    for kind, s in by_kind.items():
        a = s["test_accuracy"]
        print(f"{kind}: test accuracy {a['mean']:.4f} +- {a['std']:.4f} {a['values']}")


def plot(by_kind, path):
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = list(by_kind)
    means = [100 * by_kind[k]["test_accuracy"]["mean"] for k in names]
    stds = [100 * by_kind[k]["test_accuracy"]["std"] for k in names]
    ax.bar(names, means, yerr=stds, capsize=6, color=["tab:blue", "tab:gray"])
    for i, k in enumerate(names):
        for v in by_kind[k]["test_accuracy"]["values"]:
            ax.plot(i, 100 * v, "k.", zorder=3)
    ax.axhline(80, ls="--", color="tab:red", lw=1, label="target 80 %")
    ax.set_ylim(min(means) - 6, max(82, max(means) + 3))
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Sentence polarity: pre-trained vs from scratch")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
