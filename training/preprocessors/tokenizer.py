"""`Tokenizer`: any tokenizer of the product as a Keras layer.

The layer runs the run's own tokenizer (`tfformer.preprocessing`'s byte,
byte-level BPE, SentencePiece and token-id tokenizers, and the WordPiece of
`tfformer.training.text.wordpiece`) eagerly, inside `tf.data.Dataset.map`
and inside a traced `tf.function`, so the ids are the ones training and the
exports use. TensorFlow directly, as those tokenizers are: text
preprocessing is `tf.data` code (tested with Keras's TensorFlow backend).

Saved with a model (`.keras`), the layer's config holds the run manifest's
entry for the tokenizer (its kind, casing and a converted vocabulary's
options) and the archive's assets its file (`save_assets`, `load_assets`),
as keras-hub's tokenizers keep their vocabularies.
"""

import os

import keras
import tensorflow as tf

from tfformer.errors import InputError, InputTypeError
from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.sentencepiece_tokenizer import SentencePieceTokenizer
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.runs.directory import RunDirectory, TokenizerSpec, tokenizer_file
from tfformer.runs.manifest import TokenizerEntry
from tfformer.training.text.vocabulary import load_tokenizer
from tfformer.training.text.wordpiece import WordPieceTokenizer

# The manifest's kind of each tokenizer class.
KINDS = {
    ByteTokenizer: "byte",
    WordPieceTokenizer: "wordpiece",
    ByteLevelBPETokenizer: "bpe",
    SentencePieceTokenizer: "sentencepiece",
    TokenIdTokenizer: "ids",
}


def string_tensor(inputs, name="inputs"):
    """`inputs` (a str, a list or array of str, or a string tensor) as a
    string tensor; TypeError naming `name` and what was received otherwise."""
    if isinstance(inputs, tf.RaggedTensor):
        raise InputTypeError(
            f"{name} must be strings, a flat batch of them (not ragged or "
            f"nested). Received: a RaggedTensor of {inputs.dtype.name}"
        )
    if isinstance(inputs, tf.Tensor | tf.Variable):
        if inputs.dtype != tf.string:
            raise InputTypeError(
                f"{name} must be strings. Received: a tensor of {inputs.dtype.name}"
            )
        return inputs
    if isinstance(inputs, str | bytes):
        return tf.constant(inputs)
    try:
        items = list(inputs)
    except TypeError:
        raise InputTypeError(
            f"{name} must be strings. Received: {type(inputs).__name__}"
        ) from None
    bad = [x for x in items if not isinstance(x, str | bytes)]
    if bad:
        raise InputTypeError(
            f"{name} must be a flat list of strings. Received: "
            f"{type(bad[0]).__name__} {bad[0]!r:.60}"
        )
    return tf.constant(items, tf.string, shape=[len(items)])


