"""What the benchmark scripts share: timing, medians with their spread,
alternating repeats, machine facts, subprocess runs and the result JSON.

It imports no TensorFlow or Keras: tests/test_bench.py checks it cheaply,
and a script that sets XLA flags before TensorFlow loads
(training_speed/step_profile.py) can import it first. Versions come from the
module when it is already imported, else from the installed package's
metadata. Keras callbacks live in `bench.callbacks`, keras-hub's models in
`bench.peers`.
"""

import argparse
import datetime
import gzip
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np

# The repository root (the folder that holds bench/).
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Environment variables that change what a benchmark measures: XLA's and
# oneDNN's options, thread pools, the Keras backend, visible GPUs.
FLAGS = (
    "XLA_FLAGS",
    "TF_XLA_FLAGS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "OMP_NUM_THREADS",
    "KERAS_BACKEND",
    "CUDA_VISIBLE_DEVICES",
)


# -- timing -------------------------------------------------------------------


# Training recipes: name -> (train.precision, train.jit_compile).
TRAINING_RECIPES = {
    "float32_xla": ("float32", "true"),
    "float32_graph": ("float32", "false"),
    "bfloat16_graph": ("mixed_bfloat16", "false"),
    "bfloat16_xla": ("mixed_bfloat16", "true"),
}


def timed(function, *args, **kwargs):
    """`(function(*args, **kwargs), wall seconds it took)`."""
    began = time.perf_counter()
    out = function(*args, **kwargs)
    return out, time.perf_counter() - began


def call_seconds(function, calls):
    """Wall seconds of each of `calls` calls of `function()`."""
    return [timed(function)[1] for _ in range(calls)]


def timed_each(function, items, warmup=False):
    """`function` on each item, one at a time: (outputs, seconds per item).
    `warmup` first calls it once on the first item, untimed."""
    if warmup:
        function(items[0])
    outputs, seconds = [], []
    for item in items:
        out, elapsed = timed(function, item)
        outputs.append(out)
        seconds.append(elapsed)
    return outputs, seconds


def latency_per_item(function, items):
    """`function` on each item, one at a time: (the outputs as one NumPy
    array, `latency_ms` of the calls)."""
    outputs, seconds = timed_each(function, items)
    return np.array(outputs), latency_ms(seconds)


def rounds(names, repeats):
    """`(r, order)` for each repeat r: `names` in order when r is even,
    reversed when odd, so that no contender always follows the same one."""
    names = list(names)
    for r in range(repeats):
        yield r, names if r % 2 == 0 else names[::-1]


def alternating_seconds(calls, repeats, label=""):
    """{name: [seconds of each round]} of `calls[name]()` (no arguments),
    timed in `repeats` rounds whose order alternates (`rounds`)."""
    times = {name: [] for name in calls}
    for repeat, order in rounds(calls, repeats):
        print(f"{label}round {repeat + 1}/{repeats}", flush=True)
        for name in order:
            times[name].append(timed(calls[name])[1])
    return times


# -- statistics ---------------------------------------------------------------


def median_min_max(values):
    """`(median, min, max)` of `values`: the figure and its spread."""
    values = list(values)
    return statistics.median(values), min(values), max(values)


def latency_ms(seconds):
    """Median and 10th-90th percentile of per-call seconds, in milliseconds."""
    ms = 1000 * np.asarray(seconds, np.float64)
    return {
        "median_ms": float(np.median(ms)),
        "p10_ms": float(np.percentile(ms, 10)),
        "p90_ms": float(np.percentile(ms, 90)),
    }


def spread_text(median, low, high, digits=0):
    """`"median (low-high)"` with `digits` decimals, as the tables print it."""
    return f"{median:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


