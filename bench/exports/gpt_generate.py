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
  timed apart.
Rounds alternate the contenders, in reverse order every other round;
figures are medians with min and max.

Quality: nats per token on the first `--windows` windows of the validation
split (every token after a window's first, as `tfformer-evaluate`): Keras,
the SavedModel's `score` signature and each TFLite variant (decode over each
window from position 0).

Usage:
  python -m bench.exports.gpt_generate --run ~/.cache/tfformer/gpt_60min_run
      [--output bench/results/gpt_generate.json]
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
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.training.config import load_config
from tfformer.training.evaluation.language_model import score_text
from tfformer.training.tasks import get_task

VARIANTS = ("none", "float16", "int8", "full_int8")


def keras_xla(model, length):
    generator = Generator(model, max_length=length, search="greedy")
    compiled = generator.compiled(jit_compile=True)
    return lambda prompts: compiled(prompts)["token_ids"].numpy()


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
    for variant in VARIANTS:
        out = os.path.join(work, f"device_{variant}")
        tflite[variant] = (
            out,
            export_tflite(
                args.run,
                out,
                quantize=variant,
                representative_sentences=train_lines,
                progress=quiet,
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
    scored = tf.saved_model.load(saved).signatures["score"](text=tf.constant([text]))
    quality = {
        "windows": count,
        "tokens": int(count * window),
        "keras": keras_scores["nats_per_token"],
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
    for batch in (1, 8):
        stride = min(997, (len(ids) - args.prompt_length) // batch)
        starts = np.arange(batch) * stride
        prompts = np.stack([ids[s : s + args.prompt_length] for s in starts])
        clocks = {v: {"prefill": 0.0, "decode": 0.0} for v in VARIANTS}
        # jit_compile "auto": no XLA on a CPU-only machine, so this contender
        # runs in graph mode despite its name (the JSON keeps the name;
        # bench/decoding_speed/gpt_modes.py measures both modes).
        hub, hub_params = gpt2_greedy_generate(sizes, run.vocabulary_size, length)
        contenders = {
            "keras_xla": keras_xla(run.model, length),
            "prefix_recompute_xla": prefix_recompute(run.model, length),
            "keras_hub_gpt2_xla": hub,
            "saved_model": saved_model_generate(saved, args.new_tokens),
            **{
                f"tflite_{v}": tflite_generate(runtimes[v], args.new_tokens, clocks[v])
                for v in VARIANTS
            },
        }
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
            if name != "keras_hub_gpt2_xla":  # random weights
                got = np.asarray(outputs[name])
                if name == "saved_model":  # the continuation only
                    got = np.concatenate([prompts, got[:, : args.new_tokens]], 1)
                row["tokens_equal_to_keras_xla"] = float(
                    np.mean(got[:, :length] == reference)
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
    for batch in (1, 8):
        by = {r["contender"]: r for r in rows if r["batch"] == batch}
        ratios[f"batch_{batch}"] = {
            "keras_xla_vs_prefix_recompute": round(
                by["keras_xla"]["tokens_per_second"]
                / by["prefix_recompute_xla"]["tokens_per_second"],
                2,
            ),
            "keras_xla_vs_keras_hub_gpt2": round(
                by["keras_xla"]["tokens_per_second"]
                / by["keras_hub_gpt2_xla"]["tokens_per_second"],
                2,
            ),
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
        tflite_threads=args.threads,
        rows=rows,
        ratios=ratios,
        quality_nats_per_token=quality,
        bytes_on_disk=sizes_on_disk,
    )
    common.write_result(args.output, result)


if __name__ == "__main__":
    main()
