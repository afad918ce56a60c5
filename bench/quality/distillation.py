"""Small BERTs distilled from a fine-tuned MiniLM on sentence polarity,
against the same students on the labels alone.

The teacher is a finished text_classification run (`--teacher`; the
benchmark's is all-MiniLM-L6-v2 fine-tuned by `polarity_minilm.yaml`, seed
0); it is scored once on the test split. Then, for each seed, the kinds in
turn, each `polarity_distill.yaml` with a 10-minute training budget:

- "distilled": the config as written: the student starts from the
  masked-LM pre-training run `--pretrained` (`polarity_mlm.yaml`: a 4-layer,
  128-wide encoder and its vocabulary) and learns the teacher's logits on
  the training sentences, 20 perturbed copies of each and the Multi30k
  English captions, with the labels (`--set` changes the config, as for
  the 5-copy rows of `distillation.json`);
- "labels": the same student on the labels alone (`data.teacher=null`);
- "scratch_distilled", "scratch": a 4-layer, 256-wide student from random
  weights, on its own vocabulary, with and without the teacher.

The teacher's logits are cached in `--work` under a fingerprint of the
teacher and the texts, so one run per fingerprint pays for them (its log
has the seconds). Each student: test accuracy and macro-F1 of
`tfformer-evaluate` on the 1,066 test sentences every polarity figure uses,
steps, wall seconds and parameters. The first "distilled" student is
exported to TFLite with `--quantize int8` (dynamic range), whose quality
gate scores it against float32 on the run's 500 held-out sentences; the
file's size is recorded.

Usage:
  python -m bench.quality.distillation \\
      --teacher ~/.cache/tfformer/lora_cmp/full_seed0 \\
      --pretrained ~/.cache/tfformer/bert/pretrain [--seeds 0 1 2] \\
      [--kinds distilled labels scratch_distilled scratch] [--append] \\
      [--work ~/.cache/tfformer/distill] [--set K=V ...] \\
      [--output bench/results/distillation.json]

A run whose `<run>.eval.json` exists in `--work` is reused, not trained
again. Writes the JSON and a bar plot (PNG) next to it.
"""

import json
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common
from bench.quality.bert_pretraining import (
    final_metrics,
    summary,
    test_scores,
    train_command,
)

CONFIG = os.path.join("training", "configs", "polarity_distill.yaml")
# The student without pre-training: a 4-layer, 256-wide BERT on its own
# vocabulary, learned from the training split.
FROM_SCRATCH = (
    "model.init_from=null",
    "model.preset=bert_tiny",
    "model.num_layers=4",
    "model.hidden_dim=256",
    "model.num_heads=4",
    "model.intermediate_dim=512",
)
WITHOUT_TEACHER = (
    "data.teacher=null",
    "data.teacher_augment_copies=0",
    "data.teacher_text_paths=[]",
)
# Kind: (starts from --pretrained, learns from --teacher).
KINDS = {
    "distilled": (True, True),
    "labels": (True, False),
    "scratch_distilled": (False, True),
    "scratch": (False, False),
}


def parameters(run_dir):
    import tfformer

    return int(tfformer.load(run_dir).model.count_params())


def pretrained_run(path):
    """What the pre-training run the 'distilled' and 'labels' students start
    from reports: its steps, seconds and masked-token accuracy."""
    run = os.path.abspath(os.path.expanduser(path))
    results = final_metrics(run)
    return {
        "run": run,
        "steps": results["global_step"],
        "wall_seconds": results.get("wall_seconds"),
        "train_seconds": results.get("train_seconds"),
        "val_masked_accuracy": results.get("val_accuracy"),
        "test_masked_accuracy": results.get("test_accuracy"),
    }


def train_student(kind, seed, args):
    run_dir = os.path.join(args.work, f"{kind}_seed{seed}")
    sets = [f"train.seed={seed}", *args.set]
    pretrained, taught = KINDS[kind]
    if pretrained:
        sets.append(
            f"model.init_from={os.path.abspath(os.path.expanduser(args.pretrained))}"
        )
    else:
        sets += FROM_SCRATCH
    if taught:
        sets += [
            f"data.teacher={os.path.abspath(os.path.expanduser(args.teacher))}",
            f"data.teacher_cache={os.path.join(args.work, 'teacher_cache')}",
        ]
    else:
        sets += WITHOUT_TEACHER
    log = run_dir + ".log"
    if not os.path.isfile(run_dir + ".eval.json"):
        wall, cpu = common.run_logged(train_command(CONFIG, run_dir, sets), log)
        with open(run_dir + ".seconds.json", "w") as f:
            json.dump({"wall_seconds": wall, "cpu_seconds": cpu}, f)
    scores = test_scores(run_dir)
    results = final_metrics(run_dir)
    with open(log, errors="replace") as f:
        text = f.read()
    seconds = {}
    if os.path.isfile(run_dir + ".seconds.json"):
        with open(run_dir + ".seconds.json") as f:
            seconds = json.load(f)
    labelled = re.search(r"Distillation: (\d+) labelled sentences, (\d+) more", text)
    labelling = re.search(r"Teacher logits: (\d+) texts in (\d+) s", text)
    return {
        "kind": kind,
        "seed": seed,
        "run": run_dir,
        "overrides": sets,
        "test_accuracy": scores["accuracy"],
        "test_macro_f1": scores["macro_f1"],
        "steps": results["global_step"],
        "train_seconds": results.get("train_seconds"),
        "run_wall_seconds": results.get("wall_seconds"),
        # The whole command (labelling, training, evaluation): wall and CPU
        # seconds of the child, both cores.
        "command_seconds": seconds,
        "val_accuracy": results.get("val_accuracy"),
        "val_teacher_agreement": results.get("val_teacher_agreement"),
        "teacher_logits_cached": "Teacher logits: from" in text,
        "teacher_labelling_seconds": int(labelling.group(2)) if labelling else None,
        "sentences": {
            "labelled": int(labelled.group(1)) if labelled else None,
            "teacher_labelled_extra": int(labelled.group(2)) if labelled else 0,
        },
        "parameters": parameters(run_dir),
    }


