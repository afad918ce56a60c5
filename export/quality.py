"""The quality gate: every quantized TFLite export (float16, int8,
full_int8, integer_only, int4) is measured before anything is written,
against the float32 model of the same run, on held-out data, in the task's
own unit, through the reference runtime shipped with it.

Each exporter names its `Metric` and measures (`Exporter.quality_samples`,
`Exporter.quality`):

| task | metric | agreement | most lost |
|---|---|---|---|
| text generator | nats per token | same likeliest next token | 0.1 nats |
| translator | BLEU, lowercased | same translation | 1.0 BLEU |
| text classifier | accuracy, percent | same class | 1.0 point |
| image classifier | accuracy, percent | same class | 1.0 point |
| sentence embedder | mean cosine to float32 | same nearest neighbour | 0.01 |

The data: a trained run's held-out examples (the causal LM's held-out tail
of its text; the test split the trainer writes to `heldout.jsonl` or
`heldout.npz`), or a file the user passes (`--quality-data`; a converted
checkpoint has none). A quantization that loses more than the threshold
(`--max-quality-loss`, default above; why each default is what it is:
docs/devices.md, "The quality gate") is refused with the figures and
nothing is written, unless `--force`. A run with nothing to measure on is
written with a warning that says so, except int4, which is refused unless
`--force` (per-channel int4 collapses small LLMs: litert-torch#1068).

The figures go to `quality.json` beside the model, under its file name.
"""

import dataclasses
import json
import os

import numpy as np

from tfformer.errors import InputError
from tfformer.runs.files import atomic_write_text

QUALITY_FILE = "quality.json"
# The most held-out examples a gate reads (a generator: tokens, below).
MOST_EXAMPLES = 500


@dataclasses.dataclass(frozen=True)
class Metric:
    """What a task's gate measures.

    Attributes:
        name: the figure's name in `quality.json` and messages.
        unit: the unit a loss is given in ("BLEU points").
        lower_is_better: nats; the others are higher-is-better.
        default_max_loss: the default threshold, in `unit`.
        agreement: what the agreement figure counts.
        examples: what is counted ("tokens", "sentences").
    """

    name: str
    unit: str
    lower_is_better: bool
    default_max_loss: float
    agreement: str
    examples: str
    # Decimals the figures are said with.
    digits: int = 4

    def loss(self, float32, quantized):
        """How much worse `quantized` is than `float32`, in `unit`."""
        return quantized - float32 if self.lower_is_better else float32 - quantized


NATS = Metric(
    "nats per token", "nats per token", True, 0.1, "top-1 agreement", "tokens"
)
BLEU = Metric("BLEU", "BLEU points", False, 1.0, "same translation", "sentences", 2)
ACCURACY = Metric(
    "accuracy", "accuracy points", False, 1.0, "same class", "examples", 2
)
COSINE = Metric(
    "cosine to float32", "cosine", False, 0.01, "same nearest neighbour", "texts"
)


def read_bytes(path, flag="--quality-data"):
    """The bytes of `path` (plain or .gz), or ValueError naming `flag`."""
    import gzip

    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{flag} {path!r} is unreadable: {e}") from None


def read_rows(path, keys, flag="--quality-data"):
    """The rows of a JSON-lines file (plain or .gz) as dicts holding every
    one of `keys`, or ValueError naming `flag`, the line and what it holds.
    A `heldout.jsonl` of `tfformer-train` is such a file."""
    rows = []
    text = read_bytes(path, flag).decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(
                f"{flag} {path!r} line {number} is not JSON ({e.msg}): {line[:60]!r}"
            ) from None
        if not isinstance(row, dict) or any(k not in row for k in keys):
            raise InputError(
                f"{flag} {path!r} line {number} must be a JSON object with "
                f"{', '.join(repr(k) for k in keys)}. Received: {line[:80]!r}"
            )
        rows.append(row)
    if not rows:
        raise InputError(f"{flag} {path!r} holds no examples.")
    return rows


