"""Text classification: a BERT-style encoder with a classification head.

Data: one file per class, one sentence per line, or a TSV file of `text
label` or `text_a text_b label` rows (sentence pairs); a seeded shuffle, then
the holdout split in validation and test halves. Inputs are BERT's:
[START] a [END] (segments 0), or [START] a [END] b [END] (a: 0, b: 1), cut
longest-first to `max_length` (`encode_texts`, which the predictor,
`tfformer.training.predictors.text_classification`, uses too).
`classification_scores`: accuracy, macro-F1 and the confusion matrix.
"""

import dataclasses
import os

from tfformer.errors import InputError
from tfformer.training.distillation import check_distillation
from tfformer.training.tasks.base import (
    INITIAL_RUN_KEYS,
    ModelConfig,
    PreparedData,
    TextDataConfig,
    TrainingTask,
    bucket_lengths,
    check_holdout_fraction,
    check_initial_settings,
    check_initial_tokenizer,
    holdout_splits,
    initial_hidden_dropout,
    initial_tokenizer,
    tokenizer_entries,
)

# The tasks whose runs' encoder and vocabulary a classifier can start from.
INITIAL_RUN_TASKS = ("masked_lm", "text_classification", "sentence_embedding")


@dataclasses.dataclass
class ClassificationData(TextDataConfig):
    """The labelled files (plus `TextDataConfig`'s text settings)."""

    # One file per class, in class-id order.
    class_paths: tuple[str, ...] = ()
    # Or one TSV file (plain or .gz): "text<TAB>label" rows, or
    # "text_a<TAB>text_b<TAB>label" for sentence pairs (every row alike).
    tsv_path: str | None = None
    # The TSV's first line names the columns (e.g. GLUE's
    # "sentence<TAB>label"): skip it.
    tsv_header: bool = False
    # Label names, in class-id order; empty: the file names (class_paths),
    # or the sorted labels of the TSV. With a TSV, a label not listed here
    # is an error naming its line.
    class_names: tuple[str, ...] = ()
    # Share of the examples held out for validation, and as many for test.
    holdout_fraction: float = 0.1
    # Knowledge distillation (`tfformer.training.distillation`): a finished
    # text_classification run (same class names, same input kind) whose
    # logits this run's model learns besides the labels. None: labels only.
    teacher: str | None = None
    # The softmax temperature T of the teacher's soft labels and the
    # student's, and the weight w of the soft labels' term per sentence
    # (1 - w: the true label's; a sentence without one has the soft term
    # only, so in a batch of mostly unlabelled sentences the labels weigh
    # less than 1 - w of the loss).
    teacher_temperature: float = 2.0
    teacher_weight: float = 0.5
    # Perturbed copies of each training sentence for the teacher to label.
    teacher_augment_copies: int = 0
    # Unlabelled text files (one sentence per line, plain or .gz) for the
    # teacher to label; held-out sentences are left out.
    teacher_text_paths: tuple[str, ...] = ()
    # A directory keeping the teacher's logits under a fingerprint of the
    # teacher and the texts, for runs that would label the same texts again
    # (the seeds of a sweep). None: no cache.
    teacher_cache: str | None = None


@dataclasses.dataclass
class ClassificationModel(ModelConfig):
    """`ModelConfig` plus the run to start from."""

    # A masked_lm (pre-training) or text_classification run directory: the
    # classifier starts from its encoder's weights and sizes and uses its
    # vocabulary (data.tokenizer and data.lower_case must match it), with a
    # new classification head. Read when training starts. None: random
    # weights and a vocabulary learned from the training split.
    init_from: str | None = None


def label_names(data_config):
    """The class names in class-id order (a TSV without `class_names`: its
    sorted labels, which reads the file)."""
    if data_config.class_names:
        return list(data_config.class_names)
    if data_config.tsv_path:
        from tfformer.training.sources.text_files import read_labelled_tsv

        return read_labelled_tsv(data_config.tsv_path, header=data_config.tsv_header)[1]
    return [os.path.basename(p).removesuffix(".gz") for p in data_config.class_paths]


