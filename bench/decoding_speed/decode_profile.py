"""Where a plain-graph decoding step goes: TensorFlow's profiler over one
greedy decode of bench/decoding_speed/decode.py's model, time per op type.

XLA compiles the whole loop into one program, which the profiler shows as
one op, so only the plain-graph mode (`jit_compile=False`, the SavedModel's
default) is broken down here. The tool reads the profile with xprof, which
is not a tfformer dependency: `pip install xprof` (in a virtual environment
of its own, with `--system-site-packages`, keeps it apart).

Reported per batch size: self time per op type in ms per decoding step, its
share, and the ops of the five costliest types.

Usage: `python -m bench.decoding_speed.decode_profile [--batches 1,32] [--output
bench/results/decode_profile.json]`.
"""

import collections
import glob
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bench import common
from bench.decoding_speed.decode import build_tfformer, default_sizes, tfformer_decoder


def op_stats(logdir):
    """Rows of xprof's framework op statistics for the profile in `logdir`."""
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:
        sys.exit(
            "bench/decoding_speed/decode_profile.py needs xprof: pip install xprof"
        )
    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        paths, "framework_op_stats", {"tqx": "out:csv"}
    )
    table = json.loads(data)
    table = table[0] if isinstance(table, list) else table
    names = [column["id"] for column in table["cols"]]
    rows = [
        dict(zip(names, [cell["v"] for cell in row["c"]], strict=True))
        for row in table["rows"]
    ]
    return [row for row in rows if row["type"] != "IDLE"]


def profile(decode, source, steps):
    for _ in range(3):  # trace, then warm
        decode(source).numpy()
    logdir = tempfile.mkdtemp(prefix="decode-profile-")
    tf.profiler.experimental.start(logdir)
    decode(source).numpy()
    tf.profiler.experimental.stop()
    rows = op_stats(logdir)
    by_type = collections.defaultdict(float)
    for row in rows:
        by_type[row["type"]] += row["total_self_time"]
    total = sum(by_type.values())
    types = [
        dict(
            type=name,
            ms_per_step=micros / 1e3 / steps,
            share=micros / total,
        )
        for name, micros in sorted(by_type.items(), key=lambda item: -item[1])
    ]
    top = {t["type"] for t in types[:5]}
    ops = [
        dict(
            type=row["type"],
            op=row["operation"],
            ms_per_step=row["total_self_time"] / 1e3 / steps,
        )
        for row in sorted(rows, key=lambda row: -row["total_self_time"])
        if row["type"] in top
    ]
    return dict(ms_per_step=total / 1e3 / steps, types=types, top_ops=ops[:20])


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--output", default="bench/results/decode_profile.json")
    args = parser.parse_args()
    sizes = default_sizes()
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    decode = tfformer_decoder(model, sizes, jit_compile=False)
    results = {}
    for batch in [int(b) for b in args.batches.split(",")]:
        source = np.random.default_rng(0).integers(
            4, sizes["vocabulary"], (batch, sizes["source_length"])
        )
        result = profile(decode, tf.constant(source, tf.int32), sizes["new_tokens"])
        results[f"batch_{batch}"] = result
        print(f"batch {batch}: {result['ms_per_step']:.2f} ms per step (profiled)")
        for t in result["types"][:10]:
            print(f"  {t['type']:<28}{t['ms_per_step']:7.3f} ms {t['share']:6.1%}")
    common.write_result(args.output, dict(sizes=sizes, mode="graph", profiles=results))


if __name__ == "__main__":
    main()
