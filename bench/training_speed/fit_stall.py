"""The time repeated `model.fit` calls spend outside their batches, with
tf.data's autotuning on (the default) and off, alternating.

Each call trains one pass over the same cached batches of the
`translate_de_en` model (bench/training_speed/train.py's tfformer/bucketed
contender). For each call: the batches (end of the first to the end of the last), the
first batch, and the rest of the call: before the first batch, and after
the last one until `fit` returns. The "after" part is where the stall was:
deleting the pass's iterator waited for autotuning's background thread.

Usage: `python -m bench.training_speed.fit_stall [--sentences 960] [--calls 8]
[--output bench/results/fit_stall.json]`
"""

import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras

from bench import common
from bench.training_speed.train import CONFIG, bucketed, cached, subset
from tfformer.training.config import load_config
from tfformer.training.trainer import build_dataset, build_model, compile_model


class Phases(keras.callbacks.Callback):
    """When the call began training, its batches ended, and training ended."""

    def on_train_begin(self, logs=None):
        self.begin, self.ends = time.perf_counter(), []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())

    def on_train_end(self, logs=None):
        self.end = time.perf_counter()


def one_call(model, dataset):
    phases = Phases()
    called = time.perf_counter()
    model.fit(dataset, epochs=1, verbose=0, callbacks=[phases])
    returned = time.perf_counter()
    return dict(
        whole=returned - called,
        first_batch=phases.ends[0] - phases.begin,
        batches=phases.ends[-1] - phases.ends[0],
        before=phases.begin - called,
        after=returned - phases.ends[-1],
    )


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--sentences", type=int, default=960)
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--output", default="bench/results/fit_stall.json")
    args = p.parse_args()
    config = load_config(CONFIG, overrides=["train.ema_momentum=null"])
    if not os.path.exists(config.data.source_path.format(split="train")):
        print(f"Multi30k not found ({config.data.source_path}); nothing to measure.")
        return 0
    data = build_dataset(config, tempfile.mkdtemp(prefix="bench-stall-"))
    pool = subset(data.examples["train"], args.sentences)
    dataset, steps = bucketed(pool, data, config.train.batch_size)
    make, _, _ = cached(dataset, steps)
    datasets = {"off": make, "on": lambda: make(autotune=True)}
    keras.utils.set_random_seed(0)
    model = compile_model(build_model(config, data), config)
    began = time.perf_counter()
    model.fit(make(), epochs=1, verbose=0)
    print(f"compiled in {time.perf_counter() - began:.0f} s ({steps} batches)")
    calls = {"on": [], "off": []}
    for i in range(2 * args.calls):
        autotune = ("on", "off")[i % 2]
        call = one_call(model, datasets[autotune]())
        calls[autotune].append(call)
        print(
            f"  autotune {autotune:<3}: whole {call['whole']:.2f} s, batches "
            f"{call['batches']:.2f} s, after the last batch {call['after']:.2f} s",
            flush=True,
        )
    summary = {}
    for autotune, rows in calls.items():
        after = [r["after"] for r in rows]
        summary[autotune] = dict(
            calls=len(rows),
            after_median=statistics.median(after),
            after_max=max(after),
            calls_after_over_1s=sum(a > 1 for a in after),
            whole_median=statistics.median(r["whole"] for r in rows),
            batches_median=statistics.median(r["batches"] for r in rows),
        )
        s = summary[autotune]
        print(
            f"autotune {autotune}: {s['calls_after_over_1s']}/{s['calls']} calls "
            f"waited > 1 s after their last batch (max {s['after_max']:.2f} s); "
            f"median whole call {s['whole_median']:.2f} s, batches "
            f"{s['batches_median']:.2f} s"
        )
    result = dict(
        sentences=args.sentences,
        steps=steps,
        calls=calls,
        summary=summary,
    )
    common.write_result(args.output, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
