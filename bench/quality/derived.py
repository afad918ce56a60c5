"""Figures BENCHMARKS.md derives from other figures or from the data,
recomputed from their sources: `python -m bench.quality.derived` (about a minute
here, most of it learning the vocabulary; writes `bench/results/derived.json`).

- `minilm_hidden_dropout`: the paired t-test of MiniLM fine-tuned on
  polarity without and with the feed-forward hidden dropout, seed by seed,
  from `minilm_polarity_hf_dropout.json` and `minilm_polarity_ffn_dropout.json`
  (two-sided p from Student's t with n - 1 degrees of freedom).
- `decode_floor`: the bytes of float32 weights one cached decoding step of
  the decoding benchmark's weight-streaming floor reads
  (`decoding_speed/decode.py`: the decoder blocks' kernels but the
  cross-attention keys' and values', which it applies once per source, and
  the tied output projection), and what the model's attention caches hold at
  batch 1.
- `de_en_training_state`: the translator's weights, two Adam moments, the
  EMA copy and the gradients in float32, from the parameter count in
  `library_quality_de_en.json`.
- `multi30k_target_tokens`: the mean length of Multi30k's training targets
  in the tokens of a WordPiece vocabulary learned as `translate_de_en.json`
  learns it (`learn_or_load`), start and end tokens included (needs `../shared/data`).
"""

import gzip
import json
import math
import os

import numpy as np

from bench.common import REPOSITORY, argument_parser, write_result

RESULTS = os.path.join(REPOSITORY, "bench", "results")
FLOAT32 = 4


def read_result(name):
    with open(os.path.join(RESULTS, name), encoding="utf-8") as f:
        return json.load(f)


def student_t_two_sided_p(t, dof):
    """Two-sided p of Student's t, by integrating its density (dof >= 1)."""
    t = abs(t)
    scale = math.gamma((dof + 1) / 2) / (math.sqrt(dof * math.pi) * math.gamma(dof / 2))
    x = np.linspace(0.0, t, 200001)
    density = scale * (1 + x**2 / dof) ** (-(dof + 1) / 2)
    inside = float(np.sum((density[1:] + density[:-1]) / 2 * np.diff(x)))
    return 1.0 - 2.0 * inside


def paired_t(without, with_):
    """Per-seed gains (points), their mean, the paired t and its p."""
    gains = 100 * (np.asarray(without) - np.asarray(with_))
    n = len(gains)
    t = float(np.mean(gains) / (np.std(gains, ddof=1) / math.sqrt(n)))
    return {
        "gains_points": [round(float(g), 4) for g in gains],
        "mean_gain_points": float(np.mean(gains)),
        "t": t,
        "p_two_sided": student_t_two_sided_p(t, n - 1),
    }


def minilm_hidden_dropout():
    runs = {}
    for name in ("minilm_polarity_hf_dropout.json", "minilm_polarity_ffn_dropout.json"):
        by_seed = {r["seed"]: r["test_accuracy"] for r in read_result(name)["runs"]}
        runs[name] = [by_seed[s] for s in sorted(by_seed)]
    without, with_ = runs.values()
    return {"without_minus_with": paired_t(without, with_), "sources": list(runs)}


def decode_floor():
    from bench.decoding_speed.decode import build_tfformer, default_sizes

    sizes = default_sizes()
    model = build_tfformer(sizes)
    # The floor reads the blocks' kernels only (no biases or norms), and
    # not the cross-attention keys' and values', which it applies once per
    # source.
    per_step = 0
    for block in model.backbone.decoder_blocks:
        for weight in block.weights:
            made_once = any(
                f"cross_attention/{n}/" in weight.path for n in ("key", "value")
            )
            if weight.path.endswith("/kernel") and not made_once:
                per_step += int(np.prod(weight.shape))
    output = int(np.prod(model.backbone.decoder_embedding.token_embeddings.shape))
    layers, width = sizes["layers"], sizes["hidden_dim"]
    self_cache = layers * 2 * (sizes["new_tokens"] + 1) * width
    cross_cache = layers * 2 * sizes["source_length"] * width
    return {
        "sizes": sizes,
        "weight_bytes_per_token": (per_step + output) * FLOAT32,
        "cache_bytes_batch_1": (self_cache + cross_cache) * FLOAT32,
    }


def de_en_training_state():
    contenders = read_result("library_quality_de_en.json")["contenders"]
    parameters = contenders["tfformer"]["parameters"]
    copies = ("weights", "adam_first_moment", "adam_second_moment", "ema", "gradients")
    return {
        "parameters": parameters,
        "copies": list(copies),
        "bytes": parameters * FLOAT32 * len(copies),
    }


def multi30k_target_tokens(data_root):
    from tfformer.training.config import load_config
    from tfformer.training.text.vocabulary import learn_or_load

    path = os.path.join(data_root, "multi30k", "train.en.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        targets = [line.rstrip("\n") for line in f]
    data = load_config(
        os.path.join(REPOSITORY, "training", "configs", "translate_de_en.json")
    ).data
    tokenizer = learn_or_load(data, targets, None, "target", progress=print)
    lengths = tokenizer.tokenize(targets).row_lengths().numpy() + 2
    return {
        "sentences": len(targets),
        "vocabulary_size": data.vocabulary_size,
        "vocabulary_learned": tokenizer.vocabulary_size,
        "mean_tokens_with_start_and_end": float(np.mean(lengths)),
        "median_tokens_with_start_and_end": float(np.median(lengths)),
    }


def main():
    parser = argument_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", default=os.path.join(REPOSITORY, "..", "shared", "data")
    )
    parser.add_argument("--output", default=os.path.join(RESULTS, "derived.json"))
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.data, "multi30k", "train.en.gz")):
        parser.error(f"--data must hold multi30k/train.en.gz. Received: {args.data}")
    result = {
        "minilm_hidden_dropout": minilm_hidden_dropout(),
        "decode_floor": decode_floor(),
        "de_en_training_state": de_en_training_state(),
        "multi30k_target_tokens": multi30k_target_tokens(args.data),
    }
    print(json.dumps(result, indent=1))
    write_result(args.output, result)


if __name__ == "__main__":
    main()
