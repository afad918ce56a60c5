"""Sentence embeddings: a BERT-style encoder with pooling (sentence-transformers'
recipe), one vector per text, compared by cosine similarity.

Runs of this task come from `tfformer-convert` (a sentence-transformers or
BERT checkpoint), not from `tfformer-train`: training a sentence encoder
needs a contrastive objective tfformer does not have. Inputs are BERT's,
[CLS] text [SEP] (the vocabulary's own start and end tokens), cut to
`max_length`. Prediction: the embedding of each input, or with
`--similarity` the cosine similarity of each "text_a<TAB>text_b" pair.
Evaluation: on scored pairs (`--pairs`, STS-B's form), the Pearson and
Spearman correlation of cosine with score, and a scatter plot. A text
classifier can start from such a run (`model.init_from`).
"""

import dataclasses
import json

from tfformer.training.tasks.base import ModelConfig, Task, TextDataConfig

NOT_TRAINABLE = (
    "task 'sentence_embedding' runs are made by tfformer-convert from a "
    "checkpoint, not trained; to fine-tune one, train task=text_classification "
    "with --set model.init_from=RUN"
)


@dataclasses.dataclass
class EmbeddingModel(ModelConfig):
    """`ModelConfig` plus how token vectors become one vector."""

    # mean, cls or max (`tfformer.layers.SequencePooling`).
    pooling: str = "mean"
    # L2-normalize the pooled vector.
    normalize: bool = True


class SentenceEmbeddingTask(Task):
    name = "sentence_embedding"
    DataConfig = TextDataConfig
    ModelConfig = EmbeddingModel
    backbone_name = "BertBackbone"
    default_preset = "bert_tiny"

    def validate(self, config):
        super().validate(config)
        from tfformer.layers.sequence_pooling import MODES

        if config.model.pooling not in MODES:
            raise ValueError(
                f"model.pooling must be one of {list(MODES)}. "
                f"Received: {config.model.pooling!r}"
            )

    def raw_splits(self, data_config):
        raise ValueError(NOT_TRAINABLE)

    def prepare(self, config, raw, directory, progress=print):
        raise ValueError(NOT_TRAINABLE)

    def build_model(self, config, data):
        raise ValueError(NOT_TRAINABLE)

    def compile_arguments(self, config):
        raise ValueError(NOT_TRAINABLE)

    # -- inference -------------------------------------------------------------

    def embed(self, run, texts, batch_size=32):
        """(len(texts), dim) float32 embeddings of `texts` by the run's model."""
        import numpy as np
        from keras import ops

        from tfformer.training.tasks.text_classification import padded_inputs

        tokenizer = run.tokenizers["text"]
        length = run.directory.manifest.max_length
        out = []
        for start in range(0, len(texts), batch_size):
            # Padded to the batch's longest row (the model is length-agnostic).
            ids, segments = padded_inputs(
                tokenizer, texts[start : start + batch_size], length
            )
            vectors = run.model(
                {"token_ids": ids, "segment_ids": segments}, training=False
            )["embedding"]
            out.append(ops.convert_to_numpy(vectors))
        dim = run.model.output["embedding"].shape[-1]
        return np.concatenate(out) if out else np.zeros((0, dim), "float32")

    def add_predict_arguments(self, parser):
        parser.add_argument(
            "--similarity",
            action="store_true",
            help="read each input as 'text_a<TAB>text_b' and print their cosine "
            "similarity",
        )
        parser.add_argument(
            "--decimals",
            type=int,
            default=6,
            help="decimals of the printed embeddings (default 6)",
        )

    def predict(self, run_dir, args, inputs):
        """One JSON line per input, {"text", "embedding"}; with
        `--similarity`, "cosine<TAB>text_a<TAB>text_b" per pair."""
        run = self.load(run_dir, args.model)
        texts = list(inputs)
        if not args.similarity:
            for text, vector in zip(texts, self.embed(run, texts), strict=True):
                values = [round(float(v), args.decimals) for v in vector]
                yield json.dumps({"text": text, "embedding": values})
            return
        pairs = []
        for text in texts:
            if text.count("\t") != 1:
                raise ValueError(
                    "--similarity reads each input as 'text_a<TAB>text_b'. "
                    f"Received: {text!r}"
                )
            pairs.append(text.split("\t"))
        firsts = self.embed(run, [a for a, _ in pairs])
        seconds = self.embed(run, [b for _, b in pairs])
        for (a, b), u, v in zip(pairs, firsts, seconds, strict=True):
            yield f"{cosine(u, v):.4f}\t{a}\t{b}"

    def add_evaluate_arguments(self, parser):
        parser.add_argument(
            "--pairs",
            metavar="TSV",
            help="scored sentence pairs, 'text_a<TAB>text_b<TAB>score' per line "
            "(plain or .gz; STS-B's columns, say): required",
        )
        parser.add_argument(
            "--scatter-plot",
            metavar="PNG",
            help="where to draw cosine against score (default: "
            "similarity_scatter.png in the run directory)",
        )

    def evaluate(self, run_dir, args, progress=print):
        """Pearson and Spearman correlation of the embeddings' cosine
        similarity with the pairs' scores (sentence-transformers'
        `EmbeddingSimilarityEvaluator`), and a scatter plot."""
        import os

        import numpy as np

        if not getattr(args, "pairs", None):
            raise ValueError(
                "A sentence_embedding run is evaluated on scored pairs: give "
                "--pairs TSV ('text_a<TAB>text_b<TAB>score' lines)."
            )
        pairs = read_scored_pairs(args.pairs)
        if args.limit:
            pairs = pairs[: args.limit]
        run = self.load(run_dir, args.model)
        progress(f"Embedding {len(pairs)} pairs...")
        firsts = self.embed(run, [a for a, _, _ in pairs])
        seconds = self.embed(run, [b for _, b, _ in pairs])
        unit = np.linalg.norm(firsts, axis=1) * np.linalg.norm(seconds, axis=1)
        cosines = np.sum(firsts * seconds, axis=1) / np.maximum(unit, 1e-12)
        scores = np.array([score for _, _, score in pairs])
        results = {
            "pairs": len(pairs),
            "pearson": pearson(cosines, scores),
            "spearman": pearson(ranks(cosines), ranks(scores)),
        }
        path = getattr(args, "scatter_plot", None) or os.path.join(
            run.directory.path, "similarity_scatter.png"
        )
        results["scatter_plot"] = plot_scatter(cosines, scores, path, results)
        return results


