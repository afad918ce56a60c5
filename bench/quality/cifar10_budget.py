"""CIFAR-10 test accuracy after a wall-clock budget: tfformer's ViT against
keras-hub's `ViTBackbone` (library against library), the keras.io "Image
classification with Vision Transformer" recipe (what users do today), a
small CNN (the question a user asks) and tfformer's CCT (the Transformer
that answers it).

Contenders (run one after another, never alongside other work: 2 cores):
- `tfformer`: `tfformer-train` with `training/configs/cifar10_vit.json`
  (our pipeline: images decoded once, random crop with 4-pixel padding and
  horizontal flip on the CPU side; AdamW, warmup + cosine, label smoothing
  0.1, XLA). Its cosine decays over the budget: with `--clock budget`
  (the default) on the wall clock itself (`train.schedule_clock=budget`:
  warmup by steps, then decay over the share of the budget left, so it
  reaches its floor at the budget whatever the machine's speed spells);
  with `--clock probe` over the steps a 20-step throughput probe predicts,
  as in `bench/quality/vit_cifar.py` (the 30-minute round of stop 28).
- `keras_hub`: keras-hub's `ViTBackbone` at the same sizes (patch size,
  depth, width, heads, MLP width, no dropout), a normalization layer with
  the same statistics in front and a linear head on the class token; the
  same pipeline, batches, optimizer, schedule, loss, XLA and budget.
- `keras_io`: the keras.io recipe as published (Khalid Salama, 2021;
  written here from its description): images resized to 72x72 inside the
  model, patches of 6 (144 tokens), 8 blocks of width 64 with 4 heads and
  MLP [128, 64], a [2048, 1024] MLP head on the flattened tokens, dropout
  0.1/0.5, augmentation layers in the model (normalization, resize, flip,
  rotation 0.02, zoom 0.2), AdamW at a constant 1e-3 (weight decay 1e-4),
  batch 256, `model.fit` on NumPy arrays with `validation_split=0.1`, and
  the weights of the best validation accuracy restored at the end. Its
  only change: the epochs stop at the budget. Keras's default compile
  (`jit_compile="auto"`, which Keras resolves to no XLA on a CPU-only
  machine).
- `cct`: `tfformer-train` with `training/configs/cifar10_cct.json`, the
  `tfformer` contender's pipeline, optimizer and schedule with the
  `cct_4_3x2` model (convolution tokenizer, attention pooling).
- `cnn`: six 3x3 convolutions with batch norm (32, 32, 64, 64, 128, 128,
  max-pooling after each pair), global average pooling and a linear head,
  on tfformer's pipeline, optimizer and schedule.

Each contender's figure is its accuracy on the 10,000 test images, scored
by the same NumPy argmax over its logits. Validation (the same 5,000
training images held out for all but `keras_io`, whose `validation_split`
takes the last 10 %) is not counted out of the budget: the budget is the
whole training invocation.

The tfformer and cct runs are kept in
~/.cache/tfformer/cifar10_{vit,cct}_<minutes>min[_seed<n>] (for
`tfformer-evaluate` and `bench/exports/image_export.py`).

`--seeds 0,1,2` runs every contender once per seed (`train.seed`: the
initial weights and any dropout; the held-out split, batch order and
augmentation draws stay `data.seed`'s), contenders alternating within a
seed (`keras_io` takes none: it runs for seed 0 only); seed 0's
results are keyed by the contender's name, the others' by `<name>_seed<n>`.
`--set` overrides the tfformer and cct configs (not the budget, its clock,
the seed or the output folder).

Usage:
  python -m bench.quality.cifar10_budget --minutes 30 [--contenders tfformer,keras_hub]
      [--clock budget|probe] [--seeds 0,1,2] [--set KEY=VALUE ...]
      [--output bench/results/cifar10_budget_30min.json] [--earlier-minutes 30]

`--earlier-minutes` (keras_io only) scores the recipe at a shorter budget
within the same run: its learning rate is constant and its augmentation
layers draw from Keras's seed generator, so a shorter run is this run's
beginning (see `EarlierCut`).
"""

import dataclasses
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
from bench.quality.vit_cifar import images_per_second
from tfformer.training.callbacks import TimeBudget, TrainingReport
from tfformer.training.config import load_config
from tfformer.training.tasks import get_task
from tfformer.training.tasks.image_classification import channel_statistics
from tfformer.training.trainer import build_dataset, compile_model, learning_rate, train

