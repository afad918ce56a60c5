"""bench/ as a package: every script parses, nothing can shadow a top-level
package, the shared helpers are defined once, and bench/common.py's pure
helpers give the values worked out by hand. Reads the scripts as text: no
script runs and nothing here imports TensorFlow."""

import ast
import gzip
import json
import os
import platform
import re
import subprocess
import sys

import pytest

from bench import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
# Modules the scripts import their shared helpers from.
SHARED = ("common.py", "callbacks.py", "peers.py")
# Top-level packages a bench/ file of the same name could shadow when its
# folder is on sys.path (as bench/export.py once shadowed export/).
TOP_LEVEL = {"export", "training", "tfformer", "tensorflow", "keras", "keras_hub"}


def bench_files():
    paths = []
    for folder, _, names in os.walk(BENCH):
        paths += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    return sorted(paths)


def scripts():
    """The benchmark scripts: bench/<group>/<name>.py, packages' inits aside."""
    return [
        p
        for p in bench_files()
        if os.path.dirname(os.path.dirname(p)) == BENCH
        and os.path.basename(p) != "__init__.py"
    ]


def parsed(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), filename=path)


def top_level_names(tree):
    """Names of the module-level functions and classes of `tree`."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def relative(path):
    return os.path.relpath(path, ROOT)


def test_the_groups_hold_the_scripts():
    groups = {os.path.basename(os.path.dirname(p)) for p in scripts()}
    assert groups == {"training_speed", "decoding_speed", "quality", "exports"}
    for group in groups:
        assert os.path.isfile(os.path.join(BENCH, group, "__init__.py")), group
    # bench/ itself holds the package and the shared modules, no script.
    top = {n for n in os.listdir(BENCH) if n.endswith(".py")}
    assert top == {"__init__.py", *SHARED}


def test_every_file_parses():
    for path in bench_files():
        parsed(path)  # a SyntaxError names the file and line


def test_no_file_or_folder_is_named_like_a_top_level_package():
    for path in bench_files():
        parts = os.path.splitext(os.path.relpath(path, BENCH))[0].split(os.sep)
        assert not TOP_LEVEL & set(parts), relative(path)


def test_no_script_redefines_a_shared_helper():
    shared = {
        name: top_level_names(parsed(os.path.join(BENCH, name))) for name in SHARED
    }
    assert {"timed", "machine", "write_result", "directory_bytes", "rounds"} <= (
        shared["common.py"]
    )
    for path in scripts():
        defined = top_level_names(parsed(path))
        for module, names in shared.items():
            assert not defined & names, (
                f"{relative(path)} defines {sorted(defined & names)}, "
                f"which bench/{module} defines: import it from there"
            )


def test_no_script_edits_sys_path():
    for path in bench_files():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                value = node.value
                assert not (isinstance(value, ast.Name) and value.id == "sys"), (
                    f"{relative(path)}:{node.lineno} uses sys.path; load a file "
                    "with common.load_script"
                )


def test_scripts_name_each_other_by_their_grouped_paths():
    # `bench/decode.py` (flat) is gone; `bench/decoding_speed/decode.py` or
    # `python -m bench.decoding_speed.decode` are the names that work.
    flat = re.compile(r"bench/(\w+)\.py")
    for path in bench_files():
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for name in flat.findall(line):
                    assert name + ".py" in SHARED, f"{relative(path)}:{number}"


def test_common_imports_no_tensorflow():
    code = (
        "import sys; from bench import common; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow'; "
        "assert 'keras' not in sys.modules, 'keras'"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_median_min_max():
    assert common.median_min_max([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    # An even count: the mean of the two middle values.
    assert common.median_min_max([4.0, 1.0, 10.0, 2.0]) == (3.0, 1.0, 10.0)


def test_latency_ms_percentiles():
    # 11 calls of 1..11 ms: median 6, 10th percentile 2, 90th 10 (linear).
    seconds = [ms / 1000 for ms in range(11, 0, -1)]
    latency = common.latency_ms(seconds)
    assert latency == pytest.approx({"median_ms": 6.0, "p10_ms": 2.0, "p90_ms": 10.0})
    # Between samples: 1, 2, 3, 4 ms -> 10th at 1 + 0.3 * 1 ms, 90th at 3.7.
    latency = common.latency_ms([0.004, 0.001, 0.003, 0.002])
    assert latency == pytest.approx({"median_ms": 2.5, "p10_ms": 1.3, "p90_ms": 3.7})


def test_spread_text():
    assert common.spread_text(1234.4, 1200.0, 1300.6) == "1234 (1200-1301)"
    assert common.spread_text(0.5, 0.25, 0.75, digits=2) == "0.50 (0.25-0.75)"


def test_rounds_alternate_the_order():
    assert list(common.rounds(("a", "b", "c"), 3)) == [
        (0, ["a", "b", "c"]),
        (1, ["c", "b", "a"]),
        (2, ["a", "b", "c"]),
    ]
    # A dict's keys, as the scripts pass their contenders.
    assert list(common.rounds({"x": 1, "y": 2}, 2)) == [
        (0, ["x", "y"]),
        (1, ["y", "x"]),
    ]
    assert list(common.rounds(["a"], 0)) == []


def test_alternating_seconds_times_each_call_once_a_round(monkeypatch):
    calls = []
    clock = iter(range(100))
    monkeypatch.setattr(common.time, "perf_counter", lambda: float(next(clock)))
    times = common.alternating_seconds(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3
    )
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert times == {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0]}


def test_timed_each_calls_once_per_item_after_a_warmup():
    calls = []
    outputs, seconds = common.timed_each(calls.append, [1, 2], warmup=True)
    assert calls == [1, 1, 2]
    assert outputs == [None, None]
    assert len(seconds) == 2 and all(s >= 0 for s in seconds)


def test_directory_bytes(tmp_path):
    # A SavedModel's shape: files at the top and in a nested folder.
    (tmp_path / "saved_model.pb").write_bytes(b"x" * 10)
    (tmp_path / "fingerprint.pb").write_bytes(b"f" * 3)
    (tmp_path / "variables").mkdir()
    (tmp_path / "variables" / "variables.index").write_bytes(b"i" * 5)
    (tmp_path / "variables" / "variables.data").write_bytes(b"y" * 32)
    (tmp_path / "assets").mkdir()
    assert common.directory_bytes(tmp_path) == 10 + 3 + 5 + 32
    assert common.directory_bytes(tmp_path / "variables") == 37
    assert common.directory_bytes(tmp_path / "assets") == 0


def test_first_lines(tmp_path):
    path = tmp_path / "text.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("eins\nzwei\ndrei\n")
    assert common.first_lines(path, 2) == ["eins", "zwei"]


def test_write_json_is_indented_utf8_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "new" / "result.json"
    common.write_json(str(path), {"text": "Straße", "rows": [1, 2]})
    assert path.read_text(encoding="utf-8") == (
        '{\n  "text": "Straße",\n  "rows": [\n    1,\n    2\n  ]\n}\n'
    )
    assert os.listdir(path.parent) == ["result.json"]


def test_write_result_stamps_command_machine_and_date(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--repeats", "3", "a b"])
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    path = tmp_path / "result.json"
    common.write_result(str(path), {"rows": [{"tokens_per_second": 10.5}]})
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    assert result["rows"] == [{"tokens_per_second": 10.5}]
    assert result["command"].endswith(" --repeats 3 'a b'")
    assert result["command"].startswith("python ")
    machine = result["machine"]
    assert machine["cpus"] == os.cpu_count()
    assert machine["python"] == sys.version.split()[0]
    assert machine["flags"] == {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}
    assert {"cpu_model", "tensorflow", "keras", "keras_hub"} <= set(machine)
    # Every CPU tfformer runs on lists SSE's successors; on Linux, AVX among them.
    if os.path.exists("/proc/cpuinfo") and platform.machine() == "x86_64":
        assert "avx" in machine["cpu_features"], machine["cpu_features"]
    assert machine["cpu_features"] == sorted(machine["cpu_features"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", result["date"])


def test_load_script_leaves_sys_path_alone(tmp_path):
    (tmp_path / "classify.py").write_text("LABEL = 'positive'\n")
    before, loaded = list(sys.path), sys.modules.get("classify")
    module = common.load_script(str(tmp_path / "classify.py"))
    assert module.LABEL == "positive"
    # (Another test in this worker may have left a "classify" module there.)
    assert sys.path == before and sys.modules.get("classify") is loaded


def test_the_derived_t_test_equals_students_closed_forms():
    """`bench.quality.derived`'s p against Student's t in closed form (one
    and two degrees of freedom), and its paired t against a hand computation."""
    import math

    from bench.quality.derived import paired_t, student_t_two_sided_p

    for t in (0.3, 2.9, 12.0):
        assert student_t_two_sided_p(t, 1) == pytest.approx(
            1 - 2 / math.pi * math.atan(t), abs=1e-6
        )
        assert student_t_two_sided_p(-t, 2) == pytest.approx(
            1 - t / math.sqrt(t * t + 2), abs=1e-6
        )
    # Gains 1, 2, 3 points: mean 2, sd 1, t = 2 / (1 / sqrt 3).
    result = paired_t([0.51, 0.62, 0.73], [0.50, 0.60, 0.70])
    assert result["gains_points"] == pytest.approx([1, 2, 3])
    assert result["t"] == pytest.approx(2 * math.sqrt(3))


def test_the_cct_shares_are_the_hand_counts():
    """CCT-4/3x2 at 32x32: convolutions 32^2 27 64 and 16^2 576 128
    multiply-accumulates; 64 tokens through 4 blocks of width 128 (MLP 128):
    64 (4 128^2 + 2 128^2) + 2 64^2 128 each; the rest: 64 positions, the
    final LayerNorm, the pooling's score (129) and the 10-class head, whose
    work is the pooling's scores and weighted sum (64 128 each) and the
    head's 128 10."""
    from bench.quality.cifar10_budget import model_shares
    from tfformer.models import from_preset

    model = from_preset("cct_4_3x2", image_size=32, num_classes=10)
    shares = model_shares(model, 32)
    tokenizer, blocks = shares["tokenizer"], shares["encoder_blocks"]
    assert tokenizer["parameters"] == 27 * 64 + 576 * 128
    assert tokenizer["macs"] == 32 * 32 * 27 * 64 + 16 * 16 * 576 * 128
    assert blocks["macs"] == 4 * (64 * 6 * 128 * 128 + 2 * 64 * 64 * 128)
    assert blocks["parameters"] == 4 * (6 * 128 * 128 + 10 * 128)
    rest = shares["rest"]
    assert rest["parameters"] == 64 * 128 + 2 * 128 + 129 + 10 * 128 + 10
    assert rest["macs"] == 2 * 64 * 128 + 128 * 10
    assert round(tokenizer["mac_share"], 3) == 0.413
