"""SavedModel export for TF Serving: raw strings in, translations out.

The exported graph holds everything: tokenization (`CoreWordPiece`, core ops
only), the encoder, the KV-cached greedy or beam search of
`tfformer.decoding.Generator`, and detokenization. It loads with
`tf.saved_model.load` in a process that imports only TensorFlow, in stock TF
Serving and in `saved_model_cli`.

Layout (what TF Serving watches): `<out>/<version>/saved_model.pb`,
`variables/`, `assets/` (the vocabulary files) and `assets.extra/`
(`export.json`, how it was made). A version is written to a hidden temporary
directory next to it and renamed into place, so a server never sees a
half-written version.
"""

import json
import os
import shutil
import tempfile
import time

import keras
import tensorflow as tf

from export.files import current_umask
from export.run import read_run
from export.text import CoreBytes, CoreWordPiece, probe_character_classes
from tfformer.decoding import Generator

SEARCHES = ("greedy", "beam")
# Raw inputs are cut to this many bytes before tokenizing; the first
# `source_length` tokens of any sentence come from far fewer.
MAX_INPUT_BYTES = 16384

SIGNATURES = {
    "serving_default": "text (batch,) string -> translation (batch,) string, "
    "score (batch,) float32, token_ids (batch, max_length) int32",
    "translate_ids": "source_ids (batch, length) int32 -> token_ids, score",
    "logits": "encoder_token_ids (batch, S) int32, decoder_token_ids (batch, T) "
    "int32 -> logits (batch, T, vocabulary) float32",
    "tokenize": "text (batch,) string -> token_ids (batch, source_length) int32",
    "detokenize": "token_ids (batch, length) int32 -> text (batch,) string",
}


def make_tokenizers(run, character_classes=None):
    """(source, target) core-op tokenizers for a `Run`."""
    if run.tokenizer == "byte":
        return CoreBytes(), CoreBytes()
    classes = character_classes or probe_character_classes()
    return tuple(
        CoreWordPiece(path, lower_case=run.lower_case, character_classes=classes)
        for path in (run.source_vocabulary, run.target_vocabulary)
    )


class TranslatorGraph(tf.Module):
    """The serving functions of one run, built from tracked pieces.

    Args:
        run: an `export.run.Run`.
        search, beam_width, length_penalty, max_length: decoding settings
            (see `tfformer.decoding.Generator`); `max_length` defaults to
            the training `data.max_length`.
        jit_compile: compile the decoding loop with XLA (faster on CPU and
            GPU, but the server must have XLA; off by default).
    """

    def __init__(
        self,
        run,
        *,
        search="beam",
        beam_width=4,
        length_penalty=0.6,
        max_length=None,
        jit_compile=False,
        character_classes=None,
    ):
        super().__init__()
        if search not in SEARCHES:
            raise ValueError(
                f"search must be one of {SEARCHES}. Received: search={search!r}"
            )
        self.model = run.model
        self.source, self.target = make_tokenizers(run, character_classes)
        self.source_length = run.source_length
        self.max_length = max_length or run.max_length
        self.source_vocabulary_size = run.source_vocabulary_size
        self.generator = Generator(
            run.model,
            max_length=self.max_length,
            search=search,
            beam_width=beam_width,
            length_penalty=length_penalty,
        )
        self._decode = (
            self.generator.compiled(jit_compile=True)
            if jit_compile
            else self.generator.__call__
        )
        self.settings = {
            "search": search,
            "beam_width": beam_width if search == "beam" else None,
            "length_penalty": length_penalty if search == "beam" else None,
            "max_length": self.max_length,
            "source_length": self.source_length,
            "max_input_bytes": MAX_INPUT_BYTES,
            "jit_compile": bool(jit_compile),
        }

    def clamp_source(self, ids):
        """Ids `(batch, any length)` to `(batch, source_length)`: cut or padded
        with 0; ids outside the vocabulary become [UNK] (1)."""
        ids = tf.cast(ids, tf.int32)
        inside = tf.logical_and(ids >= 0, ids < self.source_vocabulary_size)
        ids = tf.where(inside, ids, 1)
        ids = ids[:, : self.source_length]
        missing = self.source_length - tf.shape(ids)[1]
        return tf.pad(ids, [[0, 0], [0, missing]])

    def tokenize(self, text):
        text = tf.strings.substr(tf.reshape(text, [-1]), 0, MAX_INPUT_BYTES)
        ids = self.source.tokenize(text)[:, : self.source_length]
        return ids.to_tensor(shape=[None, self.source_length])

    def translate_ids(self, source_ids):
        out = self._decode(self.clamp_source(source_ids))
        return {"token_ids": out["token_ids"], "score": out["scores"]}

    def translate(self, text):
        out = self.translate_ids(self.tokenize(text))
        out["translation"] = self.target.detokenize(out["token_ids"])
        return out

    def logits(self, encoder_token_ids, decoder_token_ids):
        logits = self.model(
            {
                "encoder_token_ids": self.clamp_source(encoder_token_ids),
                "decoder_token_ids": tf.cast(decoder_token_ids, tf.int32),
            },
            training=False,
        )
        return {"logits": tf.cast(logits, tf.float32)}

    def detokenize(self, token_ids):
        return {"text": self.target.detokenize(token_ids)}