def read_examples(path, keys, flag="--quality-data"):
    """Rows of `keys` from `path`: JSON lines when its name ends in .jsonl
    (or .jsonl.gz), else tab-separated columns in the order of `keys`."""
    if str(path).removesuffix(".gz").endswith(".jsonl"):
        return read_rows(path, keys, flag)
    rows = []
    text = read_bytes(path, flag).decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != len(keys):
            raise InputError(
                f"{flag} {path!r} line {number} must hold {len(keys)} tab-separated "
                f"columns ({', '.join(keys)}), or pass a .jsonl file. Received: "
                f"{line[:80]!r}"
            )
        rows.append(dict(zip(keys, columns, strict=True)))
    if not rows:
        raise InputError(f"{flag} {path!r} holds no examples.")
    return rows


def heldout_examples(run, path, keys):
    """(rows of `keys`, where they come from): the file `path`, or the
    run's `heldout.jsonl` when `path` is None; (None, why) without either."""
    if path is not None:
        return read_examples(path, keys), str(path)
    found = run.heldout_file()
    if found is None:
        return None, (
            "the run has no held-out examples (a converted run, or one trained "
            "before tfformer wrote them); pass --quality-data FILE"
        )
    return read_rows(found, keys, "the run's"), f"the run's held-out examples ({found})"


def label_id(value, labels, where):
    """The class id of `value` (a label name or an id), or ValueError."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError(f"{where}: label must be a name or an id. Received: {value!r}")
    if isinstance(value, str):
        if value not in labels and value.strip().isdigit():
            value = int(value)  # a TSV's id
        elif value not in labels:
            raise InputError(
                f"{where}: label {value!r} is not one of the run's {labels}."
            )
        else:
            return labels.index(value)
    if not 0 <= value < len(labels):
        raise InputError(
            f"{where}: label id {value} is outside [0, {len(labels)}) (the "
            f"run's {labels})."
        )
    return value


def class_figures(answers, labels):
    """A classifier's figures: the float32 and quantized models' accuracy
    in percent from their `answers` (two lists of class ids) and the true
    `labels`, and the share of examples where they answer alike."""
    base, quantized = (np.asarray(a) for a in answers)
    labels = np.asarray(labels)
    return {
        "examples": int(labels.size),
        "float32": round(100 * float(np.mean(base == labels)), 4),
        "quantized": round(100 * float(np.mean(quantized == labels)), 4),
        "agreement": round(float(np.mean(base == quantized)), 4),
    }


def record(out_dir, name, figures):
    """Adds `name`'s figures to `out_dir/quality.json`."""
    known = _known(out_dir)
    known[name] = figures
    atomic_write_text(
        os.path.join(out_dir, QUALITY_FILE), json.dumps(known, indent=2) + "\n"
    )