def encode_texts(tokenizer, texts, max_length):
    """BERT inputs of `texts` (strings, or (a, b) pairs): lists of token ids
    [START] a [END] (b [END]) and of segment ids (0 for a's part, 1 for b's).
    Pairs are cut longest-first (one token at a time from the longer text,
    from b on ties, as BERT's `_truncate_seq_pair`) to `max_length`; single
    texts to `max_length - 2` tokens."""
    start, end = tokenizer.start_id, tokenizer.end_id
    if not texts:
        return [], []
    pairs = isinstance(texts[0], tuple | list)
    firsts = tokenizer.tokenize([t[0] if pairs else t for t in texts]).to_list()
    if not pairs:
        rows = [[start, *a[: max_length - 2], end] for a in firsts]
        return rows, [[0] * len(r) for r in rows]
    seconds = tokenizer.tokenize([t[1] for t in texts]).to_list()
    rows, segments = [], []
    for a, b in zip(firsts, seconds, strict=True):
        while len(a) + len(b) > max_length - 3:
            (a if len(a) > len(b) else b).pop()
        rows.append([start, *a, end, *b, end])
        segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    return rows, segments


def padded_inputs(tokenizer, texts, max_length, width=None):
    """`encode_texts` as `(token_ids, segment_ids)` int32 arrays, 0-padded to
    `width` columns (None: the longest row)."""
    return padded_rows(*encode_texts(tokenizer, texts, max_length), width)


def padded_rows(rows, segments, width=None):
    """Token-id rows and their segment ids as `(token_ids, segment_ids)`
    int32 arrays, 0-padded to `width` columns (None: the longest row)."""
    import numpy as np

    width = width or max((len(r) for r in rows), default=0)
    ids = np.zeros((len(rows), width), "int32")
    segment_ids = np.zeros((len(rows), width), "int32")
    for i, (tokens, kinds) in enumerate(zip(rows, segments, strict=True)):
        ids[i, : len(tokens)] = tokens
        segment_ids[i, : len(kinds)] = kinds
    return ids, segment_ids


