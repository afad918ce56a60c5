"""Every form of a trained GPT run: generation speed, size on disk and
validation loss.

Contenders (greedy, the same prompts: `--prompt-length` tokens of the
validation text, then `--new-tokens`; a byte model never writes [END], so
every contender makes every token):
- `keras_xla`: `tfformer.decoding.Generator`, KV-cached, the whole search as
  one XLA-compiled `tf.function`.
- `prefix_recompute_xla`: the same model without a cache: every step runs
  the whole fixed-length sequence through the model (XLA).
- `keras_hub_gpt2_xla`: keras-hub's `GPT2CausalLM` of the same sizes
  (random weights: speed only), its own compiled cached `generate_step`
  with `GreedySampler`, as `GPT2CausalLM.generate` runs it.
- `saved_model`: the exported `generate` signature (top_k 1 = greedy), no
  XLA (the export's default), loaded with `tf.saved_model.load`.
- `tflite_<variant>`: `model*.tflite` through the reference runtime
  (`generate.py`: `prefill` of the prompt, then one `decode` per token),
  LiteRT with `--threads` threads; its signatures take one sequence, so a
  batch of 8 is 8 sequences one after another. Prefill and decode are
  timed apart. `--variants` adds `int4` (blocks of 32, the export's
  default), exported with its quality gate forced (measured, not refused).
With `--bfloat16` (lower precision, per precision):
- `keras_xla_bfloat16`: the same trained weights in a model built under
  Keras's bfloat16 policy (weights and compute in bfloat16), the same
  `Generator` under XLA; its tokens are compared with float32's.
- `floor_float32` / `floor_bfloat16`: the weight-streaming floor at that
  precision, a reference and not a decoder: per token only the products of
  the batch's rows with every kernel a cached step reads (each block's
  projections and FFN, the tied token embedding as the output projection;
  not the position embedding, which a step gathers one row of), a tanh
  after each so XLA keeps them apart, and an argmax, in one XLA loop
  (`floor_<precision>_graph`: the same loop without XLA, TensorFlow's
  oneDNN matmuls).
Rounds alternate the contenders, in reverse order every other round;
figures are medians with min and max.

Quality: nats per token on the first `--windows` windows of the validation
split (every token after a window's first, as `tfformer-evaluate`): Keras,
the SavedModel's `score` signature and each TFLite variant (decode over each
window from position 0).

Usage:
  python -m bench.exports.gpt_generate --run ~/.cache/tfformer/gpt_60min_run
      [--output bench/results/gpt_generate.json]
  python -m bench.exports.gpt_generate --run ~/.cache/tfformer/gpt_60min_run \\
      --bfloat16 --batches 1 32 --variants none float16 int8 int4 \\
      --skip prefix_recompute_xla keras_hub_gpt2_xla \\
      --output bench/results/gpt_generate_precision.json
"""

import json
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from bench import common
from bench.peers import gpt2_greedy_generate
from tfformer.decoding import Generator
from tfformer.export.saved_model import export_saved_model
from tfformer.export.tasks.causal_lm import EXPORTER
from tfformer.export.tflite import export_tflite
from tfformer.models import from_preset
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.training.config import load_config
from tfformer.training.evaluation.language_model import score_text
from tfformer.training.tasks import get_task
from tfformer.training.trainer import dtype_policy

VARIANTS = ("none", "float16", "int8", "full_int8")
ALL_VARIANTS = (*VARIANTS, "int4")


def keras_xla(model, length):
    generator = Generator(model, max_length=length, search="greedy")
    compiled = generator.compiled(jit_compile=True)
    return lambda prompts: compiled(prompts)["token_ids"].numpy()


def bfloat16_copy(model, config, task, vocabulary, context):
    """`model`'s trained weights in the same model built under the bfloat16
    policy (weights and compute in bfloat16)."""
    with dtype_policy("bfloat16"):
        copy = from_preset(
            task.preset(config.model),
            vocabulary,
            **{**task.model_sizes(config.model), "max_sequence_length": context},
        )
    copy.set_weights(model.get_weights())  # cast to bfloat16; shapes checked
    return copy


