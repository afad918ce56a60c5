"""Where an XLA-compiled step's time goes, per op class: a profile, not an ablation.

XLA compiles a training step (or a whole decoding loop) into one CPU
program, which TensorFlow's op-level profile shows as one op. With
`--xla_cpu_enable_xprof_traceme=true` the CPU runtime also records each of
the program's thunks (a fusion, a matmul, a copy) in the profile. This
script reads those records from the profile's XSpace file, names each by
the TensorFlow op its HLO instruction came from (the optimized HLO, dumped
with `--xla_dump_to`), and sums their self time per op class: matmuls,
dropout (random bits and masks), softmax, layer norm, loss, optimizer,
embedding gathers, attention's other work (masks, cache reads), copies and
transposes, and the rest.

Targets (each library's contenders profiled one after the other, one pass
or decode each after two warm ones):
- `seq2seq`: the `translate_de_en` model and keras-hub's layers of the same
  sizes on bench/training_speed/train.py's bucketed batches (library against
  library; needs ../shared/data/multi30k);
- `gpt`: the `shakespeare_gpt` config against keras-hub's GPT2Backbone on
  bench/training_speed/train_families.py's batches;
- `decode`: bench/decoding_speed/decode.py's model, tfformer's `Generator` (greedy, XLA)
  and the weight-streaming floor (with the encoder's matmuls), at batch 1
  and 32.

The thunks of one program can run on both cores at once, so their times add
up to more than the wall time; shares are of the summed thunk time.
TensorFlow's XSpace protobuf module (`tensorflow.tsl.profiler.protobuf`) is
not public API: a missing one stops the script naming the version.

Usage: `python -m bench.training_speed.step_profile [--targets seq2seq,gpt,decode]
[--batches 12] [--output bench/results/step_profile.json]`.
"""

import collections
import glob
import os
import re
import sys
import tempfile

# XLA reads its flags once, when TensorFlow loads: set before the import.
os.environ["STEP_PROFILE_HLO"] = tempfile.mkdtemp(prefix="step-profile-hlo-")
os.environ["XLA_FLAGS"] = " ".join(
    [
        os.environ.get("XLA_FLAGS", ""),
        "--xla_cpu_enable_xprof_traceme=true",
        f"--xla_dump_to={os.environ['STEP_PROFILE_HLO']}",
        "--xla_dump_hlo_as_text",
    ]
).strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bench import common

try:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
except ImportError:
    sys.exit(
        "bench/training_speed/step_profile.py reads profiles with "
        "tensorflow.tsl.profiler.protobuf.xplane_pb2 (TensorFlow 2.21 has it); "
        f"TensorFlow {tf.__version__} does not."
    )
DUMP = os.environ["STEP_PROFILE_HLO"]

# (class, test on the instruction's opcode, TensorFlow op type and op name,
# all lowercased), first match wins: a fused matmul counts as a matmul, the
# gradient of a dropout as dropout, the loss's log-softmax as loss.
CLASSES = (
    ("matmul", lambda op, kind, name: op == "dot" or kind in ("matmul", "einsum")),
    ("dropout", lambda op, kind, name: "dropout" in name or "random" in kind),
    ("loss", lambda op, kind, name: "loss" in name or "entropy" in name),
    ("softmax", lambda op, kind, name: "softmax" in name),
    ("layer norm", lambda op, kind, name: "norm" in name),
    (
        "optimizer",
        lambda op, kind, name: (
            "adam" in name or "optimizer" in name or "assign" in kind
        ),
    ),
    ("embedding", lambda op, kind, name: "embedding" in name or "gather" in kind),
    (
        "copies, transposes, splits",
        lambda op, kind, name: (
            op in ("copy", "transpose")
            or kind in ("transpose", "unpack", "split", "splitv")
        ),
    ),
    ("attention, other", lambda op, kind, name: "attention" in name),
)
# Thunks that only hold others (a `call` of an expanded random-number
# generator, a decoding loop): their bodies' thunks are counted, they are
# not, since a body's thunks may run on the other core while they wait.
CONTAINERS = ("call", "while", "conditional")