class TextClassificationTask(TrainingTask):
    name = "text_classification"
    DataConfig = ClassificationData
    ModelConfig = ClassificationModel
    backbone_name = "BertBackbone"
    default_preset = "bert_tiny"

    def __init__(self):
        # The last model.init_from model loaded:
        # {(path, mtime): (model, encoder settings)}.
        self._initial_models = {}

    def validate(self, config):
        super().validate(config)
        d = config.data
        if d.tsv_path is not None:
            if d.class_paths:
                raise InputError(
                    "Give data.class_paths or data.tsv_path, not both. Received: "
                    f"data.class_paths={list(d.class_paths)}, "
                    f"data.tsv_path={d.tsv_path!r}"
                )
            if d.max_length < 5:
                raise InputError(
                    "data.max_length must be >= 5 for sentence pairs. "
                    f"Received: {d.max_length}"
                )
        elif d.tsv_header:
            raise InputError(
                "data.tsv_header applies to data.tsv_path, which is not set. "
                f"Received: data.tsv_header=true, data.class_paths="
                f"{list(d.class_paths)}"
            )
        if (
            d.tsv_path is None
            and d.class_names
            and len(d.class_names) != len(d.class_paths)
        ):
            raise InputError(
                f"data.class_names must name each of the {len(d.class_paths)} "
                f"classes. Received: {list(d.class_names)}"
            )
        check_holdout_fraction(d)
        check_distillation(d)

    def raw_splits(self, data_config):
        from tfformer.training.sources.text_files import (
            read_labelled_text,
            read_labelled_tsv,
        )

        # Checked here, when data is needed: a converted classifier's run
        # predicts without any.
        if not data_config.tsv_path and len(data_config.class_paths) < 2:
            raise InputError(
                f"data.class_paths needs a file per class (>= 2), or give "
                f"data.tsv_path. Received: {list(data_config.class_paths)}"
            )
        if data_config.tsv_path:
            examples, _ = read_labelled_tsv(
                data_config.tsv_path,
                data_config.class_names or None,
                header=data_config.tsv_header,
            )
        else:
            examples = read_labelled_text(data_config.class_paths)
        return holdout_splits(examples, data_config)

    # -- starting from another run -----------------------------------------------

    def initial_run(self, config):
        """(RunDirectory, its tokenizer spec, its model, encoder settings) of
        `model.init_from`, checked at train time (not when a config is
        read, so a finished run does not depend on its initial run): a
        finished run of a task in `INITIAL_RUN_TASKS` whose tokenizer agrees
        with `config`, whose encoder sizes are not overridden, and whose
        position table holds `data.max_length` (ValueError naming the key
        otherwise). The settings are read from the model itself, so a
        classifier started from another classifier gets every layer."""
        from tfformer.runs.directory import RunDirectory

        path = os.path.abspath(config.model.init_from)
        where = f"model.init_from={config.model.init_from!r}"
        try:
            run = RunDirectory(path)
            if run.task not in INITIAL_RUN_TASKS:
                raise InputError(
                    f"it holds a {run.task!r} run; a classifier starts from one "
                    f"of {list(INITIAL_RUN_TASKS)} (an encoder with its vocabulary)"
                )
            spec = run.tokenizer("text")
            run.checkpoint_path()
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        d = config.data
        check_initial_tokenizer(where, spec, d, "vocabulary")
        # Loaded once per process and model file (prepare and build_model
        # both ask); the checks below run every time.
        key = (path, os.path.getmtime(run.checkpoint_path()))
        if key not in self._initial_models:
            model = run.load_model()
            self._initial_models = {key: (model, encoder_settings(model))}
        model, settings = self._initial_models[key]
        check_initial_settings(where, config.model, INITIAL_RUN_KEYS, settings)
        positions = settings["max_sequence_length"]
        if d.max_length > positions:
            raise InputError(
                f"{where}: its encoder has {positions} positions; data.max_length "
                f"must be <= {positions}. Received: data.max_length={d.max_length}"
            )
        return run, spec, model, settings

    def prepare(self, config, raw, directory, progress=print):
        from tfformer.training import pipeline
        from tfformer.training.text.vocabulary import learn_or_load

        data_config = config.data
        if config.model.init_from is not None:
            _, spec, _, _ = self.initial_run(config)
            tokenizer = initial_tokenizer(
                spec, directory, f"model.init_from={config.model.init_from!r}"
            )
            progress(f"Tokenizer (text): from {config.model.init_from}")
        else:
            sentences = [
                part
                for text, _ in raw["train"]
                for part in (text if isinstance(text, tuple) else (text,))
            ]
            tokenizer = learn_or_load(
                data_config, sentences, directory, "text", progress
            )
        labels = tuple(label_names(data_config))
        splits, targets = self.distillation_targets(data_config, raw, labels, progress)
        examples = {}
        for split, items in splits.items():
            rows, segments = encode_texts(
                tokenizer, [text for text, _ in items], data_config.max_length
            )
            examples[split] = pipeline.rows_examples(
                {"token_ids": rows, "segment_ids": segments},
                [label for _, label in items] if targets is None else targets[split],
            )
        return PreparedData(
            {"text": tokenizer}, examples, raw, bucket_lengths(data_config), labels
        )

    def distillation_targets(self, data_config, raw, labels, progress):
        """(`raw`, None) without `data.teacher`; else (the splits with the
        teacher's extra sentences, `distillation.distillation_items`;
        {split: its `distillation.teacher_targets` rows})."""
        from tfformer.training import distillation

        if data_config.teacher is None:
            return raw, None
        train = raw["train"]
        pairs = bool(train) and isinstance(train[0][0], tuple)
        teacher = distillation.teacher(data_config, labels, pairs)
        distillation.check_teacher_split(teacher, raw, data_config.lower_case)
        items = distillation.distillation_items(data_config, raw, progress)
        cache = data_config.teacher_cache
        return items, distillation.cached_targets(teacher, items, cache, progress)

    def save_heldout(self, data, run):
        rows = []
        for text, label in data.raw["test"][: self.HELDOUT_EXAMPLES]:
            pair = isinstance(text, tuple | list)
            texts = {"text": text[0], "text_b": text[1]} if pair else {"text": text}
            rows.append({**texts, "label": data.labels[label]})
        run.write_heldout(rows)

    def run_manifest(self, config, data):
        from tfformer.runs.manifest import TextClassificationManifest

        train = data.raw["train"]
        return TextClassificationManifest(
            tokenizers=tokenizer_entries(config, data),
            max_length=config.data.max_length,
            labels=tuple(data.labels),
            pairs=bool(train) and isinstance(train[0][0], tuple),
        )

    def build_model(self, config, data):
        from tfformer.models import bert_classifier, from_preset

        if config.model.init_from is not None:
            return self.initialized_model(config, data)
        sizes = self.model_sizes(config.model)
        encoder = from_preset(
            self.preset(config.model),
            data.tokenizers["text"].vocabulary_size,
            **{**sizes, "max_sequence_length": max(config.data.max_length, 8)},
        )
        return bert_classifier(
            encoder, data.num_classes, dropout=sizes.get("dropout", 0.1)
        )

    def initialized_model(self, config, data):
        """The classifier on `model.init_from`'s encoder: its sizes and
        position table (read from its model), its weights (every encoder
        layer; the pooler too when the run has one), this config's dropout
        (the hidden one by `initial_hidden_dropout`: a converted BERT's 0.0
        unless the config sets it), and a new head."""
        from tfformer.models import bert_classifier, bert_encoder

        _, _, source, settings = self.initial_run(config)
        settings = {k: v for k, v in settings.items() if k != "preset"}
        settings["activation_dropout"] = initial_hidden_dropout(
            config.model, settings.get("activation_dropout")
        )
        dropout = config.model.dropout if config.model.dropout is not None else 0.1
        encoder = bert_encoder(
            data.tokenizers["text"].vocabulary_size, dropout=dropout, **settings
        )
        copy_encoder_weights(source, encoder)
        return bert_classifier(encoder, data.num_classes, dropout=dropout)

    def compile_arguments(self, config):
        import keras

        d = config.data
        if d.teacher is not None:
            from tfformer.training.losses import DistillationLoss
            from tfformer.training.metrics import LabelledAccuracy, TeacherAgreement

            return {
                "loss": DistillationLoss(d.teacher_temperature, d.teacher_weight),
                "weighted_metrics": [LabelledAccuracy(), TeacherAgreement()],
            }
        return {
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            # Weights mark the padding rows of the last evaluation batches.
            "weighted_metrics": [
                keras.metrics.SparseCategoricalAccuracy(name="accuracy")
            ],
        }


