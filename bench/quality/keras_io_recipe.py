"""What a keras-hub user does today: the keras.io example "English-to-Spanish
translation with KerasHub" (keras-io `examples/nlp/
neural_machine_translation_with_keras_hub.py`, last modified 2024/04/30) run
as written, on Multi30k De->En instead of Anki En->Es, under a wall-clock
budget, then scored with sacreBLEU on test_2016_flickr.

The recipe, unchanged apart from the data and the budget:
- lowercased sentence pairs; WordPiece vocabularies of (at most) 15,000
  tokens per language from `keras_hub.tokenizers.compute_word_piece_vocabulary`
  over the training sentences, reserved `[PAD] [UNK] [START] [END]`;
- `StartEndPacker`: sources padded to 40, targets `[START] ... [END]` padded
  to 41 (inputs and labels are its two shifted 40-token views); batch 64,
  `batch -> map -> shuffle(2048) -> prefetch(16) -> cache()`;
- one `TransformerEncoder` and one `TransformerDecoder` (d 256, FFN 2048, 8
  heads, keras-hub's default dropout 0), `TokenAndPositionEmbedding`
  without `mask_zero`, `Dropout(0.5)` and a softmax `Dense` over 15,000;
- `compile("rmsprop", loss="sparse_categorical_crossentropy")`: RMSprop at
  Keras's default 1e-3, no warmup or schedule, no label smoothing, the loss
  over every position padding included, no averaging; Keras's default
  `jit_compile="auto"` (no XLA on a CPU-only machine: Keras resolves
  "auto" to XLA only where TensorFlow sees a GPU or TPU);
- decoding: `keras_hub.samplers.GreedySampler` over the full model (no
  cache; the model re-runs on the 40-token prompt at every step), stopping
  at `[END]`; sources cut to 40 tokens. The example decodes one sentence at
  a time; here 64 at a time, which gives the same tokens up to each row's
  first `[END]` (the prompt's padding lies after the index and the causal
  mask hides it; no source mask in either), but the sampler goes on
  writing into rows that have ended until every row has: those tokens are
  set to `[PAD]` before detokenizing, as decoding alone would have stopped.

The budget replaces the example's `EPOCHS = 1` ("should be at least 10 for
convergence"): `--minutes` of training (the epoch in progress is cut at a
batch end), at most `--epochs` epochs.

Usage:
  python -m bench.quality.keras_io_recipe --minutes 60 [--epochs 200] [--limit N]
      [--output bench/results/keras_io_recipe_de_en.json]
"""

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from bench import common
from tfformer.training.config import load_config
from tfformer.training.evaluation.translation import score_translations
from tfformer.training.tasks import get_task

CONFIG = os.path.join("training", "configs", "translate_de_en.json")

# The example's constants.
BATCH_SIZE = 64
MAX_SEQUENCE_LENGTH = 40
SOURCE_VOCAB_SIZE = 15000
TARGET_VOCAB_SIZE = 15000
EMBED_DIM = 256
INTERMEDIATE_DIM = 2048
NUM_HEADS = 8
RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]
WEIGHTS = os.path.join(
    os.path.expanduser("~"), ".cache", "tfformer", "keras_io_recipe.weights.h5"
)


