"""Character-level language modelling on tinyshakespeare under a wall-clock
budget, in the units its users quote: validation loss in nats per character
(nanoGPT's figure) and bits per byte, on the fixed held-out tail.

The run is `tfformer-train` with the given config (static shapes, XLA,
resumable; `train.time_budget_minutes` set to `--minutes`, which counts the
whole invocation: data, compile, training and the epochs' validation). The
text is ASCII, so one byte is one character. Of the held-out last 10 %, the
first half is the validation split (scored here and during training) and
the second half the test split. Each split is cut into non-overlapping
windows of the context length and every token after a window's first is
scored, as in training and as nanoGPT's `estimate_loss` does over random
windows.

Usage:
  python -m bench.quality.gpt_quality
      [--config training/configs/shakespeare_gpt_10min.json] [--minutes 10]
      [--set key=value ...]
      [--output bench/results/gpt_shakespeare_10min.json] [--keep DIR]

Writes the JSON (model, steps, tokens seen, learning-rate schedule, training
seconds, validation and test nats per character) and copies the run's
training curves next to it as a PNG.
"""

import json
import os
import shutil
import tempfile

import tfformer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common
from tfformer.training.config import load_config
from tfformer.training.evaluation.language_model import score_text
from tfformer.training.tasks import get_task
from tfformer.training.trainer import train

CONFIG = os.path.join("training", "configs", "shakespeare_gpt_10min.json")


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--config", default=CONFIG)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--output",
        default=os.path.join("bench", "results", "gpt_shakespeare_10min.json"),
    )
    p.add_argument(
        "--keep",
        metavar="DIR",
        help="copy the trained run directory here (it is deleted otherwise)",
    )
    args = p.parse_args()
    if args.keep and os.path.exists(args.keep):
        p.error(f"--keep must not exist yet. Received: {args.keep}")
    if args.minutes <= 0:
        p.error(f"--minutes must be positive. Received: {args.minutes}")
    work = tempfile.mkdtemp(prefix="gpt_quality_")
    config = load_config(
        args.config,
        [
            *args.set,
            f"train.time_budget_minutes={args.minutes}",
            f"train.output_dir={os.path.join(work, 'run')}",
            "train.verbose=2",
        ],
    )
    result, seconds = common.timed(train, config)
    task = get_task(config.task)
    run = tfformer.load(config.train.output_dir)
    tokenizer = run.tokenizers["text"]
    raw = task.raw_splits(config.data)
    scores = {
        split: score_text(
            run.model,
            tokenizer,
            raw[split],
            config.data.max_length,
            progress=lambda *_: None,
        )
        for split in ("validation", "test")
    }
    steps = int(result.model.optimizer.iterations.numpy())
    t = config.train
    with open(os.path.join(config.train.output_dir, "metrics.json")) as f:
        epochs = json.load(f)
    results = dict(
        config=args.config,
        overrides=args.set,
        minutes_budget=args.minutes,
        invocation_seconds=round(seconds, 1),
        model=dict(
            **{
                k: v
                for k, v in task.model_sizes(config.model).items()
                if k != "max_sequence_length"  # the build uses the context
            },
            context=config.data.max_length,
            parameters=run.model.count_params(),
        ),
        optimizer=dict(
            name="Adam",
            schedule=t.schedule,
            learning_rate=t.learning_rate,
            warmup_steps=t.warmup_steps,
            schedule_steps=t.schedule_steps,
            final_learning_rate_fraction=t.final_learning_rate_fraction,
            beta_1=t.beta_1,
            beta_2=t.beta_2,
            epsilon=t.epsilon,
            clipnorm=t.clipnorm,
            batch_size=t.batch_size,
        ),
        steps=steps,
        tokens_seen=steps * t.batch_size * config.data.max_length,
        validation=scores["validation"],
        test=scores["test"],
        validation_nats_per_char=scores["validation"]["nats_per_token"],
        epochs=epochs,
    )
    del result
    common.write_result(args.output, results)
    curves = os.path.join(config.train.output_dir, "training_curves.png")
    if os.path.isfile(curves):
        shutil.copyfile(curves, os.path.splitext(args.output)[0] + ".png")
    print(
        json.dumps(
            {k: results[k] for k in ("steps", "tokens_seen", "validation", "test")}
        )
    )
    if args.keep:
        shutil.copytree(config.train.output_dir, args.keep)
        print(f"kept the run in {args.keep}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