def _known(out_dir):
    """`out_dir/quality.json` as a dict ({} when absent or damaged)."""
    path = os.path.join(out_dir, QUALITY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            known = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return known if isinstance(known, dict) else {}


def recorded(out_dir, name):
    """The figures `quality.json` in `out_dir` holds for `name`, or None."""
    return _known(out_dir).get(name)


def forget(out_dir, names):
    """Drops `names`' figures from `out_dir/quality.json` (a model written
    again unmeasured must not keep an older model's figures)."""
    known = _known(out_dir)
    if any(name in known for name in names):
        for name in names:
            known.pop(name, None)
        atomic_write_text(
            os.path.join(out_dir, QUALITY_FILE), json.dumps(known, indent=2) + "\n"
        )


class QualityGate:
    """One quantized export's gate: the float32 and quantized main models
    kept in staging (`take`), measured once every model is converted
    (`measure`), the figures recorded beside the model (`record`).

    Args:
        exporter: the task's `Exporter` (its `quality_metric` is not None).
        run: the `RunDirectory`.
        quantize: the quantization (not "none").
        block: int4's weights per scale (`int4.BLOCKS`).
        max_loss: the most the quantized model may lose, in the metric's
            unit (None: the metric's default).
        force: write what is refused or cannot be measured.
        data: the held-out file (None: the run's held-out examples).
    """

    def __init__(self, exporter, run, quantize, block, max_loss, force, data):
        from tfformer.export import int4

        self.exporter, self.metric = exporter, exporter.quality_metric
        self.quantize, self.block = quantize, None
        if quantize == "int4":
            int4.require_quantizer()
            self.block = int4.check_block(block)
        if max_loss is None:
            max_loss = self.metric.default_max_loss
        try:
            self.max_loss = float(max_loss)
        except (TypeError, ValueError):
            self.max_loss = -1.0
        if not self.max_loss >= 0:
            raise InputError(
                f"--max-quality-loss must be a number >= 0 ({self.metric.unit}). "
                f"Received: {max_loss!r}"
            )
        self.force = bool(force)
        self.samples, self.where = exporter.quality_samples(run, data)
        if self.samples is None and quantize == "int4" and not self.force:
            raise InputError(
                f"--quantize int4 cannot measure the quantized model: "
                f"{self.where} (or --force to write it unmeasured)."
            )
        self.name = quantize if quantize != "int4" else f"int4 (blocks of {self.block})"
        self.paths, self.figures = {}, None

    @classmethod
    def of(cls, exporter, run, quantize, block, max_loss, force, data):
        """The gate of a quantized export, or None (a float32 export, which
        refuses the gate's options by name)."""
        if quantize != "none":
            if exporter.quality_metric is None:
                if quantize == "int4":
                    raise InputError(
                        f"--quantize int4 needs a measured export, and the "
                        f"{exporter.task} exporter has no quality gate."
                    )
                return None
            return cls(exporter, run, quantize, block, max_loss, force, data)
        if max_loss is not None or force or data is not None:
            raise InputError(
                "--max-quality-loss, --quality-data and --force apply to a "
                "quantized export. Received: --quantize 'none' (float32)"
            )
        return None

    def take(self, index, flatbuffer, staging, float32):
        """The model to write of the `index`th source, converted to
        `flatbuffer` (float32 for int4); `float32()` is the main model
        converted in float32 (the baseline)."""
        from tfformer.export import int4

        if self.quantize == "int4":
            baseline = flatbuffer
            flatbuffer = int4.quantize_int4(flatbuffer, self.block)
        if index == 0 and self.samples is not None:  # the main model is measured
            if self.quantize != "int4":
                baseline = float32()
            folder = os.path.join(staging, "gate")
            os.makedirs(folder, exist_ok=True)
            for kind, content in (("float32", baseline), ("quantized", flatbuffer)):
                self.paths[kind] = os.path.join(folder, f"{kind}.tflite")
                with open(self.paths[kind], "wb") as f:
                    f.write(content)
        return flatbuffer

    def measure(self, task_run, options, progress):
        """Measures the quantized model; ValueError (nothing written) when
        it loses more than allowed and `force` is not set."""
        if self.samples is None:
            progress(f"warning: {self.name} is unmeasured: {self.where}.")
            return
        progress(f"Measuring {self.name} against float32 on {self.where}...")
        # The reference runtime reads the files an app ships beside the model.
        self.exporter.device_files(
            task_run, os.path.dirname(self.paths["float32"]), **options
        )
        measured = self.exporter.quality(
            task_run, self.paths["float32"], self.paths["quantized"], self.samples
        )
        m = self.metric
        loss = m.loss(measured["float32"], measured["quantized"])
        self.figures = {
            "quantize": self.quantize,
            **({"block": self.block} if self.block else {}),
            "data": self.where,
            "metric": m.name,
            "unit": m.unit,
            **measured,
            "loss": round(loss, 4),
            "max_loss": self.max_loss,
            # A NaN loss (a model that collapsed to NaN) is not within.
            "within": bool(loss <= self.max_loss),
        }
        d = m.digits
        said = (
            f"{measured['quantized']:.{d}f} {m.name} against float32's "
            f"{measured['float32']:.{d}f} (lost {loss:+.{d}f} {m.unit}) on "
            f"{measured['examples']} held-out {m.examples}; {m.agreement} "
            f"{measured['agreement']:.1%}"
        )
        progress(f"{self.name}: {said}.")
        if not loss <= self.max_loss:
            if not self.force:
                raise InputError(
                    f"{self.name} loses {loss:.{d}f} {m.unit} against float32 "
                    f"({said}), more than --max-quality-loss {self.max_loss}: "
                    "not written. "
                    + (
                        "Smaller --int4-block, a gentler --quantize, "
                        if self.quantize == "int4"
                        else "A gentler --quantize, "
                    )
                    + "or --force to write it anyway."
                )
            self.figures["forced"] = True
            progress(f"warning: {self.name} is written past its threshold (--force).")

    def record(self, out_dir, file_name):
        if self.figures is not None:
            record(out_dir, file_name, self.figures)