class Budget(keras.callbacks.Callback):
    """Stops training at the first batch end past `minutes`."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60
        self.batches = 0

    def on_train_begin(self, logs=None):
        self.began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if time.perf_counter() - self.began > self.seconds:
            self.model.stop_training = True


def word_piece(texts, size):
    dataset = tf.data.Dataset.from_tensor_slices(texts)
    return keras_hub.tokenizers.compute_word_piece_vocabulary(
        dataset.batch(1000).prefetch(2), vocabulary_size=size, reserved_tokens=RESERVED
    )


def recipe(train_pairs):
    """The example's tokenizers, preprocessing and model."""
    source_tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=word_piece([s for s, _ in train_pairs], SOURCE_VOCAB_SIZE),
        lowercase=False,
    )
    target_tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=word_piece([t for _, t in train_pairs], TARGET_VOCAB_SIZE),
        lowercase=False,
    )

    def preprocess_batch(source, target):
        source = keras_hub.layers.StartEndPacker(
            sequence_length=MAX_SEQUENCE_LENGTH,
            pad_value=source_tokenizer.token_to_id("[PAD]"),
        )(source_tokenizer(source))
        target = keras_hub.layers.StartEndPacker(
            sequence_length=MAX_SEQUENCE_LENGTH + 1,
            start_value=target_tokenizer.token_to_id("[START]"),
            end_value=target_tokenizer.token_to_id("[END]"),
            pad_value=target_tokenizer.token_to_id("[PAD]"),
        )(target_tokenizer(target))
        return (
            {"encoder_inputs": source, "decoder_inputs": target[:, :-1]},
            target[:, 1:],
        )

    def make_dataset(pairs):
        sources, targets = zip(*pairs, strict=True)
        dataset = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        dataset = dataset.batch(BATCH_SIZE)
        dataset = dataset.map(preprocess_batch, num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.shuffle(2048).prefetch(16).cache()

    encoder_inputs = keras.Input(shape=(None,), name="encoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=SOURCE_VOCAB_SIZE,
        sequence_length=MAX_SEQUENCE_LENGTH,
        embedding_dim=EMBED_DIM,
    )(encoder_inputs)
    encoder_outputs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=INTERMEDIATE_DIM, num_heads=NUM_HEADS
    )(inputs=x)
    decoder_inputs = keras.Input(shape=(None,), name="decoder_inputs")
    encoded = keras.Input(shape=(None, EMBED_DIM), name="decoder_state_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=TARGET_VOCAB_SIZE,
        sequence_length=MAX_SEQUENCE_LENGTH,
        embedding_dim=EMBED_DIM,
    )(decoder_inputs)
    x = keras_hub.layers.TransformerDecoder(
        intermediate_dim=INTERMEDIATE_DIM, num_heads=NUM_HEADS
    )(decoder_sequence=x, encoder_sequence=encoded)
    x = keras.layers.Dropout(0.5)(x)
    decoder_outputs = keras.layers.Dense(TARGET_VOCAB_SIZE, activation="softmax")(x)
    decoder = keras.Model([decoder_inputs, encoded], decoder_outputs)
    transformer = keras.Model(
        [encoder_inputs, decoder_inputs],
        decoder([decoder_inputs, encoder_outputs]),
        name="transformer",
    )
    return source_tokenizer, target_tokenizer, make_dataset, transformer


def translate(transformer, source_tokenizer, target_tokenizer, sentences):
    """The example's `decode_sequences`, 64 sentences at a time."""
    start = target_tokenizer.token_to_id("[START]")
    end = target_tokenizer.token_to_id("[END]")
    pad = target_tokenizer.token_to_id("[PAD]")
    sampler = keras_hub.samplers.GreedySampler()
    out = []
    for first in range(0, len(sentences), BATCH_SIZE):
        chunk = sentences[first : first + BATCH_SIZE]
        # Eager keras-hub tokenizers return Python lists of ids.
        source = np.zeros((len(chunk), MAX_SEQUENCE_LENGTH), "int32")
        for row, ids in enumerate(source_tokenizer(chunk)):
            ids = ids[:MAX_SEQUENCE_LENGTH]
            source[row, : len(ids)] = ids
        source = tf.constant(source)

        def next_token(prompt, cache, index, source=source):
            logits = transformer([source, prompt])[:, index - 1, :]
            return logits, None, cache

        prompt = tf.concat(
            [
                tf.fill([len(chunk), 1], start),
                tf.fill([len(chunk), MAX_SEQUENCE_LENGTH - 1], pad),
            ],
            axis=1,
        )
        tokens = sampler(next_token, prompt, stop_token_ids=[end], index=1)
        # Everything after a row's first generated [END] becomes [PAD].
        tokens = np.array(tokens)  # a writable copy
        ended = np.cumsum(tokens[:, 1:] == end, axis=1) > 0
        after = np.concatenate([np.zeros_like(ended[:, :1]), ended[:, :-1]], axis=1)
        tokens[:, 1:][after] = pad
        texts = target_tokenizer.detokenize(tokens)
        texts = texts.numpy() if hasattr(texts, "numpy") else texts
        for text in texts:
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            for token in RESERVED[:1] + RESERVED[2:]:
                text = text.replace(token, "")
            out.append(" ".join(text.split()))
        print(f"  translated {len(out)}/{len(sentences)}", flush=True)
    return out