# The BertBackbone arguments a classifier takes from its initial run.
INITIAL_ENCODER_KEYS = (
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "max_sequence_length",
    "num_segments",
    "activation",
    "layer_norm_epsilon",
    "activation_dropout",
)


def encoder_settings(model):
    """The `BertBackbone` arguments in `INITIAL_ENCODER_KEYS` of the backbone
    of `model` (a masked-LM model, a classifier or an embedder), and
    `preset` None."""
    from tfformer.models import BertBackbone

    backbone = getattr(model, "backbone", None)
    if not isinstance(backbone, BertBackbone):
        raise InputError(f"{model.name} has no BERT backbone.")
    config = backbone.get_config()
    return {**{key: config[key] for key in INITIAL_ENCODER_KEYS}, "preset": None}


def trained_pooler(model):
    """Whether `model`'s pooler was trained: not in masked-LM pre-training
    without next-sentence prediction, whose loss never reaches it."""
    from tfformer.models import MaskedLM

    return not (isinstance(model, MaskedLM) and not model.next_sentence_prediction)


def copy_encoder_weights(source, encoder):
    """Sets every layer of `encoder` (a `BertBackbone`) from the backbone of
    `source` (a model on a backbone of the same sizes: the masked-LM model,
    a classifier or an embedder). The pooler is the exception when
    `source` never trained it (`trained_pooler`): it keeps its fresh
    initialization. Returns the names of the layers left so."""
    theirs = source.backbone
    pairs = [
        (encoder.token_embedding, theirs.token_embedding),
        (encoder.segment_embedding, theirs.segment_embedding),
        (encoder.embeddings_norm, theirs.embeddings_norm),
        *zip(encoder.encoder_blocks, theirs.encoder_blocks, strict=True),
    ]
    fresh = []
    if trained_pooler(source):
        pairs.append((encoder.pooler, theirs.pooler))
    else:
        fresh.append(encoder.pooler.name)
    for mine, their in pairs:
        values = their.get_weights()
        shapes = [w.shape for w in mine.get_weights()], [v.shape for v in values]
        if shapes[0] != shapes[1]:
            raise InputError(
                f"Layer {mine.name!r}: the initial model's weights have shapes "
                f"{shapes[1]}, this encoder's {shapes[0]}."
            )
        mine.set_weights(values)
    return fresh


def classification_scores(truth, predicted, labels):
    """Accuracy, per-class and macro F1, and the confusion matrix (rows: true
    class, columns: predicted)."""
    import numpy as np

    n = len(labels)
    confusion = np.zeros((n, n), int)
    np.add.at(confusion, (np.asarray(truth), np.asarray(predicted)), 1)
    tp = np.diag(confusion).astype(float)
    precision = tp / np.maximum(confusion.sum(0), 1)
    recall = tp / np.maximum(confusion.sum(1), 1)
    f1 = np.where(
        precision + recall > 0,
        2 * precision * recall / np.maximum(precision + recall, 1e-12),
        0.0,
    )
    return {
        "examples": int(confusion.sum()),
        "accuracy": float(tp.sum() / max(confusion.sum(), 1)),
        "macro_f1": float(f1.mean()),
        "f1": {label: float(v) for label, v in zip(labels, f1, strict=True)},
        "labels": list(labels),
        "confusion_matrix": confusion.tolist(),
    }


TASK = TextClassificationTask()
