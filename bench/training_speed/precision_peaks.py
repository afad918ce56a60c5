"""The matmul peak of this CPU per precision and path, so that every MFU
figure can name the peak it is taken against: float32 and bfloat16 through
TensorFlow's graph mode with oneDNN on and off (`TF_ENABLE_ONEDNN_OPTS`,
read at import: each setting runs in a process of its own) and through XLA,
and float32 and dynamic-range int8 through TFLite's XNNPACK (a converted
`Dense`, int8 weights and activations quantized per call), on 2 threads.

Shapes (M x K x N, M tokens): the square 1024 of `train.py`'s peak, and the
projections of tfformer's models at 4,096 tokens: the translator's
(`translate_de_en`: width 256, FFN 1,024, 8,000-token output), the
60-minute GPT's (192, 768) and MiniLM's (384, 1,536). FLOPs are 2 M K N.

Settings alternate by round (in order, then reversed); each round a
setting's process times every shape `--calls` times after a warm-up call
and reports the median; the JSON holds, per setting and shape, the median
over rounds with its spread (min-max), in GFLOP/s.

Usage:
  python -m bench.training_speed.precision_peaks --repeats 3 \\
      --output bench/results/precision_peaks.json
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import common

SHAPES = {
    "square_1024": (1024, 1024, 1024),
    "translator_projection": (4096, 256, 256),
    "translator_ffn_up": (4096, 256, 1024),
    "translator_ffn_down": (4096, 1024, 256),
    "translator_output": (4096, 256, 8000),
    "gpt60_projection": (4096, 192, 192),
    "gpt60_ffn_up": (4096, 192, 768),
    "minilm_projection": (4096, 384, 384),
    "minilm_ffn_up": (4096, 384, 1536),
}
# setting: (environment, what the child runs)
SETTINGS = {
    "float32_graph_onednn": ({"TF_ENABLE_ONEDNN_OPTS": "1"}, ("tf", "float32", False)),
    "bfloat16_graph_onednn": (
        {"TF_ENABLE_ONEDNN_OPTS": "1"},
        ("tf", "bfloat16", False),
    ),
    "float32_graph_eigen": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, ("tf", "float32", False)),
    "bfloat16_graph_eigen": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, ("tf", "bfloat16", False)),
    "float32_xla": ({"TF_ENABLE_ONEDNN_OPTS": "1"}, ("tf", "float32", True)),
    "bfloat16_xla": ({"TF_ENABLE_ONEDNN_OPTS": "1"}, ("tf", "bfloat16", True)),
    "float32_tflite_xnnpack": ({}, ("tflite", "none", None)),
    "int8_tflite_xnnpack": ({}, ("tflite", "int8", None)),
}
THREADS = 2


def tf_rates(dtype, jit, calls):
    import tensorflow as tf

    matmul = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=jit)
    rates = {}
    for name, (m, k, n) in SHAPES.items():
        a = tf.cast(tf.random.normal([m, k]), dtype)
        b = tf.cast(tf.random.normal([k, n]), dtype)
        matmul(a, b).numpy()
        seconds = common.call_seconds(lambda: matmul(a, b).numpy(), calls)  # noqa: B023
        rates[name] = 2 * m * k * n / statistics.median(seconds) / 1e9
    return rates


def tflite_rates(quantize, calls):
    import keras
    import numpy as np
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    rates = {}
    for name, (m, k, n) in SHAPES.items():
        inputs = keras.Input((k,), batch_size=m)
        model = keras.Model(inputs, keras.layers.Dense(n, use_bias=False)(inputs))
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        if quantize == "int8":  # dynamic range: int8 weights, activations per call
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "dense.tflite")
            with open(path, "wb") as f:
                f.write(converter.convert())
            interpreter = Interpreter(model_path=path, num_threads=THREADS)
        interpreter.allocate_tensors()
        index = interpreter.get_input_details()[0]["index"]
        x = np.random.default_rng(0).normal(size=(m, k)).astype(np.float32)
        interpreter.set_tensor(index, x)
        interpreter.invoke()
        seconds = common.call_seconds(interpreter.invoke, calls)
        rates[name] = 2 * m * k * n / statistics.median(seconds) / 1e9
    return rates


def child(setting, calls):
    kind, precision, jit = SETTINGS[setting][1]
    if kind == "tf":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        print(json.dumps(tf_rates(precision, jit, calls)))
    else:
        print(json.dumps(tflite_rates(precision, calls)))


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS))
    p.add_argument("--child", help="(internal) one setting's round, in this process")
    p.add_argument("--output", default="bench/results/precision_peaks.json")
    args = p.parse_args()
    if args.child:
        child(args.child, args.calls)
        return
    rounds = {s: [] for s in args.settings}
    for r, order in common.rounds(args.settings, args.repeats):
        for setting in order:
            env = {**os.environ, **SETTINGS[setting][0]}
            argv = [sys.executable, "-m", "bench.training_speed.precision_peaks"]
            argv += ["--child", setting, "--calls", str(args.calls)]
            done = subprocess.run(argv, capture_output=True, text=True, env=env)
            if done.returncode:
                sys.exit(f"{setting} failed:\n{done.stderr[-3000:]}")
            rates = json.loads(done.stdout.strip().splitlines()[-1])
            print(setting, r, {k: round(v, 1) for k, v in rates.items()}, flush=True)
            rounds[setting].append(rates)
    summary = {
        setting: {
            shape: common.median_min_max([x[shape] for x in results])
            for shape in SHAPES
        }
        for setting, results in rounds.items()
    }
    common.write_result(
        args.output,
        {
            "unit": "GFLOP/s",
            "threads": THREADS,
            "shapes": {k: list(v) for k, v in SHAPES.items()},
            "calls": args.calls,
            "repeats": args.repeats,
            "settings": summary,
            "rounds": rounds,
        },
    )


if __name__ == "__main__":
    main()