def weight_floor(model, length, dtype, jit_compile=True):
    """The weight-streaming floor at `dtype` (the module docstring): greedy
    tokens from `length - prompt length` steps that each read every kernel a
    cached step reads, and nothing else."""
    kernels, embedding = [], None
    for weight in model.weights:
        if len(weight.shape) != 2 or "position" in weight.path:
            continue
        value = tf.cast(weight.value, dtype)
        if "token_embeddings" in weight.path:
            embedding = tf.transpose(value)  # tied: the output projection
        else:
            kernels.append(value)
    if embedding is None:
        raise ValueError("the floor needs a tied token embedding; found none")
    kernels = [tf.Variable(k, trainable=False) for k in (*kernels, embedding)]
    width = int(embedding.shape[0])

    def generate(prompts):
        start = prompts.shape[1]

        def body(i, token, tokens):
            x = last = tf.one_hot(token, width, dtype=dtype)
            for kernel in kernels:
                rows = int(kernel.shape[0])
                if last.shape[-1] != rows:  # the next kernel's input width
                    last = tf.tile(x, [1, -(-rows // width)])[:, :rows]
                last = tf.tanh(tf.matmul(last, kernel))
                if last.shape[-1] == width:
                    x = last
            token = tf.argmax(last, -1, output_type=tf.int32)
            hot = tf.cast(tf.range(length)[None, :] == i, tf.int32)
            return i + 1, token, tokens + hot * token[:, None]

        tokens = tf.pad(prompts, [[0, 0], [0, length - start]])
        _, _, tokens = tf.while_loop(
            lambda i, *_: i < length, body, (tf.constant(start), prompts[:, -1], tokens)
        )
        return tokens

    compiled = tf.function(generate, jit_compile=jit_compile, autograph=False)
    return lambda prompts: compiled(prompts).numpy()


def prefix_recompute(model, length):
    def generate(prompts):
        batch, start = tf.shape(prompts)[0], prompts.shape[1]
        tokens = tf.pad(prompts, [[0, 0], [0, length - start]])

        def body(i, tokens):
            logits = model({"token_ids": tokens}, training=False)
            best = tf.math.top_k(logits[:, i - 1], 1).indices[:, 0]
            hot = tf.cast(tf.range(length)[None, :] == i, tf.int32)
            return i + 1, tokens + hot * best[:, None]

        _, tokens = tf.while_loop(
            lambda i, t: i < length, body, (tf.constant(start), tokens)
        )
        del batch
        return tokens

    compiled = tf.function(generate, jit_compile=True, autograph=False)
    return lambda prompts: compiled(prompts).numpy()


def saved_model_generate(path, new_tokens):
    signature = tf.saved_model.load(path).signatures["generate"]

    def run(prompts):
        n = prompts.shape[0]
        text = [bytes(int(t) - 4 for t in row) for row in prompts]
        out = signature(
            prompt=tf.constant(text),
            max_new_tokens=tf.fill([n], new_tokens),
            temperature=tf.ones([n]),
            top_k=tf.ones([n], tf.int32),
            top_p=tf.ones([n]),
            seed=tf.zeros([n], tf.int32),
        )
        return out["token_ids"].numpy()

    return run


def load_runtime(directory, path, threads):
    """The export's reference runtime (`generate.py` in `directory`)."""
    generate = common.load_script(os.path.join(directory, "generate.py"))
    return generate.LiteRTGenerator(path, num_threads=threads)


def tflite_generate(runtime, new_tokens, clock):
    """Greedy generation of each prompt in turn; adds prefill and decode
    seconds to `clock`."""

    def run(prompts):
        outputs = []
        for row in prompts:
            ids = [int(t) for t in row]
            began = time.perf_counter()
            cache = runtime.prefill(ids[:-1], runtime.new_cache())
            prefilled = time.perf_counter()
            logits, cache = runtime.decode(ids[-1], len(ids) - 1, cache)
            new = []
            for column in range(len(ids), len(ids) + new_tokens):
                allowed = logits.copy()
                allowed[0] = -1e9
                token = int(np.argmax(allowed))
                new.append(token)
                if len(new) < new_tokens:
                    logits, cache = runtime.decode(token, column, cache)
            done = time.perf_counter()
            clock["prefill"] += prefilled - began
            clock["decode"] += done - prefilled
            outputs.append(ids + new)
        return np.array(outputs)

    return run


def tflite_nats(runtime, windows):
    """Nats per token of `windows` `(n, context + 1)` through decode."""
    nats, count = 0.0, 0
    for window in windows:
        cache = runtime.new_cache()
        for position in range(len(window) - 1):
            logits, cache = runtime.decode(int(window[position]), position, cache)
            logits = logits.astype(np.float64)
            top = logits.max()
            log_z = top + np.log(np.exp(logits - top).sum())
            nats -= logits[int(window[position + 1])] - log_z
            count += 1
    return nats / count


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--run", required=True, help="a causal_lm run directory")
    p.add_argument("--prompt-length", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--windows", type=int, default=24)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument(
        "--variants", nargs="+", choices=ALL_VARIANTS, default=list(VARIANTS)
    )
    p.add_argument(
        "--bfloat16",
        action="store_true",
        help="add the bfloat16 Keras contender and the floors per precision",
    )
    p.add_argument(
        "--skip",
        nargs="+",
        default=[],
        choices=("prefix_recompute_xla", "keras_hub_gpt2_xla", "saved_model"),
        help="contenders left out",
    )
    p.add_argument(
        "--output", default=os.path.join("bench", "results", "gpt_generate.json")
    )
    args = p.parse_args()
    run = EXPORTER.read(args.run)
    if run.text.kind != "byte":
        p.error(f"--run must be a byte-level run. Received: {run.text.kind!r}")
    length = args.prompt_length + args.new_tokens
    if length > run.context:
        p.error(
            f"--prompt-length + --new-tokens must be at most the context "
            f"({run.context}). Received: {length}"
        )
    config = load_config(os.path.join(args.run, "config.json"))
    task = get_task("causal_lm")
    validation = task.raw_splits(config.data)["validation"]
    ids = np.frombuffer(validation.encode("utf-8"), np.uint8).astype(np.int32) + 4
    sizes = {
        k: v
        for k, v in task.model_sizes(config.model).items()
        if k in ("num_layers", "num_heads", "hidden_dim", "intermediate_dim")
    }
    work = tempfile.mkdtemp(prefix="gpt_generate_")
    quiet = lambda *_: None  # noqa: E731

    # -- exports --------------------------------------------------------------
    print("exporting", flush=True)
    saved = export_saved_model(args.run, os.path.join(work, "serving"), progress=quiet)
    train_lines = task.raw_splits(config.data)["train"].split("\n")[:200]
    tflite = {}
    for variant in args.variants:
        out = os.path.join(work, f"device_{variant}")
        # int4 is gated on quality by default; measured here, not refused
        forced = dict(force=True, max_quality_loss=1e9) if variant == "int4" else {}
        tflite[variant] = (
            out,
            export_tflite(
                args.run,
                out,
                quantize=variant,
                representative_sentences=train_lines,
                progress=quiet,
                **forced,
            ),
        )
    sizes_on_disk = {
        "saved_model_variables": common.directory_bytes(
            os.path.join(saved, "variables")
        ),
        "saved_model": common.directory_bytes(saved),
        **{f"tflite_{v}": os.path.getsize(path) for v, (_, path) in tflite.items()},
        **{
            f"tflite_loop_{v}": os.path.getsize(
                os.path.join(d, os.path.basename(path).replace("model", "model_loop"))
            )
            for v, (d, path) in tflite.items()
        },
    }
    runtimes = {
        v: load_runtime(d, path, args.threads) for v, (d, path) in tflite.items()
    }

    # -- quality --------------------------------------------------------------
    print("scoring the variants", flush=True)
    window = run.context
    count = min(args.windows, (len(ids) - 1) // window)
    windows = np.stack(
        [ids[i * window : i * window + window + 1] for i in range(count)]
    )
    text = validation.encode("utf-8")[: count * window + 1].decode("utf-8")
    keras_scores = score_text(run.model, ByteTokenizer(), text, window, progress=quiet)
    bfloat16 = None
    if args.bfloat16:
        bfloat16 = bfloat16_copy(
            run.model, config, task, run.vocabulary_size, run.context
        )
        bfloat16_scores = score_text(
            bfloat16, ByteTokenizer(), text, window, progress=quiet
        )
    scored = tf.saved_model.load(saved).signatures["score"](text=tf.constant([text]))
    quality = {
        "windows": count,
        "tokens": int(count * window),
        "keras": keras_scores["nats_per_token"],
        **(
            {"keras_bfloat16": bfloat16_scores["nats_per_token"]}
            if args.bfloat16
            else {}
        ),
        "saved_model": round(
            -float(scored["log_likelihood"][0]) / int(scored["num_tokens"][0]), 4
        ),
    }
    for variant, runtime in runtimes.items():
        quality[f"tflite_{variant}"] = round(tflite_nats(runtime, windows), 4)
        print(f"  tflite {variant}: {quality[f'tflite_{variant}']}", flush=True)

    # -- speed ----------------------------------------------------------------
    rows = []
    hub_params = None
    for batch in args.batches:
        stride = min(997, (len(ids) - args.prompt_length) // batch)
        starts = np.arange(batch) * stride
        prompts = np.stack([ids[s : s + args.prompt_length] for s in starts])
        clocks = {v: {"prefill": 0.0, "decode": 0.0} for v in args.variants}
        contenders = {"keras_xla": keras_xla(run.model, length)}
        if args.bfloat16:
            contenders["keras_xla_bfloat16"] = keras_xla(bfloat16, length)
            contenders["floor_float32"] = weight_floor(run.model, length, tf.float32)
            contenders["floor_bfloat16"] = weight_floor(run.model, length, tf.bfloat16)
            for name, dtype in (("float32", tf.float32), ("bfloat16", tf.bfloat16)):
                contenders[f"floor_{name}_graph"] = weight_floor(
                    run.model, length, dtype, jit_compile=False
                )
        if "prefix_recompute_xla" not in args.skip:
            contenders["prefix_recompute_xla"] = prefix_recompute(run.model, length)
        if "keras_hub_gpt2_xla" not in args.skip:
            # jit_compile "auto": no XLA on a CPU-only machine, so this
            # contender runs in graph mode despite its name (the JSON keeps
            # the name; bench/decoding_speed/gpt_modes.py measures both modes).
            contenders["keras_hub_gpt2_xla"], hub_params = gpt2_greedy_generate(
                sizes, run.vocabulary_size, length
            )
        if "saved_model" not in args.skip:
            contenders["saved_model"] = saved_model_generate(saved, args.new_tokens)
        for v in args.variants:
            contenders[f"tflite_{v}"] = tflite_generate(
                runtimes[v], args.new_tokens, clocks[v]
            )
        outputs = {}
        for name, generate in contenders.items():
            print(f"batch {batch}: warming up {name}", flush=True)
            outputs[name] = generate(tf.constant(prompts))
        for clock in clocks.values():
            clock.update(prefill=0.0, decode=0.0)
        times = common.alternating_seconds(
            {
                n: lambda g=g, p=prompts: g(tf.constant(p))
                for n, g in contenders.items()
            },
            args.repeats,
            f"batch {batch}: ",
        )
        reference = outputs["keras_xla"][:, :length]
        for name, seconds in times.items():
            median, fastest, slowest = common.median_min_max(seconds)
            row = dict(
                contender=name,
                batch=batch,
                median_seconds=round(median, 4),
                min_seconds=round(fastest, 4),
                max_seconds=round(slowest, 4),
                tokens_per_second=round(batch * args.new_tokens / median, 1),
            )
            if name != "keras_hub_gpt2_xla" and not name.startswith("floor"):
                got = np.asarray(outputs[name])
                if name == "saved_model":  # the continuation only
                    got = np.concatenate([prompts, got[:, : args.new_tokens]], 1)
                row["tokens_equal_to_keras_xla"] = float(
                    np.mean(got[:, :length] == reference)
                )
                # the generated tokens only (the prompt is equal by design)
                start = args.prompt_length
                row["new_tokens_equal_to_keras_xla"] = round(
                    float(np.mean(got[:, start:length] == reference[:, start:])), 4
                )
            if name.startswith("tflite_"):
                clock = clocks[name[len("tflite_") :]]
                sequences = batch * args.repeats
                row["prefill_ms_per_prompt"] = round(
                    1000 * clock["prefill"] / sequences, 2
                )
                row["decode_tokens_per_second"] = round(
                    sequences * args.new_tokens / clock["decode"], 1
                )
            rows.append(row)
    ratios = {}
    pairs = {
        "keras_xla_vs_prefix_recompute": ("keras_xla", "prefix_recompute_xla"),
        "keras_xla_vs_keras_hub_gpt2": ("keras_xla", "keras_hub_gpt2_xla"),
        "bfloat16_vs_float32": ("keras_xla_bfloat16", "keras_xla"),
        "float32_share_of_its_floor": ("keras_xla", "floor_float32"),
        "bfloat16_share_of_its_floor": ("keras_xla_bfloat16", "floor_bfloat16"),
        "floor_bfloat16_vs_float32": ("floor_bfloat16", "floor_float32"),
    }
    for batch in args.batches:
        by = {
            r["contender"]: r["tokens_per_second"] for r in rows if r["batch"] == batch
        }
        ratios[f"batch_{batch}"] = {
            key: round(by[a] / by[b], 2)
            for key, (a, b) in pairs.items()
            if a in by and b in by
        }
    header = ("contender", "batch", "tokens/s", "median s", "min-max s", "equal")
    print("{:<24}{:>6}{:>11}{:>10}{:>18}{:>7}".format(*header))
    for r in rows:
        spread = f"{r['min_seconds']:.3f}-{r['max_seconds']:.3f}"
        equal = r.get("tokens_equal_to_keras_xla")
        print(
            f"{r['contender']:<24}{r['batch']:>6}{r['tokens_per_second']:>11.1f}"
            f"{r['median_seconds']:>10.3f}{spread:>18}"
            f"{'' if equal is None else f'{equal:.3f}':>7}"
        )
    print("quality (nats/token):", json.dumps(quality))
    print("sizes (bytes):", json.dumps(sizes_on_disk))
    result = dict(
        run=os.path.abspath(args.run),
        model=dict(
            **sizes,
            context=run.context,
            parameters=run.model.count_params(),
            keras_hub_gpt2_parameters=hub_params,
        ),
        prompt_length=args.prompt_length,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        batches=args.batches,
        variants=args.variants,
        bfloat16=args.bfloat16,
        tflite_threads=args.threads,
        rows=rows,
        ratios=ratios,
        quality_nats_per_token=quality,
        bytes_on_disk=sizes_on_disk,
    )
    common.write_result(args.output, result)


if __name__ == "__main__":
    main()