CONFIG = os.path.join("training", "configs", "cifar10_vit.json")
CCT_CONFIG = os.path.join("training", "configs", "cifar10_cct.json")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tfformer")
CONTENDERS = ("tfformer", "keras_hub", "keras_io", "cnn", "cct")
# About 45 s of each budget go to decoding, compiling and validation.
OVERHEAD_SECONDS = 45


def schedule_steps(minutes, speed, batch_size, floor):
    return max(int((minutes * 60 - OVERHEAD_SECONDS) * speed / batch_size), floor)


def test_accuracy(model, pixels, labels, batch_size=500):
    logits = np.concatenate(
        [
            keras.ops.convert_to_numpy(
                model(pixels[i : i + batch_size].astype("float32"), training=False)
            )
            for i in range(0, len(pixels), batch_size)
        ]
    )
    return float(np.mean(logits.argmax(-1) == labels))


def keras_hub_vit(config, data):
    import keras_hub

    task = get_task(config.task)
    sizes = task.model_sizes(config.model)
    size = config.data.image_size
    mean, std = channel_statistics(data.examples["train"].features["images"])
    images = keras.Input((size, size, 3), name="images")
    x = keras.layers.Normalization(mean=mean.tolist(), variance=(std**2).tolist())(
        images
    )
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(size, size, 3),
        patch_size=sizes["patch_size"],
        num_layers=sizes["num_layers"],
        num_heads=sizes["num_heads"],
        hidden_dim=sizes["hidden_dim"],
        mlp_dim=sizes["intermediate_dim"],
        dropout_rate=sizes.get("dropout", 0.0),
        attention_dropout=sizes.get("dropout", 0.0),
    )
    x = backbone(x)
    logits = keras.layers.Dense(data.num_classes, name="head")(x[:, 0, :])
    return keras.Model(images, logits, name="keras_hub_vit")


def small_cnn(config, data):
    size = config.data.image_size
    mean, std = channel_statistics(data.examples["train"].features["images"])
    images = keras.Input((size, size, 3), name="images")
    x = keras.layers.Normalization(mean=mean.tolist(), variance=(std**2).tolist())(
        images
    )
    for width in (32, 64, 128):
        for _ in range(2):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    logits = keras.layers.Dense(data.num_classes, name="head")(x)
    return keras.Model(images, logits, name="small_cnn")


def model_shares(model, image_size):
    """Parameters and multiply-accumulates per image of a tfformer image
    classifier, split into its tokenizer (the patch projection, or the
    convolutions: H W 9 c_in c_out each, at the resolution they run at),
    its encoder blocks (T (4 d^2 + 2 d f) for the projections and MLP, 2 T^2
    d for the attention scores and their mix) and the rest (positions,
    norms, pooling, head)."""
    backbone = model.backbone
    d, f = backbone.hidden_dim, backbone.intermediate_dim
    tokenizer = backbone.image_tokenizer
    if backbone.tokenizer == "patch":
        layers, size = [tokenizer.projection], image_size // backbone.patch_size
        macs = [size * size * int(np.prod(tokenizer.projection.kernel.shape))]
    else:
        layers, macs, size = tokenizer.convolutions, [], image_size
        for convolution in layers:
            macs.append(size * size * int(np.prod(convolution.kernel.shape)))
            size //= 2
    tokens = size * size + (1 if backbone.class_token else 0)
    block_macs = tokens * (4 * d * d + 2 * d * f) + 2 * tokens * tokens * d
    parts = {
        "tokenizer": (sum(layer.count_params() for layer in layers), sum(macs)),
        "encoder_blocks": (
            sum(block.count_params() for block in backbone.encoder_blocks),
            backbone.num_layers * block_macs,
        ),
    }
    total = model.count_params()
    rest = total - sum(p for p, _ in parts.values())
    # Attention pooling: T d for the scores, T d for the weighted sum.
    parts["rest"] = (
        rest,
        2 * d * (tokens if model.pooling == "attention" else 0) + d * model.num_classes,
    )
    all_macs = sum(m for _, m in parts.values())
    return {
        name: {
            "parameters": p,
            "parameter_share": p / total,
            "macs": m,
            "mac_share": m / all_macs,
        }
        for name, (p, m) in parts.items()
    }