# -- where it ran -------------------------------------------------------------


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), else what `platform` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cpu_features():
    """The CPU's vector and matrix extensions (/proc/cpuinfo's avx*, fma
    and amx* flags), sorted: two machines of one model name can differ."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return sorted(
                        f for f in flags if f.startswith(("avx", "amx")) or f == "fma"
                    )
    except OSError:
        pass
    return []


def package_version(module, distribution):
    """`module.__version__` if it is imported, else the installed
    distribution's version (None when it is not installed)."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__version__", None)
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine():
    """The facts a JSON result records about where it ran."""
    return dict(
        platform=platform.platform(),
        processor=platform.processor(),
        cpu_model=cpu_model(),
        cpu_features=cpu_features(),
        cpus=os.cpu_count(),
        python=sys.version.split()[0],
        tensorflow=package_version("tensorflow", "tensorflow"),
        keras=package_version("keras", "keras"),
        keras_hub=package_version("keras_hub", "keras-hub"),
        flags={name: os.environ[name] for name in FLAGS if name in os.environ},
    )


def script_name():
    """`python -m bench.<group>.<script>` for the running script."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return f"python -m {spec.name}" if spec else f"python {sys.argv[0]}"


def command_line():
    """The command that is running, as one would type it again."""
    return " ".join([script_name(), *map(shlex.quote, sys.argv[1:])])


def argument_parser(description):
    """An `ArgumentParser` whose usage line names the `-m` command."""
    return argparse.ArgumentParser(prog=script_name(), description=description)


# -- results ------------------------------------------------------------------


def write_json(path, data):
    """Writes `data` as indented JSON to `path` (its folder made if needed),
    atomically: a reader sees the old file or the new one, never half."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_result(path, result):
    """Writes a benchmark's result JSON with the command line, the machine
    and the date (UTC) that produced it."""
    stamped = dict(
        result,
        command=command_line(),
        machine=machine(),
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    write_json(path, stamped)
    print(f"Wrote {path}")


def directory_bytes(path):
    """Bytes of every file under `path` (an exported SavedModel's size)."""
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )


def first_lines(path, count):
    """The first `count` lines of a gzipped text file, without newlines."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(count)]


def load_script(path, name=None):
    """The Python file at `path` as a module, without touching sys.path: how
    the scripts load a runtime an export ships (`classify.py`, `generate.py`),
    which loads its own neighbours by path."""
    name = name or os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# -- subprocesses -------------------------------------------------------------


def run_command(argv):
    """Runs `argv` and returns its stdout; on failure exits with the end of
    its stderr."""
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def tfformer_export(argv):
    """`tfformer-export` with `argv`, in a process of its own (the TFLite
    converter leaks memory, tensorflow/tensorflow#122598)."""
    return run_command([sys.executable, "-m", "tfformer.export", *argv])


def saved_model_export(checkpoint, out):
    """Exports a run's SavedModel under `out`; returns its version folder."""
    tfformer_export(
        ["--checkpoint", checkpoint, "--format", "saved_model", "--out", out]
    )
    return os.path.join(out, sorted(os.listdir(out))[-1])


def tflite_export(checkpoint, quantize, out, calibration):
    """Exports a run's TFLite variant `quantize` ("none", "float16", "int8",
    "full_int8", "integer_only") into `out`, the integer ones calibrated on
    the lines of `calibration`; returns the model's path."""
    argv = ["--checkpoint", checkpoint, "--format", "tflite", "--out", out]
    if quantize != "none":
        argv += ["--quantize", quantize]
    if quantize in ("full_int8", "integer_only"):
        argv += ["--representative-data", calibration]
    tfformer_export(argv)
    name = "model.tflite" if quantize == "none" else f"model_{quantize}.tflite"
    return os.path.join(out, name)


def child_cpu_seconds():
    """User + system CPU seconds of the waited-for child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_logged(argv, log_path):
    """Runs `argv` with its output to `log_path`; returns its (wall seconds,
    CPU seconds); on failure exits naming the log."""
    began, cpu = time.perf_counter(), child_cpu_seconds()
    with open(log_path, "w") as log:
        code = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
    if code:
        sys.exit(f"{' '.join(argv)} failed ({code}); see {log_path}")
    return time.perf_counter() - began, child_cpu_seconds() - cpu
