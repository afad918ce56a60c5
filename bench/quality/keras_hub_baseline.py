"""The keras-hub baseline of the real-data quality run: keras-hub's
encoder-decoder trained under the same wall-clock budget, on the same data,
with the same tokenizer, then scored on the same test set.

It reads a finished `tfformer-train` run directory for the config and the
vocabulary files, so both models see identical token ids. The keras-hub side
is built as the keras.io keras-hub translation example builds it:
`TokenAndPositionEmbedding` + `TransformerEncoder`/`TransformerDecoder` +
`Dense`, every sequence padded to the fixed `data.max_length`, shuffled and
batched. To compare models and not optimisers, it trains with tfformer's
optimizer, schedule, label-smoothed loss and batch size (from the run's
config), and XLA (`jit_compile=True`). It decodes greedily with keras-hub's
self- and cross-attention caches (`bench/peers.py`) and, with
`--beam N`, also with `keras_hub.samplers.BeamSampler(num_beams=N)` over the
same caches (keras-hub's generic beam search: no length penalty, ranked by
summed log-probability).

Usage:
  python -m bench.quality.keras_hub_baseline --run runs/translate_de_en \
      --minutes 60 --out runs/keras_hub_de_en [--beam 4]
  # decode again with the saved weights, no training:
  python -m bench.quality.keras_hub_baseline --run runs/translate_de_en \
      --out runs/keras_hub_de_en --decode-only --beam 4

Writes `<out>/metrics.json` (epochs, real tokens/s), `training_curves.png`,
`model.weights.h5`, `test_greedy.json` and `test_beam<N>.json` (sacreBLEU
and chrF, cased and lowercased, with signatures).
"""

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

from bench import common
from bench.peers import END, cut_after_end, padded_dataset, seq2seq_for_config
from tfformer.training.callbacks import TimeBudget, TrainingReport
from tfformer.training.config import load_config
from tfformer.training.evaluation.translation import score_translations
from tfformer.training.plots import plot_training_curves
from tfformer.training.trainer import build_dataset, compile_model


def translate(hub, data, sentences, length, batch_size=32, beam=None):
    if beam is None:
        decode = hub.decoder(length, jit_compile=False)
    else:
        decode = hub.beam_decoder(length, beam, END)
    source_tokenizer = data.tokenizers["source"]
    target_tokenizer = data.tokenizers["target"]
    out = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        ids = source_tokenizer.tokenize(chunk)[:, :length].to_tensor(
            shape=[len(chunk), length]
        )
        tokens = cut_after_end(decode(ids).numpy())
        out += [t.decode("utf-8") for t in target_tokenizer.detokenize(tokens).numpy()]
        print(f"  {len(out)}/{len(sentences)} sentences", end="\r", flush=True)
    print()
    return out


def plot_comparison(reports, path):
    """Validation loss and accuracy against training minutes, one line per run."""
    plt = common.pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, report in reports.items():
        minutes = np.cumsum([e["seconds"] for e in report["epochs"]]) / 60
        for axis, metric in zip(axes, ("val_loss", "val_accuracy"), strict=True):
            values = [e[metric] for e in report["epochs"]]
            axis.plot(minutes, values, "-o", label=name)
            axis.set_xlabel("training minutes (validation excluded)")
            axis.set_title(f"Multi30k {metric}")
            axis.grid(alpha=0.3)
            axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def evaluate(hub, data, pairs, length, path, beam=None, extra=None):
    """Translates `pairs`, scores them and writes the scores to `path`."""
    name = "greedy" if beam is None else f"beam {beam} (keras_hub.samplers.BeamSampler)"
    print(f"Translating {len(pairs)} test sentences, {name}", flush=True)
    hypotheses, seconds = common.timed(
        translate, hub, data, [s for s, _ in pairs], length, beam=beam
    )
    scores = score_translations(hypotheses, [r for _, r in pairs])
    scores.update(
        decoding=name,
        sentences=len(pairs),
        decode_seconds=round(seconds, 1),
        **(extra or {}),
        examples=[
            {"source": s, "reference": r, "translation": h}
            for (s, r), h in list(zip(pairs, hypotheses, strict=True))[:5]
        ],
    )
    common.write_json(path, scores)
    print(json.dumps({k: v for k, v in scores.items() if k != "examples"}, indent=2))


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--run", required=True, help="a finished tfformer-train run")
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--out", required=True)
    p.add_argument("--limit", type=int, help="test sentences (default: all)")
    p.add_argument("--beam", type=int, help="also decode with BeamSampler(N)")
    p.add_argument(
        "--decode-only",
        action="store_true",
        help="load <out>/model.weights.h5 instead of training",
    )
    args = p.parse_args()
    if args.minutes <= 0:
        p.error(f"--minutes must be positive. Received: {args.minutes}")
    if args.beam is not None and args.beam < 1:
        p.error(f"--beam must be >= 1. Received: {args.beam}")
    weights = os.path.join(args.out, "model.weights.h5")
    if args.decode_only and not os.path.exists(weights):
        p.error(f"--decode-only needs {weights}, which does not exist")
    config = load_config(os.path.join(args.run, "config.json"))
    os.makedirs(args.out, exist_ok=True)
    data = build_dataset(config, args.run)
    length, t = config.data.max_length, config.train
    keras.utils.set_random_seed(t.seed)
    hub = seq2seq_for_config(config, data)
    model = compile_model(hub.training_model(), config)
    print(f"keras-hub model: {model.count_params():,} parameters")
    pairs = data.raw["test"][: args.limit]
    if args.decode_only:
        model.load_weights(weights)
    else:
        train_and_evaluate(args, config, data, hub, model, pairs, weights)
    if args.beam is not None:
        evaluate(
            hub,
            data,
            pairs,
            length,
            os.path.join(args.out, f"test_beam{args.beam}.json"),
            beam=args.beam,
        )


def train_and_evaluate(args, config, data, hub, model, pairs, weights):
    length, t = config.data.max_length, config.train
    train = padded_dataset(data.examples["train"], length, t.batch_size, shuffle=True)
    val = padded_dataset(
        data.examples["validation"], length, t.batch_size, shuffle=False
    )
    report = TrainingReport(
        lambda body: common.write_json(os.path.join(args.out, "metrics.json"), body)
    )
    budget = TimeBudget(args.minutes)
    began = time.perf_counter()
    model.fit(
        train,
        validation_data=val,
        epochs=t.epochs,
        callbacks=[budget, report],
        verbose=2,
    )
    train_wall = time.perf_counter() - began
    model.save_weights(weights)
    plot_training_curves(report.report, os.path.join(args.out, "training_curves.png"))
    evaluate(
        hub,
        data,
        pairs,
        length,
        os.path.join(args.out, "test_greedy.json"),
        extra=dict(
            global_step=int(model.optimizer.iterations.numpy()),
            train_wall_seconds=round(train_wall, 1),
            real_tokens_per_second=report.summary()["real_tokens_per_second"],
            parameters=model.count_params(),
        ),
    )
    with open(os.path.join(args.run, "metrics.json"), encoding="utf-8") as f:
        ours = json.load(f)
    plot_comparison(
        {"tfformer": ours, "keras-hub": report.report},
        os.path.join(args.out, "compare_curves.png"),
    )


if __name__ == "__main__":
    main()