def next_version(out_dir):
    """1 + the largest numeric version under `out_dir` (1 if none)."""
    if not os.path.isdir(out_dir):
        return 1
    versions = [int(n) for n in os.listdir(out_dir) if n.isdigit()]
    return max(versions, default=0) + 1


def _check_version(version):
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(
            f"version must be a positive int (TF Serving's version directory). "
            f"Received: version={version!r}"
        )


def write_saved_model(graph, path):
    """Writes `graph`'s signatures as a SavedModel at `path` (no atomicity)."""
    archive = keras.export.ExportArchive()
    archive.track(graph.model)
    archive.track(graph.source)
    archive.track(graph.target)
    text = tf.TensorSpec([None], tf.string, name="text")
    archive.add_endpoint("serving_default", graph.translate, [text])
    archive.add_endpoint(
        "translate_ids",
        graph.translate_ids,
        [tf.TensorSpec([None, None], tf.int32, name="source_ids")],
    )
    archive.add_endpoint(
        "logits",
        graph.logits,
        [
            tf.TensorSpec([None, None], tf.int32, name="encoder_token_ids"),
            tf.TensorSpec([None, None], tf.int32, name="decoder_token_ids"),
        ],
    )
    archive.add_endpoint("tokenize", lambda t: {"token_ids": graph.tokenize(t)}, [text])
    archive.add_endpoint(
        "detokenize",
        graph.detokenize,
        [tf.TensorSpec([None, None], tf.int32, name="token_ids")],
    )
    archive.write_out(path, verbose=False)


def export_saved_model(
    run_dir,
    out_dir,
    *,
    version=None,
    checkpoint="model.keras",
    search="beam",
    beam_width=4,
    length_penalty=0.6,
    max_length=None,
    jit_compile=False,
    progress=print,
):
    """Exports a training run as `<out_dir>/<version>/`, atomically.

    Args:
        run_dir: a `tfformer-train` output directory of a translator.
        out_dir: the model base path TF Serving watches.
        version: an int; defaults to one more than the largest existing
            version. An existing version is never overwritten.
        checkpoint: "model.keras" or "best.keras".
        search, beam_width, length_penalty, max_length, jit_compile: see
            `TranslatorGraph`.

    Returns:
        The path of the new version directory.

    Raises:
        ValueError: bad run directory, checkpoint, search or version, or the
            version exists already. Nothing is written in that case.
    """
    if search not in SEARCHES:
        raise ValueError(
            f"search must be one of {SEARCHES}. Received: search={search!r}"
        )
    if version is not None:
        _check_version(version)
    run = read_run(run_dir, checkpoint)
    version = next_version(out_dir) if version is None else version
    final = os.path.join(out_dir, str(version))
    if os.path.exists(final):
        raise ValueError(
            f"{final} exists already; a served version is never overwritten. "
            "Pass another version or leave it out to take the next one."
        )
    graph = TranslatorGraph(
        run,
        search=search,
        beam_width=beam_width,
        length_penalty=length_penalty,
        max_length=max_length,
        jit_compile=jit_compile,
    )
    os.makedirs(out_dir, exist_ok=True)
    # Hidden (TF Serving only loads numeric names) and on the same file
    # system, so the final rename is atomic.
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=out_dir)
    began = time.perf_counter()
    try:
        progress(f"Tracing and writing the SavedModel for version {version}...")
        write_saved_model(graph, staging)
        extra = os.path.join(staging, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, "export.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "run": os.path.abspath(run.directory),
                    "checkpoint": checkpoint,
                    "tokenizer": run.tokenizer,
                    "lower_case": run.lower_case,
                    "signatures": SIGNATURES,
                    **graph.settings,
                },
                f,
                indent=2,
            )
        # mkdtemp makes the directory owner-only; TF Serving often runs as
        # another user. Give it the mode a plain mkdir would have.
        os.chmod(staging, 0o777 & ~current_umask())
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    progress(f"Wrote {final} in {time.perf_counter() - began:.1f} s.")
    return final
