"""docs/keras.md's walk-throughs as written, on the real runs and data:
MiniLM fine-tuned on sentence polarity with `fit` on strings, and the
10-minute GPT trained one more epoch on tinyshakespeare. Each block runs
in a scratch directory with only its `RUN` line pointed at the run given
here (its data paths are the page's, relative to the repository, so the
command runs from the repository root); what it printed, its figures and
its wall time go to the JSON.

Usage (from the repository root; ~10 minutes on 2 cores):
  python -m bench.quality.keras_walkthrough \\
      --minilm ~/.cache/tfformer/minilm/run --gpt ~/.cache/tfformer/gpt_10min_run \\
      --output bench/results/keras_walkthrough.json
"""

import contextlib
import io
import os
import re
import tempfile
import time

from bench import common

PAGE = os.path.join("docs", "keras.md")
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def run_block(code, run, scratch):
    """Runs `code` with its `RUN = ...` line set to `run`, in `scratch` (the
    page's relative data paths are rewritten to absolute ones); returns its
    namespace, what it printed and its seconds."""
    here = os.getcwd()
    code = re.sub(r'^RUN = ".*"$', f"RUN = {os.path.abspath(run)!r}", code, flags=re.M)
    shared = os.path.join(here, "..", "shared")
    code = code.replace('"../shared/', f'"{shared}/')
    namespace, out = {}, io.StringIO()
    previous = os.getcwd()
    os.chdir(scratch)
    began = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out):
            exec(code, namespace)
    finally:
        os.chdir(previous)
    # What the block printed itself, without Keras's progress bars.
    printed = [
        line
        for line in out.getvalue().split("\n")
        if line.strip() and "\x08" not in line and "\r" not in line
    ]
    return namespace, printed, time.perf_counter() - began


def held_out_nats(writer, text):
    """Nats per byte of `text` (no label smoothing), as `writer` scores its
    windows."""
    from tfformer.training.losses import MaskedSparseCategoricalCrossentropy

    writer.compile(loss=MaskedSparseCategoricalCrossentropy())
    return float(writer.evaluate([text], verbose=0, return_dict=True)["loss"])


def main():
    parser = common.argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--minilm", required=True, help="the converted MiniLM run")
    parser.add_argument("--gpt", required=True, help="the 10-minute GPT run")
    parser.add_argument("--output", default="bench/results/keras_walkthrough.json")
    args = parser.parse_args()
    with open(PAGE, encoding="utf-8") as f:
        blocks = FENCE.findall(f.read())
    if len(blocks) != 2:
        parser.error(f"{PAGE} must hold 2 python blocks. Received: {len(blocks)}")
    result = {}
    with tempfile.TemporaryDirectory() as scratch:
        ns, printed, seconds = run_block(blocks[0], args.minilm, scratch)
        classifier = ns["classifier"]
        result["minilm_polarity"] = {
            "run": os.path.abspath(args.minilm),
            "train_sentences": len(ns["train"]),
            "test_sentences": len(ns["test"]),
            "test_accuracy": round(float(ns["scores"]["accuracy"]), 4),
            "test_loss": round(float(ns["scores"]["loss"]), 4),
            "epochs": 2,
            "batch_size": 32,
            "sequence_length": classifier.preprocessor.sequence_length,
            "optimizer": "AdamW 5e-5, weight decay 0.01, no schedule",
            "wall_seconds": round(seconds, 1),
            "printed": printed,
            "peer": "tfformer-train on polarity_minilm.yaml (its own split, a "
            "linear schedule with warmup): 83.08 +- 0.42 % over 3 seeds, "
            "bench/results/minilm_polarity_hf_dropout.json",
        }
        print(result["minilm_polarity"], flush=True)
        from tfformer.training.string_models import StringCausalLM

        ns, printed, seconds = run_block(blocks[1], args.gpt, scratch)
        held_out = ns["text"][ns["cut"] :]
        before = held_out_nats(StringCausalLM.from_run(args.gpt), held_out)
        after = held_out_nats(ns["writer"], held_out)
        result["gpt_shakespeare"] = {
            "run": os.path.abspath(args.gpt),
            "held_out": "the file's last 10 % (the page's cut)",
            "held_out_characters": len(held_out),
            "held_out_nats_per_byte_before": round(before, 4),
            "held_out_nats_per_byte_after": round(after, 4),
            "wall_seconds": round(seconds, 1),
            "printed": printed,
        }
        print(result["gpt_shakespeare"], flush=True)
    common.write_result(args.output, result)


if __name__ == "__main__":
    main()
