"""What a run's precision runs on: the matmul kernels TensorFlow gives each
precision and compile mode on this CPU, and what to expect of them, said
once when training starts (`kernel_report`).

The expectations are measurements (BENCHMARKS.md, "The matmul peak per
precision" and "Training recipes per precision"): on CPU, XLA runs bfloat16
matmuls no faster than float32; TensorFlow's graph mode runs them through
oneDNN, fast with AVX512_BF16 (about 2x float32's matmul rate) or AMX tiles,
and through a conversion to float32 on CPUs with neither. A precision that
this CPU cannot run fast still trains; the report says so.
"""

import os

FLAGS_FILE = "/proc/cpuinfo"


def cpu_flags(path=None):
    """The CPU's feature flags (`path`, default Linux's /proc/cpuinfo),
    lowercased; an empty set where that file is absent or unreadable."""
    try:
        with open(path or FLAGS_FILE, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].lower().split())
    except OSError:
        pass
    return set()


def onednn_enabled(environ=os.environ):
    """TensorFlow's oneDNN kernels are on unless TF_ENABLE_ONEDNN_OPTS is 0
    (its default on x86 Linux)."""
    return environ.get("TF_ENABLE_ONEDNN_OPTS", "1").strip().lower() not in (
        "0",
        "false",
    )


def bfloat16_units(flags):
    """The CPU's bfloat16 matmul units, by name ("" when it has none)."""
    if "amx_bf16" in flags:
        return "AMX tiles"
    if "avx512_bf16" in flags:
        return "AVX512_BF16 (no AMX)"
    return ""


def kernel_report(precision, xla, flags, onednn=True):
    """One paragraph for the run's log: which kernels `precision`'s matmuls
    run on under XLA (`xla`) or graph mode on a CPU with `flags`, and what
    to expect of them against float32."""
    units = bfloat16_units(flags)
    graph = "oneDNN" if onednn else "Eigen (TF_ENABLE_ONEDNN_OPTS=0)"
    if precision == "float32":
        text = f"float32 matmuls {'compiled by XLA' if xla else 'through ' + graph}."
        if units:
            text += (
                f" This CPU has bfloat16 units ({units}): "
                "train.precision=mixed_bfloat16 with train.jit_compile=false "
                "may train faster (docs/train.md, Precision and XLA)."
            )
        return "Kernels: " + text
    if precision == "mixed_float16":
        has = sorted(f.upper() for f in flags & {"avx512_fp16", "amx_fp16"})
        path = "compiled by XLA" if xla else "through " + graph
        return (
            f"Kernels: float16 matmuls {path} (this CPU's float16 units: "
            f"{', '.join(has) or 'none'}). tfformer has not measured float16 "
            "on CPU; float32 or mixed_bfloat16 is the measured choice."
        )
    # mixed_bfloat16
    if xla:
        return (
            "Kernels: bfloat16 matmuls compiled by XLA, which on CPU runs them "
            "no faster than float32: expect float32's speed or less. "
            "train.jit_compile=false runs them through oneDNN"
            + (f" on this CPU's {units}." if units else ".")
        )
    if not onednn:
        return (
            f"Kernels: bfloat16 matmuls through {graph}: "
            "expect them slower than float32's."
        )
    if units == "AMX tiles":
        return (
            "Kernels: bfloat16 matmuls through oneDNN on AMX tiles: expect "
            "several times float32's matmul rate; the whole step gains less "
            "(its other operations run unfused in graph mode)."
        )
    if units:
        return (
            "Kernels: bfloat16 matmuls through oneDNN with AVX512_BF16 (no AMX): "
            "expect about 2x float32's matmul rate; measured on whole steps, "
            "1.1-1.4x at d_model 192-256 and slower than float32 at 128 "
            "(BENCHMARKS.md)."
        )
    return (
        "Kernels: this CPU has neither AMX nor AVX512_BF16, so oneDNN runs "
        "bfloat16 matmuls through float32 with conversions: expect them "
        "slower than float32's. The run trains all the same."
    )


def say_kernels(model, precision, strategy, progress=print):
    """Tells `progress` the `kernel_report` of a compiled Keras `model` (its
    resolved `jit_compile`) when all of `strategy`'s devices are CPUs; says
    nothing for a run on accelerators (their kernels are not judged here)."""
    devices = strategy.extended.worker_devices
    if devices and all("CPU" in d.upper() for d in devices):
        xla = bool(model.jit_compile)
        progress(kernel_report(precision, xla, cpu_flags(), onednn_enabled()))