def run_on_our_pipeline(build, config, data, minutes, clock):
    """Trains `build(config, data)` with tfformer's pipeline, optimizer,
    schedule and loss under the budget; returns (model, details)."""
    task = get_task(config.task)
    batch = config.train.batch_size
    speed = steps = None
    if clock == "probe":
        keras.utils.set_random_seed(0)
        speed = images_per_second(config, data, build)
        keras.backend.clear_session()
        steps = schedule_steps(minutes, speed, batch, config.train.warmup_steps + 100)
        # The config's own schedule_steps would win over the probe's count
        # (learning_rate takes train.schedule_steps first): replace it. Until
        # stop 29 it won, so keras_hub and cnn decayed over 9,500 steps.
        config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, schedule_steps=steps)
        )
    # The throughput probe is not counted, as for the tfformer contender.
    began = time.perf_counter()
    keras.utils.set_random_seed(config.train.seed)
    schedule = learning_rate(config, steps)
    model = compile_model(build(config, data), config, schedule=schedule)
    train_examples = data.examples["train"]
    per_epoch = len(train_examples) // batch
    stream = task.training_stream(
        train_examples,
        batch_size=batch,
        bucket_lengths=data.bucket_lengths,
        steps_per_epoch=per_epoch,
        seed=config.data.seed,
    )
    validation = task.evaluation_dataset(
        data.examples["validation"],
        batch_size=batch,
        bucket_lengths=data.bucket_lengths,
        repeat=True,
    )
    budget = TimeBudget(minutes - (time.perf_counter() - began) / 60, schedule=schedule)
    report = TrainingReport()
    model.fit(
        stream,
        epochs=1000,
        steps_per_epoch=per_epoch,
        validation_data=validation,
        validation_steps=-(-len(data.examples["validation"]) // batch),
        callbacks=[budget, report],
        verbose=2,
    )
    return model, {
        "curve": curve(report.report["epochs"]),
        "train_images_per_second": speed,
        "schedule_steps": steps,
        "schedule_clock": clock,
        "steps": int(model.optimizer.iterations.numpy()),
        "parameters": int(model.count_params()),
    }


def curve(epochs):
    """Validation accuracy after each epoch against the training minutes so
    far (validation time excluded, as `TrainingReport` counts it for every
    contender)."""
    minutes, points = 0.0, []
    for logs in epochs:
        minutes += logs["seconds"] / 60
        points.append([round(minutes, 3), logs.get("val_accuracy")])
    return points


def plot(results, path):
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, details in results["contenders"].items():
        points = [p for p in details.get("curve", []) if p[1] is not None]
        if points:
            x, y = [p[0] for p in points], [p[1] for p in points]
            label = f"{name} (test {100 * details['test_accuracy']:.1f} %)"
            ax.plot(x, [100 * v for v in y], marker=".", label=label)
    ax.set_xlabel("training minutes (validation excluded)")
    ax.set_ylabel("validation accuracy (%)")
    ax.set_title(f"CIFAR-10, {results['minutes']:g}-minute budget, 2 cores")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


class EarlierCut(keras.callbacks.Callback):
    """What the recipe gives had its budget been `minutes` (its learning rate
    is constant, so a shorter run is this run's beginning): at that mark,
    mid-epoch, the weights are validated as Keras validates a cut epoch,
    the best of them and of the epoch-end weights so far (by validation
    accuracy, the recipe's checkpoint rule) are scored on the test images,
    and training goes on with its own weights. The time this takes is
    added to the running `budget`."""

    def __init__(self, minutes, validation, test, budget):
        super().__init__()
        self.seconds = 60 * minutes
        self.validation, self.test, self.budget = validation, test, budget
        self.best = (-1.0, None)
        self.result = None

    def on_epoch_end(self, epoch, logs=None):
        if self.result is None and logs and logs["val_accuracy"] > self.best[0]:
            self.best = (float(logs["val_accuracy"]), self.model.get_weights())

    def on_train_batch_end(self, batch, logs=None):
        elapsed = time.perf_counter() - self.budget.started
        if self.result is not None or elapsed < self.seconds:
            return
        began = time.perf_counter()
        weights = self.model.get_weights()
        current = test_accuracy(self.model, *self.validation)
        best_val, best = max(self.best, (current, weights), key=lambda b: b[0])
        self.model.set_weights(best)
        self.result = {
            "minutes": self.seconds / 60,
            "steps": int(self.model.optimizer.iterations.numpy()),
            "best_val_accuracy": best_val,
            "test_accuracy": test_accuracy(self.model, *self.test),
        }
        self.model.set_weights(weights)
        self.budget.seconds += time.perf_counter() - began


def keras_io_recipe(data, minutes, test, earlier=None):
    """The keras.io ViT recipe, its own pipeline and settings, cut at the
    budget (and, with `earlier`, at that many minutes too: `EarlierCut`)."""
    from keras import layers, ops

    began = time.perf_counter()
    train_pixels = np.concatenate(
        [
            data.examples["train"].features["images"],
            data.examples["validation"].features["images"],
        ]
    )
    train_labels = np.concatenate(
        [data.examples["train"].labels, data.examples["validation"].labels]
    )
    image_size, patch_size, dim, heads, layers_count = 72, 6, 64, 4, 8
    num_patches = (image_size // patch_size) ** 2
    augmentation = keras.Sequential(
        [
            layers.Normalization(),
            layers.Resizing(image_size, image_size),
            layers.RandomFlip("horizontal"),
            layers.RandomRotation(factor=0.02),
            layers.RandomZoom(height_factor=0.2, width_factor=0.2),
        ],
        name="data_augmentation",
    )
    augmentation.layers[0].adapt(train_pixels.astype("float32"))

    class Patches(layers.Layer):
        def call(self, images):
            patches = ops.image.extract_patches(images, size=patch_size)
            return ops.reshape(
                patches, (ops.shape(patches)[0], num_patches, patch_size**2 * 3)
            )

    class PatchEncoder(layers.Layer):
        def __init__(self):
            super().__init__()
            self.projection = layers.Dense(dim)
            self.position = layers.Embedding(num_patches, dim)

        def call(self, patches):
            positions = ops.expand_dims(ops.arange(num_patches), 0)
            return self.projection(patches) + self.position(positions)

    def mlp(x, units, rate):
        for u in units:
            x = layers.Dense(u, activation=keras.activations.gelu)(x)
            x = layers.Dropout(rate)(x)
        return x

    inputs = keras.Input((32, 32, 3))
    x = PatchEncoder()(Patches()(augmentation(inputs)))
    for _ in range(layers_count):
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        h = layers.MultiHeadAttention(num_heads=heads, key_dim=dim, dropout=0.1)(h, h)
        x = layers.Add()([h, x])
        h = layers.LayerNormalization(epsilon=1e-6)(x)
        x = layers.Add()([mlp(h, [dim * 2, dim], 0.1), x])
    x = layers.LayerNormalization(epsilon=1e-6)(x)
    x = layers.Dropout(0.5)(layers.Flatten()(x))
    logits = layers.Dense(10)(mlp(x, [2048, 1024], 0.5))
    model = keras.Model(inputs, logits)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    checkpoint = os.path.join(tempfile.mkdtemp(), "best.weights.h5")
    budget = TimeBudget(minutes - (time.perf_counter() - began) / 60)
    # Keras's validation_split holds out the last 10 %, unshuffled.
    held = int(len(train_labels) * 0.1)
    validation = (train_pixels[-held:], train_labels[-held:])
    report = TrainingReport()
    cuts = []
    if earlier:
        cuts.append(
            EarlierCut(
                earlier - (time.perf_counter() - began) / 60, validation, test, budget
            )
        )
    history = model.fit(
        train_pixels.astype("float32"),
        train_labels,
        batch_size=256,
        epochs=100,
        validation_split=0.1,
        callbacks=[
            keras.callbacks.ModelCheckpoint(
                checkpoint,
                monitor="val_accuracy",
                save_best_only=True,
                save_weights_only=True,
            ),
            budget,
            report,
            *cuts,
        ],
        verbose=2,
    )
    if os.path.exists(checkpoint):
        model.load_weights(checkpoint)
    details = {
        "curve": curve(report.report["epochs"]),
        "steps": int(model.optimizer.iterations.numpy()),
        "epochs": len(history.history["loss"]),
        "parameters": int(model.count_params()),
        "best_val_accuracy": float(max(history.history.get("val_accuracy", [np.nan]))),
    }
    if cuts:
        details["earlier_cut"] = cuts[0].result
    return model, details


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--config", default=CONFIG)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--output")
    p.add_argument(
        "--clock",
        choices=("budget", "probe"),
        default="budget",
        help="what the cosine of our-pipeline contenders decays over: the "
        "budget's wall clock, or the steps a throughput probe predicts",
    )
    p.add_argument("--cct-config", default=CCT_CONFIG)
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides of the tfformer and cct contenders' configs",
    )
    p.add_argument("--seeds", default="0", help="comma-separated train.seed values")
    p.add_argument(
        "--earlier-minutes",
        type=float,
        help="keras_io only: also score the recipe as if cut at this budget",
    )
    args = p.parse_args()
    names = [n for n in args.contenders.split(",") if n]
    if set(names) - set(CONTENDERS):
        print(f"contenders must be among {CONTENDERS}", file=sys.stderr)
        return 2
    output = args.output or os.path.join(
        "bench", "results", f"cifar10_budget_{args.minutes:g}min.json"
    )
    results = {}
    if os.path.exists(output):
        with open(output, encoding="utf-8") as f:
            results = json.load(f)
    results["minutes"] = args.minutes
    results.setdefault("contenders", {})
    base = load_config(args.config)
    data = build_dataset(base, None, progress=lambda m: None)
    clocked = [f"train.time_budget_minutes={args.minutes}"]
    if args.clock == "budget":
        clocked.append("train.schedule_clock=budget")
    # Our-pipeline contenders other than tfformer: the config's schedule on
    # the chosen clock.
    on_pipeline = load_config(args.config, clocked)
    test_pixels = data.examples["test"].features["images"]
    test_labels = data.examples["test"].labels
    seeds = [int(s) for s in args.seeds.split(",") if s]
    for seed, name in [(seed, name) for seed in seeds for name in names]:
        keras.backend.clear_session()
        began = time.perf_counter()
        suffix = f"_seed{seed}" if seed else ""
        if name in ("tfformer", "cct"):
            config_path = args.config if name == "tfformer" else args.cct_config
            # Kept for bench/exports/image_export.py and tfformer-evaluate.
            model_name = "vit" if name == "tfformer" else "cct"
            out = os.path.join(
                CACHE, f"cifar10_{model_name}_{args.minutes:g}min{suffix}"
            )
            if os.path.exists(out):
                shutil.rmtree(out)
            # The bench's own overrides come last: --set cannot move the
            # budget, its clock, the seed or where the run is kept.
            with_budget = [
                *args.set,
                f"train.output_dir={out}",
                *clocked,
                "train.verbose=2",
                f"train.seed={seed}",
            ]
            speed = steps = None
            if args.clock == "probe":
                probe = load_config(config_path, with_budget)
                keras.utils.set_random_seed(0)
                speed = images_per_second(probe, data)
                keras.backend.clear_session()
                steps = schedule_steps(
                    args.minutes,
                    speed,
                    probe.train.batch_size,
                    probe.train.warmup_steps + 100,
                )
                with_budget.append(f"train.schedule_steps={steps}")
            config = load_config(config_path, with_budget)
            result = train(config, progress=print)
            model = result.model
            with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
                epochs = json.load(f)["epochs"]
            details = {
                "curve": curve(epochs),
                "train_images_per_second": speed,
                "schedule_steps": steps,
                "schedule_clock": args.clock,
                "steps": int(result.metrics["global_step"]),
                "parameters": int(model.count_params()),
                "shares": model_shares(model, config.data.image_size),
            }
        elif name == "keras_io":
            if seed:
                continue  # the recipe takes no seed: it runs once, with seed 0's
            model, details = keras_io_recipe(
                data, args.minutes, (test_pixels, test_labels), args.earlier_minutes
            )
        else:
            build = keras_hub_vit if name == "keras_hub" else small_cnn
            seeded = dataclasses.replace(
                on_pipeline, train=dataclasses.replace(on_pipeline.train, seed=seed)
            )
            model, details = run_on_our_pipeline(
                build, seeded, data, args.minutes, args.clock
            )
        details["seed"] = seed
        details["wall_seconds"] = time.perf_counter() - began
        details["test_accuracy"] = test_accuracy(model, test_pixels, test_labels)
        results["contenders"][name + suffix] = details
        print(name + suffix, json.dumps(details), flush=True)
        common.write_result(output, results)
        plot(results, output[: -len(".json")] + ".png")
    print(f"Wrote {output} and its curves (.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