def hlo_instructions(path):
    """{instruction name: (opcode, op type, op name)} of an optimized HLO text
    dump, lowercased. A fusion carries its root op's names; one whose fused
    computation holds a dot gets the opcode `dot`. An instruction without
    names inside a called computation (a random-number generator that XLA
    expanded into a `call`) takes those of the instruction that calls it."""
    table, computation_of, caller, fused, has_dot = {}, {}, {}, {}, set()
    header = re.compile(r"^(?:ENTRY )?%([\w.\-]+) .*\{\s*$")
    # `%name = shape opcode(`, the shape a tuple `(a, b)` for some.
    pattern = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (?:\([^=]*?\)|\S+) ([\w\-]+)\(")
    computation = None
    for line in open(path, encoding="utf-8"):
        line = re.sub(r"/\*.*?\*/", "", line)  # tuples print /*index=5*/
        h = header.match(line)
        if h:
            computation = h.group(1)
            continue
        m = pattern.match(line)
        if not m:
            continue
        name, opcode = m.groups()
        if opcode == "dot":
            has_dot.add(computation)
        kind = re.search(r'op_type="([^"]*)"', line)
        op_name = re.search(r'op_name="([^"]*)"', line)
        table[name] = (
            opcode,
            kind.group(1).lower() if kind else "",
            op_name.group(1).lower() if op_name else "",
        )
        computation_of[name] = computation
        for called in re.findall(r"(?:to_apply|calls|body)=%([\w.\-]+)", line):
            if opcode == "fusion":
                fused[name] = called
            else:
                caller.setdefault(called, name)
    for name, (opcode, kind, op_name) in table.items():
        if opcode == "fusion" and fused.get(name) in has_dot:
            opcode = "dot"
        parent, seen = name, set()
        while not (kind or op_name) and computation_of.get(parent) in caller:
            if parent in seen:
                break
            seen.add(parent)
            parent = caller[computation_of[parent]]
            kind, op_name = table[parent][1:]
        table[name] = (opcode, kind, op_name)
    return table


def classify(opcode, kind, name):
    for cls, test in CLASSES:
        if test(opcode, kind, name):
            return cls
    return "other"


def fresh_modules(before):
    """{module name: optimized HLO dump path} of the programs XLA compiled
    since `before` (a set of paths): a bucketed pipeline compiles one per
    batch shape."""
    paths = set(glob.glob(os.path.join(DUMP, "*cpu_after_optimizations.txt")))
    modules = {}
    for path in paths - before:
        name = os.path.basename(path)
        name = re.sub(r"^module_\d+\.", "", name)
        modules[name.removesuffix(".cpu_after_optimizations.txt")] = path
    if not modules:
        raise RuntimeError("no optimized HLO was dumped for the profiled program")
    return modules


def thunk_self_times(logdir, tables):
    """{(module, instruction): self time in seconds} over the profile's thunk
    events (each names its HLO module and instruction) of the modules in
    `tables` ({module: hlo_instructions}), containers left out; time nested
    in another event of the same thread is taken out of that event's. Thunk
    events of those modules whose instruction is not in the dump count under
    (module, None)."""
    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.Counter()
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        module_stat = next(
            (k for k, v in stat_names.items() if v == "hlo_module"), None
        )
        for line in plane.lines:
            events = []
            for e in line.events:
                module = next(
                    (
                        stat_names.get(st.ref_value) or st.str_value
                        for st in e.stats
                        if st.metadata_id == module_stat
                    ),
                    None,
                )
                if module in tables:
                    name = names.get(e.metadata_id)
                    key = (module, name if name in tables[module] else None)
                    events.append((e.offset_ps, -(e.offset_ps + e.duration_ps), key))
            events.sort()  # by start; a parent before a child that starts with it
            stack = []  # [end, key, self time] of the enclosing events
            for start, negative_end, key in events:
                end = -negative_end
                while stack and stack[-1][0] <= start:
                    _, done, own = stack.pop()
                    totals[done] += own
                if stack:
                    stack[-1][2] -= end - start
                stack.append([end, key, end - start])
            for _, done, own in stack:
                totals[done] += own
    return {
        key: ps / 1e12
        for key, ps in totals.items()
        if key[1] is None or tables[key[0]][key[1]][0] not in CONTAINERS
    }


def profile(run, units):
    """Profiles one call of `run` (already compiled and warm); returns the
    profile's folder and the wall seconds per unit (batch or decoding step)."""
    logdir = tempfile.mkdtemp(prefix="step-profile-")
    tf.profiler.experimental.start(logdir)
    _, wall = common.timed(run)
    tf.profiler.experimental.stop()
    return logdir, wall / units


def profiled(label, run, units):
    """Compiles and warms `run`, profiles it, and returns its row."""
    before = set(glob.glob(os.path.join(DUMP, "*cpu_after_optimizations.txt")))
    run()
    tables = {m: hlo_instructions(p) for m, p in fresh_modules(before).items()}
    run()
    logdir, wall = profile(run, units)
    classes, other = collections.Counter(), collections.Counter()
    for (module, name), seconds in thunk_self_times(logdir, tables).items():
        if name is None:
            classes["not in the HLO dump"] += seconds / units
            continue
        cls = classify(*tables[module][name])
        classes[cls] += seconds / units
        if cls == "other":  # summed over the modules (batch shapes)
            other[(name, *tables[module][name][1:])] += seconds / units * 1e3
    total = sum(classes.values())
    print(f"{label}: wall {wall * 1e3:.2f} ms, thunks {total * 1e3:.2f} ms per unit")
    for cls, seconds in classes.most_common():
        print(f"  {cls:<28}{seconds * 1e3:9.3f} ms {seconds / total:7.1%}")
    other = [(ms, *key) for key, ms in other.most_common(8)]
    for ms, name, kind, op_name in other:
        print(f"    other: {ms:8.3f} ms {name} ({kind} {op_name[:70]})")
    return dict(
        contender=label,
        wall_ms_per_unit=wall * 1e3,
        thunk_ms_per_unit=total * 1e3,
        ms_per_unit={cls: s * 1e3 for cls, s in classes.most_common()},
        largest_other=[
            dict(instruction=n, ms=ms, op_type=k, op_name=o) for ms, n, k, o in other
        ],
    )


def seq2seq_runs(batches):
    from bench.training_speed.train import CONFIG, subset
    from bench.training_speed.train import contenders as train_contenders
    from tfformer.training.config import load_config
    from tfformer.training.trainer import build_dataset

    config = load_config(CONFIG, overrides=["train.ema_momentum=null"])
    if not os.path.exists(config.data.source_path.format(split="train")):
        print(f"Multi30k not found ({config.data.source_path}); seq2seq skipped.")
        return {}
    data = build_dataset(config, tempfile.mkdtemp(prefix="step-profile-data-"))
    pool = subset(data.examples["train"], batches * config.train.batch_size)
    entries = train_contenders(config, data, pool, "float32", 2048)
    runs = {}
    for (library, pipe), e in entries.items():
        if pipe == "bucketed":
            runs[f"seq2seq {library}"] = (
                lambda e=e: e["model"].fit(e["dataset"](), epochs=1, verbose=0),
                e["steps"],
            )
    return runs


def gpt_runs(batches):
    from bench.training_speed import train_families

    _, _, models, cache, _, _, _ = train_families.contenders(
        "gpt", batches, with_floor=False
    )
    return {
        f"gpt {library}": (
            lambda m=model: train_families.one_pass(m, cache),
            len(cache),
        )
        for library, model in models.items()
    }


def decode_runs():
    from bench.decoding_speed.decode import (
        build_tfformer,
        default_sizes,
        tfformer_decoder,
        weight_floor_decoder,
    )

    sizes = default_sizes()
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    rng = np.random.default_rng(0)
    runs = {}
    for batch in (1, 32):
        source = tf.constant(
            rng.integers(4, sizes["vocabulary"], (batch, sizes["source_length"])),
            tf.int32,
        )
        for label, decode in (
            ("tfformer", tfformer_decoder(model, sizes, True)),
            ("floor", weight_floor_decoder(model, sizes, True, encoder=True)),
        ):
            runs[f"decode batch {batch} {label}"] = (
                lambda d=decode, s=source: d(s).numpy(),
                sizes["new_tokens"],
            )
    return runs


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--targets", default="seq2seq,gpt,decode")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--output", default="bench/results/step_profile.json")
    args = parser.parse_args()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = sorted(set(targets) - {"seq2seq", "gpt", "decode"})
    if unknown:
        parser.error(f"--targets: unknown {unknown}; known: seq2seq, gpt, decode")
    rows = []
    for target in targets:
        if target == "seq2seq":
            runs = seq2seq_runs(args.batches)
        elif target == "gpt":
            runs = gpt_runs(args.batches)
        else:
            runs = decode_runs()
        for label, (run, units) in runs.items():
            rows.append(dict(profiled(label, run, units), target=target, units=units))
    common.write_result(
        args.output,
        dict(
            batches=args.batches,
            unit="training batch (seq2seq, gpt) or decoding step (decode)",
            rows=rows,
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