@keras.saving.register_keras_serializable(package="tfformer")
class Tokenizer(keras.layers.Layer):
    """Strings to token ids with a run's tokenizer, as a Keras layer.

    `call` takes a string (ids of shape `(None,)`) or a batch of strings
    (a `(batch, None)` RaggedTensor of int32), as a Python str or list, a
    NumPy array or a string tensor; it runs eagerly, in `tf.data.Dataset.map`
    and in a traced graph. No start or end tokens are added (the packers add
    them).

    Args:
        tokenizer: a tokenizer of the product (`ByteTokenizer`,
            `WordPieceTokenizer`, `ByteLevelBPETokenizer`,
            `SentencePieceTokenizer`, `TokenIdTokenizer`); None only when
            the layer is restored from a saved model, whose assets hold it.
        entry: the run manifest's entry for it (`TokenizerEntry.to_json()`:
            kind, casing, a converted vocabulary's options); taken from
            `tokenizer` when None.

    Example:

    >>> tokenizer = Tokenizer.from_run("runs/polarity")
    >>> tokenizer(["a gripping film"])           # RaggedTensor of ids
    >>> tokenizer.detokenize(tokenizer(["a gripping film"]))
    """

    def __init__(self, tokenizer=None, entry=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self._entry = None
        self._tokenizer = None
        self._asset_error = None  # see `load_assets`
        if entry is not None:
            self._entry = TokenizerEntry.from_json(entry, "entry")
        if tokenizer is not None:
            self.set_tokenizer(tokenizer)
        elif entry is None:
            raise InputError(
                "Tokenizer needs a tokenizer (or the entry of one restored "
                "from a saved model). Received: tokenizer=None, entry=None"
            )
        self.built = True

    @classmethod
    def from_run(cls, path, role="text", **kwargs):
        """The layer of the `role` tokenizer ("text", "source" or "target")
        of the run directory `path`."""
        directory = RunDirectory(path)
        if role not in directory.manifest.tokenizers:
            raise InputError(
                f"role must be one of {sorted(directory.manifest.tokenizers)} "
                f"for {directory.path}. Received: role={role!r}"
            )
        entry = directory.manifest.tokenizers[role]
        return cls(load_tokenizer(directory.tokenizer(role)), entry.to_json(), **kwargs)

    def set_tokenizer(self, tokenizer):
        kind = KINDS.get(type(tokenizer))
        if kind is None:
            raise InputTypeError(
                f"tokenizer must be one of {[c.__name__ for c in KINDS]}. "
                f"Received: {type(tokenizer).__name__}"
            )
        if self._entry is None:
            options = tokenizer.options() if kind == "wordpiece" else {}
            self._entry = TokenizerEntry(
                kind, bool(getattr(tokenizer, "lower_case", False)), **options
            )
        elif self._entry.kind != kind:
            raise InputError(
                f"entry names a {self._entry.kind!r} tokenizer. Received: a "
                f"{kind!r} tokenizer ({type(tokenizer).__name__})"
            )
        self._tokenizer = tokenizer

    @property
    def ready(self):
        """Whether the layer holds its tokenizer (a layer made from a config
        alone gets it from the saved model's assets)."""
        return self._tokenizer is not None

    @property
    def tokenizer(self):
        """The product's tokenizer the layer runs."""
        if self._tokenizer is None:
            raise InputError(
                f"{self.name} has no tokenizer: it was made from a config "
                "alone, or read from a .keras archive without its assets "
                f"({tokenizer_file(self.kind, 'text')}). Load the model it "
                "was saved with, whole."
            )
        return self._tokenizer

    @property
    def kind(self):
        return self._entry.kind

    @property
    def vocabulary_size(self):
        return int(self.tokenizer.vocabulary_size)

    @property
    def pad_id(self):
        return int(self.tokenizer.pad_id)

    @property
    def start_id(self):
        return int(self.tokenizer.start_id)

    @property
    def end_id(self):
        return int(self.tokenizer.end_id)

    def __call__(self, inputs, *args, **kwargs):
        # Keras takes tensors as positional inputs: Python strings become one.
        return super().__call__(string_tensor(inputs), *args, **kwargs)

    def call(self, inputs):
        if inputs.shape.rank == 0:
            return self.tokenizer.tokenize(tf.reshape(inputs, [1]))[0]
        if inputs.shape.rank != 1:
            raise InputError(
                f"{self.name} takes a string or a flat batch of strings. "
                f"Received: a tensor of shape {inputs.shape}"
            )
        return self.tokenizer.tokenize(inputs)

    def detokenize(self, ids):
        """Ids (a batch, Ragged or dense and padded with 0; or one sequence)
        back to strings, as the run's tokenizer writes them."""
        if isinstance(ids, tf.RaggedTensor):
            return self.tokenizer.detokenize(ids)
        ids = tf.convert_to_tensor(ids, tf.int32)
        if ids.shape.rank == 1:
            return self.tokenizer.detokenize(ids[None, :])[0]
        return self.tokenizer.detokenize(tf.RaggedTensor.from_tensor(ids, padding=0))

    def compute_output_spec(self, inputs):
        shape = (None,) if len(inputs.shape) == 0 else (inputs.shape[0], None)
        return keras.KerasTensor(shape, "int32", ragged=True)

    # -- saving ----------------------------------------------------------------

    def get_config(self):
        return {**super().get_config(), "entry": self._entry.to_json()}

    def save_assets(self, dir_path):
        """Writes the tokenizer's file (its vocabulary, merges or model)."""
        self.tokenizer.save(os.path.join(dir_path, tokenizer_file(self.kind, "text")))

    def load_assets(self, dir_path):
        """Reads the tokenizer `save_assets` wrote (untrusted: the product's
        loaders check it and name the file when it is bad)."""
        name = tokenizer_file(self.kind, "text")
        if dir_path is None:
            # Keras visits a layer once per path to it (a model's attribute,
            # then its `layers`), and passes None where no assets are: after
            # a first visit that loaded them, or failed (its error stands).
            if self._tokenizer is not None:
                return
            raise self._asset_error or InputError(
                f"{self.name}: the model's archive holds no {name} for this "
                "Tokenizer (its assets are missing)."
            )
        path = os.path.join(dir_path, name)
        if self.kind == "byte" and not os.path.exists(path):
            self.set_tokenizer(ByteTokenizer())
            return
        entry = self._entry
        spec = TokenizerSpec(entry.kind, path, entry.lower_case, entry.options)
        try:
            self.set_tokenizer(load_tokenizer(spec))
        except ValueError as e:
            self._asset_error = e
            raise
