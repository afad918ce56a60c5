"""The start-up report of which kernels a run's precision uses on this CPU."""

import pytest

from tfformer.training import precision
from tfformer.training.distribution.strategy import build_strategy
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


@pytest.mark.parametrize(
    "flags, xla, onednn, said, not_said",
    [
        # bfloat16 under XLA: no gain on CPU, and the way out.
        (EPYC, True, True, ["compiled by XLA", "no faster than float32",
                            "jit_compile=false", "AVX512_BF16 (no AMX)"], []),
        (XEON, False, True, ["oneDNN on AMX tiles", "several times"], ["AVX512"]),
        (EPYC, False, True, ["oneDNN with AVX512_BF16 (no AMX)", "about 2x"],
         ["AMX tiles"]),
        (AVX2, False, True, ["neither AMX nor AVX512_BF16", "slower than float32",
                             "trains all the same"], []),
        (EPYC, False, False, ["Eigen (TF_ENABLE_ONEDNN_OPTS=0)", "slower"], []),
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


def test_float32_report_points_at_bfloat16_only_where_the_cpu_has_units():
    with_units = precision.kernel_report("float32", True, set(EPYC.split()))
    assert "float32 matmuls compiled by XLA" in with_units
    assert "train.precision=mixed_bfloat16" in with_units
    without = precision.kernel_report("float32", False, set(AVX2.split()))
    assert without == "Kernels: float32 matmuls through oneDNN."


def test_float16_report_names_the_cpu_s_float16_units():
    text = precision.kernel_report("mixed_float16", False, {"avx512_fp16"})
    assert "float16 units: AVX512_FP16" in text
    assert "not measured" in text
    assert "units: none" in precision.kernel_report("mixed_float16", True, set())


@pytest.mark.parametrize(
    "jit_compile, flags, words",
    [
        ("false", AVX2, "neither AMX nor AVX512_BF16"),
        ("false", EPYC, "oneDNN with AVX512_BF16"),
        ("true", EPYC, "compiled by XLA"),
    ],
)
def test_a_run_says_its_kernels_when_its_model_is_built(
    tmp_path, monkeypatch, jit_compile, flags, words
):
    """The report reads the model's resolved compile mode and the machine's
    flags (a machine without bfloat16 units is simulated by its flags file),
    and the bfloat16 model is built all the same."""
    monkeypatch.setattr(precision, "FLAGS_FILE", flags_file(tmp_path, flags))
    config = tiny_config(
        tmp_path, "train.precision=mixed_bfloat16", f"train.jit_compile={jit_compile}"
    )
    messages = []
    inputs = prepare_inputs(config, build_strategy("one_device"), lambda *_: None)
    model, _ = build_compiled_model(config, inputs, progress=messages.append)
    reports = [m for m in messages if m.startswith("Kernels:")]
    assert len(reports) == 1 and words in reports[0]
    assert model.jit_compile is (jit_compile == "true")
    assert model.backbone.decoder_blocks[0].compute_dtype == "bfloat16"
