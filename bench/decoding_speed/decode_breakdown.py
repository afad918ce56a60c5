"""Where a batch-1 cached decoding step spends its time, from the floor up.

`bench/decoding_speed/decode.py` measures tfformer's cached greedy decoding
against prefix recompute and keras-hub. This script explains the batch-1
figure: it starts from the weight-streaming floor (only the matrix-vector
products over the float32 weights a cached step must read, plus an argmax)
and adds the rest of a decoder step one piece at a time, written by hand with
the same model's weights (`decode.weight_floor_decoder`, `stages`):

    floor -> + biases -> + LayerNorms -> + self-attention over the cache
          -> + cross-attention -> + log-softmax and the greedy choice

then tfformer's `Generator` (the real step: position encoding, source
padding mask, scores and end-of-sequence bookkeeping on top) and prefix
recompute. All run as XLA-compiled `tf.while_loop`s over 64 new tokens, in
one process, alternating, repeated; the table gives medians.

Usage: `python -m bench.decoding_speed.decode_breakdown [--repeats 9] [--batch 1]
[--output FILE]`.
"""

import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from bench import common
from bench.decoding_speed.decode import (
    STAGES,
    build_tfformer,
    default_sizes,
    measure,
    prefix_recompute_decoder,
    tfformer_decoder,
    weight_floor_decoder,
)


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--output", default="bench/results/decode_breakdown.json")
    args = parser.parse_args()
    sizes = default_sizes()
    keras.utils.set_random_seed(0)
    model = build_tfformer(sizes)
    contenders = {("floor", "xla"): weight_floor_decoder(model, sizes)}
    for n in range(1, len(STAGES) + 1):
        name = "+ " + STAGES[n - 1].replace("_", " ")
        contenders[(name, "xla")] = weight_floor_decoder(model, sizes, True, STAGES[:n])
    contenders[("tfformer Generator", "xla")] = tfformer_decoder(model, sizes, True)
    contenders[("prefix recompute", "xla")] = prefix_recompute_decoder(
        model, sizes, True
    )
    rng = np.random.default_rng(0)
    source = rng.integers(4, sizes["vocabulary"], (args.batch, sizes["source_length"]))
    times = measure(contenders, tf.constant(source, tf.int32), args.repeats)
    median = {name: statistics.median(seconds) for (name, _), seconds in times.items()}
    floor, recompute = median["floor"], median["prefix recompute"]
    steps = sizes["new_tokens"]
    rows = []
    print(f"{'step':<22}{'ms/token':>10}{'share of floor':>16}{'x recompute':>13}")
    for (name, _), seconds in times.items():
        m = median[name]
        rows.append(
            dict(
                step=name,
                ms_per_token=1e3 * m / steps,
                share_of_floor_speed=floor / m,
                vs_prefix_recompute=recompute / m,
                seconds=seconds,
            )
        )
        row = rows[-1]
        print(
            f"{name:<22}{row['ms_per_token']:>10.3f}"
            f"{row['share_of_floor_speed']:>16.0%}{row['vs_prefix_recompute']:>13.2f}"
        )
    common.write_result(
        args.output,
        dict(sizes=sizes, batch=args.batch, repeats=args.repeats, rows=rows),
    )


if __name__ == "__main__":
    main()
