"""What a run's precision runs on: the matmul kernels TensorFlow gives each
precision and compile mode on this CPU, and what to expect of them, said
once when training starts (`kernel_report`).

The expectations are measurements on an AVX512_BF16 CPU without AMX
(BENCHMARKS.md, "The matmul peak per precision" and "Training recipes per
precision"): on CPU, XLA runs bfloat16 matmuls no faster than float32;
TensorFlow's graph mode runs them through oneDNN, about 2x float32's matmul
rate with AVX512_BF16 (AMX tiles are faster still, not measured here), and
slower than float32 on CPUs without such units. A precision that this CPU
cannot run fast still trains; the report says so.
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


def onednn_takes(precision, flags):
    """Whether TensorFlow 2.21's oneDNN kernels take `precision` on a CPU
    with `flags` (`IsDataTypeSupportedByOneDNNOnThisCPU`); elsewhere its
    graph runs them through Eigen. bfloat16 needs AVX512F or AVX_NE_CONVERT;
    float16 AVX512BW with AVX512_FP16 or AMX_FP16, or AVX_NE_CONVERT."""
    if precision == "mixed_bfloat16":
        return bool(flags & {"avx512f", "avx_ne_convert"})
    if precision == "mixed_float16":
        return "avx_ne_convert" in flags or (
            "avx512bw" in flags and bool(flags & {"avx512_fp16", "amx_fp16"})
        )
    return True


def kernel_report(precision, xla, flags, onednn=True):
    """One paragraph for the run's log: which kernels `precision`'s matmuls
    run on under XLA (`xla`) or graph mode on a CPU with `flags` (empty:
    unknown), and what to expect of them against float32."""
    units = bfloat16_units(flags)
    # The bfloat16 path that pays off here: graph mode, oneDNN, bfloat16 units.
    fast_bfloat16 = onednn and bool(units)
    if onednn and onednn_takes(precision, flags):
        graph = "oneDNN"
    elif onednn:
        graph = "Eigen (TensorFlow's oneDNN does not take it on this CPU)"
    else:
        graph = "Eigen (TF_ENABLE_ONEDNN_OPTS=0)"
    path = "compiled by XLA" if xla else "through " + graph
    if not flags:
        unknown = " This CPU's features are unknown (no flags in /proc/cpuinfo)."
    else:
        unknown = ""
    if precision == "float32":
        text = f"Kernels: float32 matmuls {path}.{unknown}"
        if fast_bfloat16:
            text += (
                f" This CPU has bfloat16 units ({units}): "
                "train.precision=mixed_bfloat16 with train.jit_compile=false "
                "may train faster (docs/train.md, Precision and XLA)."
            )
        return text
    if precision == "mixed_float16":
        has = sorted(f.upper() for f in flags & {"avx512_fp16", "amx_fp16"})
        return (
            f"Kernels: float16 matmuls {path} (this CPU's float16 units: "
            f"{', '.join(has) or 'none'}).{unknown} tfformer has not measured "
            "float16 on CPU; float32 or mixed_bfloat16 is the measured choice."
        )
    # mixed_bfloat16
    if xla:
        text = (
            "Kernels: bfloat16 matmuls compiled by XLA, which on CPU runs them "
            "about as fast as float32 (whole steps measured at 0.87-1.04x "
            f"float32 under XLA).{unknown}"
        )
        if fast_bfloat16:
            text += (
                " train.jit_compile=false runs them through oneDNN on this "
                f"CPU's {units}."
            )
        return text
    if fast_bfloat16 and units == "AMX tiles":
        return (
            "Kernels: bfloat16 matmuls through oneDNN on AMX tiles: expect "
            "more than AVX512_BF16's 2x float32's matmul rate (not measured "
            "by tfformer); the whole step gains less (its other operations "
            "run unfused in graph mode)."
        )
    if fast_bfloat16:
        return (
            "Kernels: bfloat16 matmuls through oneDNN with AVX512_BF16 (no AMX): "
            "expect about 2x float32's matmul rate; measured on whole steps, "
            "1.07-1.14x float32 under XLA at d_model 192-256 and slower at "
            "128 (BENCHMARKS.md)."
        )
    return (
        f"Kernels: bfloat16 matmuls {path}, without bfloat16 units "
        f"(AVX512_BF16 or AMX) on this CPU.{unknown} Expect them slower than "
        "float32's; the run trains all the same."
    )


def say_kernels(model, precision, strategy, progress=print):
    """Tells `progress` the `kernel_report` of a compiled Keras `model` (its
    resolved `jit_compile`) when all of `strategy`'s devices are CPUs; says
    nothing for a run on accelerators (their kernels are not judged here)."""
    devices = strategy.extended.worker_devices
    if devices and all("DEVICE:CPU:" in d.upper() for d in devices):
        xla = bool(model.jit_compile)
        progress(kernel_report(precision, xla, cpu_flags(), onednn_enabled()))
