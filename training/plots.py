"""Training curves as a PNG (matplotlib, no display needed)."""

import os

from tfformer.runs.files import atomic_path


def plot_training_curves(report, path):
    """Plots loss and accuracy per epoch (train and validation) into `path`.

    Args:
        report: the `TrainingReport.report` dict (its "epochs" list of logs).
        path: the PNG file to write (atomically).
    """
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = report.get("epochs", [])
    if not epochs:
        return None
    x = [e["epoch"] for e in epochs]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    # A model with several outputs logs its accuracies by output name; the
    # first one is plotted (masked_lm_accuracy of BERT pre-training).
    accuracy = next(
        (k for k in epochs[0] if k == "accuracy" or k.endswith("_accuracy")),
        "accuracy",
    )
    accuracy = accuracy.removeprefix("val_")
    for axis, name in zip(axes, ("loss", accuracy), strict=True):
        for prefix, style in (("", "-o"), ("val_", "--s")):
            values = [e.get(prefix + name) for e in epochs]
            if all(v is not None for v in values):
                axis.plot(x, values, style, label=f"{prefix or 'train_'}{name}")
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        axis.set_title(name)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    with atomic_path(os.fspath(path)) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)
    return path


def plot_confusion_matrix(matrix, labels, path, *, title="Confusion matrix"):
    """Draws `matrix` (rows: true class, columns: predicted) with counts and
    row shares into the PNG `path` (atomically); returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = np.asarray(matrix)
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    size = max(4.0, 0.6 * len(labels) + 2.5)
    figure, axis = plt.subplots(figsize=(size, size * 0.85))
    image = axis.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    axis.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    axis.set_yticks(range(len(labels)), labels)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    for (row, column), count in np.ndenumerate(matrix):
        axis.text(
            column,
            row,
            f"{count}\n{shares[row, column]:.0%}",
            ha="center",
            va="center",
            color="white" if shares[row, column] > 0.5 else "black",
            fontsize=8,
        )
    figure.colorbar(image, ax=axis, label="share of the true class")
    axis.set_title(title)
    figure.tight_layout()
    with atomic_path(os.fspath(path)) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)
    return path