def export_int8(run_dir, work):
    """The int8 TFLite export of `run_dir`: its size and the quality
    gate's report (`tfformer-export` prints it)."""
    out = os.path.join(work, os.path.basename(run_dir) + "_int8")
    log = out + ".log"
    result = out + ".result.json"
    argv = [
        sys.executable,
        "-m",
        "tfformer.export",
        "--checkpoint",
        run_dir,
        "--format",
        "tflite",
        "--quantize",
        "int8",
        "--out",
        out,
        "--result-json",
        result,
    ]
    if not os.path.isfile(result):
        common.run_logged(argv, log)
    with open(result) as f:
        path = json.load(f)["path"]
    files = [os.path.join(out, n) for n in os.listdir(out) if n.endswith(".tflite")]
    with open(log, errors="replace") as f:
        gate = [line.strip() for line in f if "float32" in line or "accuracy" in line]
    return {
        "command": " ".join(argv[2:]),
        "path": path,
        "tflite_bytes": {os.path.basename(p): os.path.getsize(p) for p in files},
        "quality_gate": gate[-4:],
    }


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--teacher", required=True, help="a text_classification run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    p.add_argument(
        "--pretrained",
        required=True,
        help="a masked_lm run (polarity_mlm.yaml) that the students of kinds "
        "'distilled' and 'labels' start from",
    )
    p.add_argument(
        "--append",
        action="store_true",
        help="add these runs to those of an existing --output (a run of the "
        "same kind and seed is replaced)",
    )
    p.add_argument(
        "--work",
        default=os.path.expanduser(os.path.join("~", ".cache", "tfformer", "distill")),
    )
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--output", default=os.path.join("bench", "results", "distillation.json")
    )
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    teacher = os.path.abspath(os.path.expanduser(args.teacher))
    teacher_eval = os.path.join(args.work, "teacher")
    if not os.path.isfile(teacher_eval + ".eval.json"):
        argv = [
            sys.executable,
            "-m",
            "tfformer.training.commands.evaluate",
            "--checkpoint",
            teacher,
            "--output",
            teacher_eval + ".eval.json",
        ]
        common.run_logged(argv, teacher_eval + ".eval.log")
    with open(teacher_eval + ".eval.json") as f:
        teacher_scores = json.load(f)
    runs = []
    for seed in args.seeds:
        for kind in args.kinds:
            print(f"{kind}, seed {seed}", flush=True)
            runs.append(train_student(kind, seed, args))
            print(f"  test accuracy {runs[-1]['test_accuracy']:.4f}", flush=True)
    if args.append and os.path.isfile(args.output):
        with open(args.output) as f:
            earlier = json.load(f)["runs"]
        done = {(r["kind"], r["seed"]) for r in runs}
        runs = [r for r in earlier if (r["kind"], r["seed"]) not in done] + runs
    by_kind = {
        kind: {
            "test_accuracy": summary(
                [r["test_accuracy"] for r in runs if r["kind"] == kind]
            ),
            "test_macro_f1": summary(
                [r["test_macro_f1"] for r in runs if r["kind"] == kind]
            ),
            "parameters": next(r["parameters"] for r in runs if r["kind"] == kind),
        }
        for kind in KINDS
        if any(r["kind"] == kind for r in runs)
    }
    # The int8 export: the shipped config's first student (kind "distilled").
    first = min(
        (r for r in runs if r["kind"] == "distilled"),
        key=lambda r: r["seed"],
        default=None,
    )
    result = {
        "script": common.script_name(),
        "command": common.command_line(),
        "machine": common.machine(),
        "config": CONFIG,
        "pretrained": pretrained_run(args.pretrained),
        "teacher": {
            "run": teacher,
            "parameters": parameters(teacher),
            "test_accuracy": teacher_scores["accuracy"],
            "test_macro_f1": teacher_scores["macro_f1"],
        },
        "by_kind": by_kind,
        "runs": runs,
        "int8_export": export_int8(first["run"], args.work) if first else None,
    }
    common.write_result(args.output, result)
    plot(result, os.path.splitext(args.output)[0] + ".png")


def plot(result, path):
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    names = ["teacher", *result["by_kind"]]
    means = [100 * result["teacher"]["test_accuracy"]] + [
        100 * result["by_kind"][k]["test_accuracy"]["mean"] for k in names[1:]
    ]
    stds = [0] + [100 * result["by_kind"][k]["test_accuracy"]["std"] for k in names[1:]]
    ax.bar(
        names,
        means,
        yerr=stds,
        capsize=6,
        color=["tab:gray", "tab:blue", "tab:cyan", "tab:orange", "tab:olive"][
            : len(names)
        ],
    )
    for i, kind in enumerate(names[1:], start=1):
        for r in result["runs"]:
            if r["kind"] == kind:
                ax.plot(i, 100 * r["test_accuracy"], "k.", zorder=3)
    ax.axhline(80, ls="--", color="tab:red", lw=1, label="target 80 %")
    ax.set_ylim(min(means) - 6, max(means) + 3)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Sentence polarity: students of a MiniLM teacher, 10 min each")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
