"""The start-up report of which kernels a run's precision uses on this CPU."""

import pytest
import tensorflow as tf

from tfformer.training import precision
from tfformer.training.trainer import build_compiled_model, prepare_inputs

from .test_trainer import tiny_config

# Two CPUs' flag lines, trimmed: a Sapphire Rapids Xeon (AMX) and an EPYC
# with AVX512_BF16 but no AMX; and one with AVX2 only.
XEON = "fpu sse avx2 fma avx512f avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8"
EPYC = "fpu sse avx2 fma avx512f avx512_bf16 avx512_vnni"
AVX2 = "fpu sse avx2 fma"


def flags_file(tmp_path, flags):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: X\nflags\t\t: {flags}\n\n")
    return str(path)


def test_cpu_flags_reads_the_flags_line_and_nothing_else(tmp_path):
    assert precision.cpu_flags(flags_file(tmp_path, EPYC.upper())) == set(EPYC.split())
    assert precision.cpu_flags(str(tmp_path / "absent")) == set()


@pytest.mark.parametrize(
    "value, on",
    [(None, True), ("1", True), ("0", False), ("false", False), ("True", True)],
)
def test_onednn_follows_tensorflow_s_switch(value, on):
    environ = {} if value is None else {"TF_ENABLE_ONEDNN_OPTS": value}
    assert precision.onednn_enabled(environ) is on


# An AVX-512 CPU without bfloat16 units (oneDNN takes bfloat16, converting).
SKYLAKE = "fpu sse avx2 fma avx512f avx512bw avx512_vnni"


@pytest.mark.parametrize(
    "flags, xla, onednn, said, not_said",
    [
        # bfloat16 under XLA: no gain on CPU, and the way out where one is.
        (EPYC, True, True, ["compiled by XLA", "about as fast as float32",
                            "jit_compile=false runs them through oneDNN on this "
                            "CPU's AVX512_BF16 (no AMX)"], []),
        (EPYC, True, False, ["compiled by XLA"], ["jit_compile=false"]),
        (AVX2, True, True, ["compiled by XLA"], ["jit_compile=false"]),
        (XEON, False, True, ["oneDNN on AMX tiles", "not measured"], ["AVX512_BF16 ("]),
        (EPYC, False, True, ["oneDNN with AVX512_BF16 (no AMX)", "about 2x",
                             "1.07-1.14x"], ["AMX tiles"]),
        # TensorFlow's oneDNN takes bfloat16 only with AVX512F: Eigen below.
        (AVX2, False, True, ["through Eigen (TensorFlow's oneDNN does not take it",
                             "without bfloat16 units", "slower than float32",
                             "trains all the same"], ["oneDNN with", "unknown"]),
        (SKYLAKE, False, True, ["through oneDNN, without bfloat16 units",
                                "slower than float32"], ["Eigen"]),
        (EPYC, False, False, ["Eigen (TF_ENABLE_ONEDNN_OPTS=0)", "slower"],
         ["oneDNN with"]),
        ("", False, True, ["features are unknown", "slower than float32"], []),
    ],
)  # fmt: skip
def test_bfloat16_report_names_the_kernels_and_the_expectation(
    flags, xla, onednn, said, not_said
):
    text = precision.kernel_report("mixed_bfloat16", xla, set(flags.split()), onednn)
    for words in said:
        assert words in text
    for words in not_said:
        assert words not in text


def test_float32_report_points_at_bfloat16_only_where_it_would_be_fast():
    with_units = precision.kernel_report("float32", True, set(EPYC.split()))
    assert "float32 matmuls compiled by XLA" in with_units
    assert "train.precision=mixed_bfloat16" in with_units
    without = precision.kernel_report("float32", False, set(AVX2.split()))
    assert without == "Kernels: float32 matmuls through oneDNN."
    # With oneDNN off, bfloat16 in graph mode would run on Eigen: no hint.
    off = precision.kernel_report("float32", False, set(EPYC.split()), onednn=False)
    assert off == "Kernels: float32 matmuls through Eigen (TF_ENABLE_ONEDNN_OPTS=0)."
    unknown = precision.kernel_report("float32", True, set())
    assert "unknown" in unknown and "mixed_bfloat16" not in unknown


def test_float16_report_names_the_cpu_s_float16_units_and_kernels():
    sapphire = {"avx512f", "avx512bw", "avx512_fp16", "amx_fp16"}
    text = precision.kernel_report("mixed_float16", False, sapphire)
    assert "float16 matmuls through oneDNN" in text
    assert "float16 units: AMX_FP16, AVX512_FP16" in text
    assert "not measured" in text
    # This EPYC has no float16 units: TensorFlow's graph falls back to Eigen.
    epyc = precision.kernel_report("mixed_float16", False, set(EPYC.split()))
    assert "through Eigen" in epyc and "units: none" in epyc


@pytest.mark.parametrize(
    "jit_compile, flags, words",
    [
        ("false", AVX2, "without bfloat16 units"),
        ("false", EPYC, "oneDNN with AVX512_BF16"),
        ("true", EPYC, "compiled by XLA"),
        # Keras resolves "auto" to no XLA on a machine without accelerators.
        ("auto", EPYC, "oneDNN with AVX512_BF16"),
    ],
)
def test_a_run_says_its_kernels_when_its_model_is_built(
    tmp_path, monkeypatch, jit_compile, flags, words
):
    """The report reads the model's resolved compile mode and the machine's
    flags (a machine without bfloat16 units is simulated by its flags file),
    and the bfloat16 model is built all the same."""
    monkeypatch.setattr(precision, "FLAGS_FILE", flags_file(tmp_path, flags))
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    config = tiny_config(
        tmp_path, "train.precision=mixed_bfloat16", f"train.jit_compile={jit_compile}"
    )
    messages = []
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    inputs = prepare_inputs(config, strategy, lambda *_: None)
    model, _ = build_compiled_model(config, inputs, progress=messages.append)
    reports = [m for m in messages if m.startswith("Kernels:")]
    assert len(reports) == 1 and words in reports[0]
    assert model.jit_compile is (jit_compile == "true")
    assert model.backbone.decoder_blocks[0].compute_dtype == "bfloat16"


class FakeExtended:
    def __init__(self, devices):
        self.worker_devices = devices


class FakeStrategy:
    def __init__(self, devices):
        self.extended = FakeExtended(devices)


class FakeModel:
    jit_compile = False


@pytest.mark.parametrize(
    "devices, says",
    [
        (("/job:localhost/replica:0/task:0/device:CPU:0",), True),
        (("/job:worker/replica:0/task:0/device:CPU:0",) * 2, True),
        (("/job:localhost/replica:0/task:0/device:GPU:0",), False),
        (("/job:cpu/replica:0/task:0/device:TPU:0",), False),
        ((), False),
    ],
)
def test_only_runs_on_cpus_get_the_report(devices, says):
    messages = []
    precision.say_kernels(
        FakeModel(), "mixed_bfloat16", FakeStrategy(devices), messages.append
    )
    assert len(messages) == (1 if says else 0)
