"""CIFAR-10 with a ViT under a wall-clock budget: the ablation that chose
`training/configs/cifar10_vit.json`.

Each variant is `tfformer-train` with that config plus the variant's
overrides (static shapes, XLA), stopped by `train.time_budget_minutes`
(which counts the whole invocation: decoding the images, compiling,
training and each epoch's validation on the 5,000 held-out training
images). Before each run, 30 training steps measure the variant's images/s
(batch size over the median step time) so that its cosine schedule ends
at the budget (`train.schedule_steps`).
The figure is the accuracy on the 10,000 CIFAR-10 test images, evaluated
once at the end. The input pipeline's own images/s (augmentation and
batching, no model) is measured once and reported apart.

Usage:
  python -m bench.quality.vit_cifar [--minutes 10] [--variants a,b,...]
      [--output bench/results/cifar10_vit_ablation.json]

Variants run one after another (never alongside other work: 2 cores).
"""

import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

from bench import common
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task
from tfformer.training.trainer import build_dataset, build_model, compile_model, train

CONFIG = os.path.join("training", "configs", "cifar10_vit.json")
VARIANTS = {
    "L4_d128": ["model.num_layers=4"],
    "L6_d128": ["model.num_layers=6"],
    "L8_d128": ["model.num_layers=8"],
    "p8_L6_d192": [
        "model.num_layers=6",
        "model.patch_size=8",
        "model.hidden_dim=192",
        "model.num_heads=3",
        "model.intermediate_dim=384",
    ],
    "L6_d256": [
        "model.num_layers=6",
        "model.hidden_dim=256",
        "model.intermediate_dim=512",
    ],
    "L4_d128_mix": [
        "model.num_layers=4",
        "data.mixup_alpha=0.8",
        "data.cutmix_alpha=1.0",
    ],
    "L4_d128_ema": ["model.num_layers=4", "train.ema_momentum=0.999"],
    "L4_d128_noaug": [
        "model.num_layers=4",
        "data.crop_padding=0",
        "data.horizontal_flip=false",
    ],
}


class StepTimes(keras.callbacks.Callback):
    """Wall seconds of each training batch."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_train_batch_begin(self, batch, logs=None):
        self.began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self.began)


def images_per_second(config, data, build=build_model, steps=30, warmup=5):
    """Training images/s of `build(config, data)` (default: `config`'s
    model) on `data`, after compiling: the batch size over the median step
    time of `steps` steps (a median, so a moment of noise on the shared
    machine does not set a whole run's schedule)."""
    task = get_task(config.task)
    model = compile_model(build(config, data), config, 10_000)
    batch = config.train.batch_size
    stream = task.training_stream(
        data.examples["train"],
        batch_size=batch,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=10_000,
        seed=1,
    )
    model.fit(stream, steps_per_epoch=warmup, epochs=1, verbose=0)
    times = StepTimes()
    model.fit(stream, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[times])
    return batch / float(np.median(times.seconds))


def pipeline_images_per_second(config, data, batches=200):
    """The augmenting input pipeline alone (no model)."""
    task = get_task(config.task)
    stream = iter(
        task.training_stream(
            data.examples["train"],
            batch_size=config.train.batch_size,
            bucket_lengths=data.bucket_lengths,
            steps_per_epoch=10_000,
            seed=1,
        )
    )
    next(stream)
    began = time.perf_counter()
    for _ in range(batches):
        next(stream)
    return batches * config.train.batch_size / (time.perf_counter() - began)


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--config", default=CONFIG)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument(
        "--output",
        default=os.path.join("bench", "results", "cifar10_vit_ablation.json"),
    )
    args = p.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"unknown variants {unknown}; known: {list(VARIANTS)}", file=sys.stderr)
        return 2
    results = {
        "config": args.config,
        "minutes": args.minutes,
        "variants": {},
    }
    data = None
    root = tempfile.mkdtemp(prefix="vit_ablation_")
    try:
        for name in names:
            overrides = VARIANTS[name]
            probe = load_config(args.config, overrides)
            if data is None:
                data = build_dataset(probe, None, progress=lambda m: None)
                results["pipeline_images_per_second"] = pipeline_images_per_second(
                    probe, data
                )
                print(
                    f"input pipeline: {results['pipeline_images_per_second']:,.0f} "
                    "images/s",
                    flush=True,
                )
            keras.utils.set_random_seed(0)
            speed = images_per_second(probe, data)
            keras.backend.clear_session()
            # About 45 s of each budget go to decoding, compiling and
            # validation; the schedule ends where the budget does.
            steps = int((args.minutes * 60 - 45) * speed / probe.train.batch_size)
            steps = max(steps, probe.train.warmup_steps + 100)
            out = os.path.join(root, name)
            config = load_config(
                args.config,
                [
                    *overrides,
                    f"train.output_dir={out}",
                    f"train.time_budget_minutes={args.minutes}",
                    f"train.schedule_steps={steps}",
                    "train.verbose=2",
                    "train.checkpoint_every_steps=100000",
                ],
            )
            began = time.perf_counter()
            result = train(config, progress=print)
            m = result.metrics
            results["variants"][name] = {
                "overrides": overrides,
                "parameters": int(result.model.count_params()),
                "train_images_per_second": speed,
                "schedule_steps": steps,
                "steps": int(m["global_step"]),
                "epochs_seen": m["global_step"] * probe.train.batch_size / 45_000,
                "wall_seconds": time.perf_counter() - began,
                "val_accuracy": float(m.get("val_accuracy", np.nan)),
                "test_accuracy": float(m["test_accuracy"]),
                "test_loss": float(m["test_loss"]),
            }
            print(name, json.dumps(results["variants"][name]), flush=True)
            keras.backend.clear_session()
            common.write_result(args.output, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"Wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
