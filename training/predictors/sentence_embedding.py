"""The predictor of sentence-embedding runs (converted from
sentence-transformers or BERT checkpoints): one vector per text, compared by
cosine similarity.

    embedder = tfformer.load("runs/minilm")
    vectors = embedder.embed(["A man is eating food.", "A man eats."])
    embedder.similarity(["A man is eating food."], ["A man eats."])
    embedder.evaluate(pairs_path="sts-test.tsv")["spearman"]
"""

import json

import numpy as np

from tfformer.errors import InputError, InputTypeError
from tfformer.training.predictors.base import Option, Predictor

PAIR_INPUT = "similarity reads each input as 'text_a<TAB>text_b'. Received: {!r}"


class SentenceEmbeddingPredictor(Predictor):
    """Embeds texts (see `Predictor` for the arguments and attributes).
    Inputs are BERT's, [CLS] text [SEP] (the vocabulary's own start and end
    tokens), cut to the run's `max_length`."""

    task = "sentence_embedding"
    predict_options = (
        Option(
            "--similarity",
            action="store_true",
            help="read each input as 'text_a<TAB>text_b' and print their cosine "
            "similarity",
        ),
        Option(
            "--decimals",
            type=int,
            default=6,
            help="decimals of the printed embeddings (default 6)",
        ),
    )
    evaluate_options = (
        Option(
            "--pairs",
            dest="pairs_path",
            metavar="TSV",
            help="scored sentence pairs, 'text_a<TAB>text_b<TAB>score' per line "
            "(plain or .gz; STS-B's columns, say): required",
        ),
        Option(
            "--scatter-plot",
            metavar="PNG",
            help="where to draw cosine against score (default: "
            "similarity_scatter.png in the run directory)",
        ),
    )

    def embed(self, texts, batch_size=32):
        """`(len(texts), dim)` float32 embeddings of `texts` (the model's
        `embedding` output)."""
        from keras import ops

        from tfformer.training.tasks.text_classification import padded_inputs

        if isinstance(texts, str):
            raise InputTypeError("texts must be a list of strings, not one string.")
        texts = list(texts)
        length = self.manifest.max_length
        out = []
        for start in range(0, len(texts), batch_size):
            # Padded to the batch's longest row (the model is length-agnostic).
            ids, segments = padded_inputs(
                self.tokenizers["text"], texts[start : start + batch_size], length
            )
            vectors = self.model(
                {"token_ids": ids, "segment_ids": segments}, training=False
            )["embedding"]
            out.append(ops.convert_to_numpy(vectors))
        dim = self.model.output["embedding"].shape[-1]
        return np.concatenate(out) if out else np.zeros((0, dim), "float32")

    def similarity(self, texts_a, texts_b):
        """`(n,)` cosine similarity of the embeddings of `texts_a[i]` and
        `texts_b[i]` (two lists of n texts)."""
        if len(texts_a) != len(texts_b):
            raise InputError(
                f"texts_a and texts_b must have the same length. Received: "
                f"{len(texts_a)} and {len(texts_b)} texts"
            )
        return cosines(self.embed(texts_a), self.embed(texts_b))

    def predict(self, inputs, *, similarity=False, decimals=None):
        """{"text", "embedding": a list of floats (rounded to `decimals`
        when given)} per input; with `similarity`, each input is read as
        "text_a<TAB>text_b" and gives {"cosine", "text_a", "text_b"}."""
        texts = list(inputs)
        if not similarity:
            results = []
            for text, vector in zip(texts, self.embed(texts), strict=True):
                values = [float(v) for v in vector]
                if decimals is not None:
                    values = [round(v, decimals) for v in values]
                results.append({"text": text, "embedding": values})
            return results
        pairs = []
        for text in texts:
            if text.count("\t") != 1:
                raise InputError(PAIR_INPUT.format(text))
            pairs.append(text.split("\t"))
        similarities = self.similarity([a for a, _ in pairs], [b for _, b in pairs])
        return [
            {"cosine": float(c), "text_a": a, "text_b": b}
            for (a, b), c in zip(pairs, similarities, strict=True)
        ]

    def describe(self, result):
        if "cosine" in result:
            return f"{result['cosine']:.4f}\t{result['text_a']}\t{result['text_b']}"
        return json.dumps(result)

    def evaluate(
        self, *, pairs_path=None, scatter_plot=None, limit=None, progress=print
    ):
        """Pearson and Spearman correlation of the embeddings' cosine
        similarity with the scores of the pairs in `pairs_path` (a TSV of
        "text_a<TAB>text_b<TAB>score" lines; sentence-transformers'
        `EmbeddingSimilarityEvaluator`), and a scatter plot (`scatter_plot`;
        default: similarity_scatter.png in the run directory)."""
        import os

        if not pairs_path:
            raise InputError(
                "A sentence_embedding run is evaluated on scored pairs: give "
                "pairs_path=TSV ('text_a<TAB>text_b<TAB>score' lines)."
            )
        pairs = read_scored_pairs(pairs_path)
        if limit:
            pairs = pairs[:limit]
        progress(f"Embedding {len(pairs)} pairs...")
        similarities = self.similarity(
            [a for a, _, _ in pairs], [b for _, b, _ in pairs]
        )
        scores = np.array([score for _, _, score in pairs])
        results = {
            "pairs": len(pairs),
            "pearson": pearson(similarities, scores),
            "spearman": pearson(ranks(similarities), ranks(scores)),
        }
        path = scatter_plot or os.path.join(
            self.directory.path, "similarity_scatter.png"
        )
        results["scatter_plot"] = plot_scatter(similarities, scores, path, results)
        return results


def cosines(u, v):
    """Row-wise cosine similarity of two `(n, dim)` arrays (0 where either
    row is zero)."""
    norms = np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1)
    dots = np.sum(u * v, axis=1)
    return np.where(norms > 0, dots / np.maximum(norms, 1e-30), 0.0)


def read_scored_pairs(path):
    """[(text_a, text_b, score)] of a TSV file (plain or .gz); ValueError
    naming the line that is not "a<TAB>b<TAB>number"."""
    import gzip
    import math
    import os

    if not os.path.isfile(path):
        raise InputError(f"pairs_path must be an existing file. Received: {path!r}")
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
                raise InputError(
                    f"{path}:{number}: expected 'text_a<TAB>text_b<TAB>score'. "
                    f"Received: {line[:200]!r}"
                ) from None
            pairs.append((parts[0], parts[1], score))
    if len(pairs) < 2:
        raise InputError(f"{path}: at least 2 scored pairs are needed.")
    return pairs


def ranks(values):
    """Average ranks (ties share the mean of their ranks), as Spearman's."""
    values = np.asarray(values, float)
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def pearson(x, y):
    """Pearson's correlation of two sequences (0 when either is constant)."""
    x, y = np.asarray(x, float) - np.mean(x), np.asarray(y, float) - np.mean(y)
    norm = float(np.sqrt(np.sum(x * x) * np.sum(y * y)))
    return float(np.sum(x * y) / norm) if norm > 0 else 0.0


def plot_scatter(similarities, scores, path, results):
    """Draws cosine similarity against score into the PNG `path`."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tfformer.runs.files import atomic_path

    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    axis.scatter(scores, similarities, s=8, alpha=0.5)
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