def main():
    p = common.argument_parser(__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument(
        "--decode-only",
        action="store_true",
        help="decode again with the weights the last run kept (WEIGHTS)",
    )
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--limit", type=int, help="test sentences (default: all 1,000)")
    p.add_argument(
        "--output",
        default=os.path.join("bench", "results", "keras_io_recipe_de_en.json"),
    )
    args = p.parse_args()
    if args.minutes <= 0:
        p.error(f"--minutes must be positive. Received: {args.minutes}")
    if args.epochs < 1:
        p.error(f"--epochs must be >= 1. Received: {args.epochs}")
    config = load_config(CONFIG)
    raw = get_task(config.task).raw_splits(config.data)
    lower = {k: [(s.lower(), t.lower()) for s, t in v] for k, v in raw.items()}
    keras.utils.set_random_seed(0)
    built, vocab_seconds = common.timed(recipe, lower["train"])
    source_tokenizer, target_tokenizer, make_dataset, transformer = built
    print(
        f"vocabularies: {source_tokenizer.vocabulary_size()} source, "
        f"{target_tokenizer.vocabulary_size()} target ({vocab_seconds:.0f} s)"
    )
    transformer.compile(
        "rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    if args.decode_only:
        transformer.load_weights(WEIGHTS)
        with open(args.output, encoding="utf-8") as f:
            results = json.load(f)
        history = dict(results["history"])
        steps, train_seconds = results["steps"], results["train_seconds"]
    else:
        budget = Budget(args.minutes)
        began = time.perf_counter()
        history = transformer.fit(
            make_dataset(lower["train"]),
            epochs=args.epochs,
            validation_data=make_dataset(lower["validation"]),
            callbacks=[budget],
            verbose=2,
        ).history
        steps, train_seconds = budget.batches, time.perf_counter() - began
        # Kept outside the repository, to decode again without training.
        os.makedirs(os.path.dirname(WEIGHTS), exist_ok=True)
        transformer.save_weights(WEIGHTS)
    pairs = raw["test"][: args.limit]
    hypotheses, decode_seconds = common.timed(
        translate,
        transformer,
        source_tokenizer,
        target_tokenizer,
        [s.lower() for s, _ in pairs],
    )
    scores = score_translations(hypotheses, [t for _, t in pairs])
    results = dict(
        recipe="keras-io examples/nlp/neural_machine_translation_with_keras_hub.py",
        data="Multi30k De->En (training/configs/translate_de_en.json's files)",
        minutes=args.minutes,
        epochs_limit=args.epochs,
        epochs_run=len(history["loss"]),
        steps=steps,
        train_seconds=round(train_seconds, 1),
        vocabulary=dict(
            source=source_tokenizer.vocabulary_size(),
            target=target_tokenizer.vocabulary_size(),
            seconds=round(vocab_seconds, 1),
        ),
        parameters=transformer.count_params(),
        history={k: [round(float(x), 4) for x in v] for k, v in history.items()},
        test=dict(
            scores,
            sentences=len(pairs),
            decoding="keras_hub.samplers.GreedySampler, full recompute, batch 64",
            decode_seconds=round(decode_seconds, 1),
            examples=[
                {"source": s, "reference": r, "translation": h}
                for (s, r), h in list(zip(pairs, hypotheses, strict=True))[:5]
            ],
        ),
    )
    common.write_result(args.output, results)
    print(json.dumps({k: v for k, v in results["test"].items() if "sign" not in k}))


if __name__ == "__main__":
    main()