def read_scored_pairs(path):
    """[(text_a, text_b, score)] of a TSV file (plain or .gz); ValueError
    naming the line that is not "a<TAB>b<TAB>number"."""
    import gzip
    import math
    import os

    if not os.path.isfile(path):
        raise ValueError(f"--pairs file not found. Received: {path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    pairs = []
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            parts = line.split("\t")
            try:
                if len(parts) != 3:
                    raise ValueError
                score = float(parts[2])
                if not math.isfinite(score):
                    raise ValueError
            except ValueError:
                raise ValueError(
                    f"{path}:{number}: expected 'text_a<TAB>text_b<TAB>score'. "
                    f"Received: {line[:200]!r}"
                ) from None
            pairs.append((parts[0], parts[1], score))
    if len(pairs) < 2:
        raise ValueError(f"{path}: at least 2 scored pairs are needed.")
    return pairs


def ranks(values):
    """Average ranks (ties share the mean of their ranks), as Spearman's."""
    import numpy as np

    values = np.asarray(values, float)
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def pearson(x, y):
    import numpy as np

    x, y = np.asarray(x, float) - np.mean(x), np.asarray(y, float) - np.mean(y)
    norm = float(np.sqrt(np.sum(x * x) * np.sum(y * y)))
    return float(np.sum(x * y) / norm) if norm > 0 else 0.0


def plot_scatter(cosines, scores, path, results):
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfformer.runs.files import atomic_path

    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    axis.scatter(scores, cosines, s=8, alpha=0.5)
    axis.set_xlabel("score")
    axis.set_ylabel("cosine similarity of the embeddings")
    axis.set_title(
        f"{results['pairs']} pairs: Spearman {results['spearman']:.3f}, "
        f"Pearson {results['pearson']:.3f}"
    )
    axis.grid(alpha=0.3)
    figure.tight_layout()
    with atomic_path(os.fspath(path)) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)
    return path


def cosine(u, v):
    """Cosine similarity of two vectors (0 when either is zero)."""
    import numpy as np

    norms = float(np.linalg.norm(u) * np.linalg.norm(v))
    return float(np.dot(u, v) / norms) if norms > 0 else 0.0


TASK = SentenceEmbeddingTask()
