"""Peak memory of the Multi30k training run, of each export, and of serving
each exported form.

Every piece runs as its own command under `/usr/bin/time -v`; its peak is
that tool's "Maximum resident set size", which covers the command and every
subprocess it waits for (the TFLite converter runs in one). While a command
runs, this script also samples the resident memory of its process tree every
0.2 s, for the curves in the PNG. The pieces, in order:

- `import`: Python importing TensorFlow, Keras and tfformer's trainer: the
  floor under every other figure;
- `train`: `tfformer-train` on `translate_de_en.json` for `--minutes`
  (vocabulary learning, tf.data, the XLA-compiled step, validation,
  checkpoints);
- `export saved_model` and `export tflite/Q` for each quantization Q
  (full_int8 calibrated on 200 training sources): `tfformer-export`;
- `serve saved_model`: `tf.saved_model.load` and `serving_default` on
  `--sentences` test sources, one at a time (a TF Serving-like process);
- `serve tflite/Q`: the `ai_edge_litert` Interpreter and the export's
  plain-Python device tokenizer (loaded from its file, so neither TensorFlow
  nor Keras is imported), the same sentences: what an app's process holds.

Usage: `python -m bench.exports.memory [--minutes 5] [--run DIR] [--sentences 50]
[--output bench/results/memory_de_en.json]`. A `--run` that already holds
`model.keras` is reused (no training row).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

from bench import common

DATA = "../shared/data/multi30k"
QUANTIZATIONS = ("none", "float16", "int8", "full_int8")
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(pid):
    """Resident bytes of `pid` and all its descendants (0 once gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def measured(name, command, env=None):
    """Runs `command` under /usr/bin/time -v; returns its row."""
    print(f"{name}: {' '.join(command)[:160]}", flush=True)
    began = time.perf_counter()
    process = subprocess.Popen(
        ["/usr/bin/time", "-v", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    samples, done = [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append(
                (round(time.perf_counter() - began, 2), tree_rss(process.pid))
            )
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    done.set()
    sampler.join()
    seconds = time.perf_counter() - began
    if process.returncode:
        sys.stderr.write(out[-3000:] + err[-3000:])
        raise SystemExit(f"{name} failed with exit {process.returncode}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    row = dict(
        name=name,
        command=command,
        seconds=round(seconds, 1),
        peak_rss_mb=int(peak.group(1)) / 1024,
        peak_sampled_mb=max(r for _, r in samples) / 2**20 if samples else None,
        samples=[(t, round(r / 2**20, 1)) for t, r in samples[::5]],
        stdout_tail=out[-400:],
    )
    print(
        f"{name}: peak {row['peak_rss_mb']:.0f} MB "
        f"(sampled {row['peak_sampled_mb']:.0f} MB), {seconds:.0f} s",
        flush=True,
    )
    return row


SERVE_SAVED_MODEL = textwrap.dedent(
    """
    import sys, tensorflow as tf
    served = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    for line in open(sys.argv[2], encoding="utf-8"):
        out = served(text=tf.constant([line.rstrip("\\n")]))["translation"]
    print(out.numpy()[0].decode("utf-8"))
    """
)

SERVE_TFLITE = textwrap.dedent(
    """
    import importlib.util, os, sys
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    spec = importlib.util.spec_from_file_location("device_tokenizer", sys.argv[3])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tokenizer = module.DeviceTokenizer(os.path.dirname(sys.argv[1]))
    runner = Interpreter(model_path=sys.argv[1]).get_signature_runner()
    for line in open(sys.argv[2], encoding="utf-8"):
        ids = np.asarray([tokenizer.tokenize(line.rstrip("\\n"))], np.int32)
        out = tokenizer.detokenize(runner(source_ids=ids)["token_ids"][0])
    assert "tensorflow" not in sys.modules and "keras" not in sys.modules
    print(out)
    """
)


def plot(rows, path):
    plt = common.pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    for row in rows:
        if row["name"] == "train":
            t, mb = zip(*row["samples"], strict=True)
            left.plot([s / 60 for s in t], mb, color="tab:blue")
            left.axhline(row["peak_rss_mb"], color="tab:blue", ls=":", lw=1)
    left.set_xlabel("minutes into tfformer-train")
    left.set_ylabel("resident memory of the process tree (MB)")
    left.set_title("Multi30k training run (translate_de_en.json)")
    names = [r["name"] for r in rows]
    peaks = [r["peak_rss_mb"] for r in rows]
    colors = [
        "tab:gray"
        if n == "import"
        else "tab:blue"
        if n == "train"
        else "tab:orange"
        if n.startswith("export")
        else "tab:green"
        for n in names
    ]
    right.barh(names[::-1], peaks[::-1], color=colors[::-1])
    for y, value in enumerate(peaks[::-1]):
        right.text(value, y, f" {value:.0f}", va="center", fontsize=8)
    right.set_xlabel("peak resident memory (MB, /usr/bin/time -v)")
    right.set_title("Peak of each command")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"Wrote {path}")


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--run", default=None, help="run directory (default: temp)")
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--output", default="bench/results/memory_de_en.json")
    args = parser.parse_args()
    if not os.path.isdir(DATA):
        raise SystemExit(f"needs {DATA} (Multi30k); run from the repository root")
    if not shutil.which("/usr/bin/time"):
        raise SystemExit("needs /usr/bin/time (GNU time)")
    work = tempfile.mkdtemp(prefix="tfformer_memory_")
    run = args.run or os.path.join(work, "run")
    sources = os.path.join(work, "sources.txt")
    with open(sources, "w", encoding="utf-8") as f:
        f.write(
            "\n".join(
                common.first_lines(f"{DATA}/test_2016_flickr.de.gz", args.sentences)
            )
        )
    calibration = os.path.join(work, "calibration.txt")
    with open(calibration, "w", encoding="utf-8") as f:
        f.write("\n".join(common.first_lines(f"{DATA}/train.de.gz", 200)))
    python = sys.executable
    rows = [
        measured(
            "import",
            [python, "-c", "import tensorflow, keras, tfformer.training.trainer"],
        )
    ]
    if not os.path.isfile(os.path.join(run, "model.keras")):
        rows.append(
            measured(
                "train",
                [
                    shutil.which("tfformer-train"),
                    "--config",
                    "training/configs/translate_de_en.json",
                    "--set",
                    f"train.output_dir={run}",
                    "--set",
                    f"train.time_budget_minutes={args.minutes}",
                ],
            )
        )
    export = shutil.which("tfformer-export")
    saved_model = os.path.join(work, "saved_model")
    rows.append(
        measured(
            "export saved_model",
            [
                export,
                "--checkpoint",
                run,
                "--format",
                "saved_model",
                "--out",
                saved_model,
            ],
        )
    )
    tflite = {}
    for quantize in QUANTIZATIONS:
        out = os.path.join(work, f"tflite_{quantize}")
        result = os.path.join(work, f"tflite_{quantize}.json")
        command = [export, "--checkpoint", run, "--format", "tflite", "--out", out]
        command += ["--quantize", quantize, "--result-json", result]
        if quantize == "full_int8":
            command += ["--representative-data", calibration]
        rows.append(measured(f"export tflite/{quantize}", command))
        with open(result, encoding="utf-8") as f:
            tflite[quantize] = json.load(f)["path"]
    if not os.path.isfile(os.path.join(saved_model, "saved_model.pb")):
        versions = [v for v in os.listdir(saved_model) if v.isdigit()]
        saved_model = os.path.join(saved_model, max(versions, key=int))
    rows.append(
        measured(
            "serve saved_model",
            [
                python,
                "-c",
                SERVE_SAVED_MODEL,
                saved_model,
                sources,
            ],
        )
    )
    device_tokenizer = os.path.abspath("export/runtimes/tokenizer.py")
    for quantize, path in tflite.items():
        rows.append(
            measured(
                f"serve tflite/{quantize}",
                [python, "-c", SERVE_TFLITE, path, sources, device_tokenizer],
            )
        )
    result = dict(
        minutes=args.minutes if any(r["name"] == "train" for r in rows) else None,
        sentences=args.sentences,
        rows=rows,
    )
    common.write_result(args.output, result)
    plot(rows, os.path.splitext(args.output)[0] + ".png")
    print(f"{'command':<22}{'peak MB':>9}{'seconds':>9}")
    for row in rows:
        print(f"{row['name']:<22}{row['peak_rss_mb']:>9.0f}{row['seconds']:>9.0f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
