"""A task's preprocessor: raw strings to its model's inputs (and labels),
one layer, as keras-hub's task preprocessors are.

`call(x, y=None, sample_weight=None)` returns what `model.fit` reads
(`keras.utils.pack_x_y_sample_weight`): the model's inputs alone when there
is nothing else, else a tuple. Each maps over a `tf.data` batch of strings.

- `TextClassifierPreprocessor`: texts, or pairs `(texts_a, texts_b)`, to a
  BERT encoder's `token_ids` and `segment_ids`.
- `CausalLMPreprocessor`: texts to windows of the context, with next-token
  labels and weights (0 on padding); `y` must be None.
- `Seq2SeqPreprocessor`: `(sources, targets)` (or sources with `y`
  targets) to an encoder-decoder's inputs, labels and weights; sources
  alone to the encoder's input.

A pair is a tuple (Keras's structure); a list is data (a batch of strings).
"""

import keras
import tensorflow as tf

from tfformer.errors import InputError, InputTypeError
from tfformer.training.preprocessors.packers import (
    BertPacker,
    CausalLMPacker,
    Seq2SeqPacker,
)
from tfformer.training.preprocessors.tokenizer import Tokenizer


def checked_tokenizer(tokenizer, name):
    if not isinstance(tokenizer, Tokenizer):
        raise InputTypeError(
            f"{name} must be a tfformer.training.preprocessors.Tokenizer. "
            f"Received: {type(tokenizer).__name__}"
        )
    return tokenizer


def deserialized(config, *names):
    config = dict(config)
    for name in names:
        if isinstance(config.get(name), dict):
            config[name] = keras.saving.deserialize_keras_object(config[name])
    return config


class Preprocessor(keras.layers.Layer):
    """What the task preprocessors share: weightless, not trainable,
    nested layers serialized in the config."""

    # The constructor arguments that are layers.
    layer_arguments = ()

    def __init__(self, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.built = True

    def __call__(self, x, y=None, sample_weight=None, **kwargs):
        # Strings become tensors in the tokenizers; Keras takes no Python
        # strings positionally, so the layer's own call gets them as keywords.
        return self.call(x, y=y, sample_weight=sample_weight, **kwargs)

    def get_config(self):
        config = super().get_config()
        for name in self.layer_arguments:
            config[name] = keras.saving.serialize_keras_object(getattr(self, name))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**deserialized(config, *cls.layer_arguments))


@keras.saving.register_keras_serializable(package="tfformer")
class TextClassifierPreprocessor(Preprocessor):
    """Texts (or pairs) to a BERT classifier's inputs, as training packs
    them (`BertPacker`).

    Args:
        tokenizer: the run's text `Tokenizer` (WordPiece).
        sequence_length: the model's `max_length`.
        pairs: whether the model reads sentence pairs: `x` is then
            `(texts_a, texts_b)`.
        start_id, end_id: the vocabulary's [START]/[END] ([CLS]/[SEP]);
            None: the tokenizer's.
    """

    layer_arguments = ("tokenizer",)

    def __init__(
        self,
        tokenizer,
        sequence_length,
        pairs=False,
        start_id=None,
        end_id=None,
        **kwargs,
    ):
        self.tokenizer = checked_tokenizer(tokenizer, "tokenizer")
        start_id = tokenizer.start_id if start_id is None else start_id
        end_id = tokenizer.end_id if end_id is None else end_id
        self.packer = BertPacker(sequence_length, start_id, end_id)
        self.pairs = bool(pairs)
        super().__init__(**kwargs)

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    def call(self, x, y=None, sample_weight=None):
        if self.pairs:
            if not isinstance(x, tuple) or len(x) != 2:
                raise InputError(
                    "x must be a pair (texts_a, texts_b) for a classifier of "
                    f"sentence pairs. Received: {type(x).__name__}"
                )
            inputs = self.packer((self.tokenizer(x[0]), self.tokenizer(x[1])))
        else:
            inputs = self.packer(self.tokenizer(x))
        return keras.utils.pack_x_y_sample_weight(inputs, y, sample_weight)

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "pairs": self.pairs,
            "start_id": self.packer.start_id,
            "end_id": self.packer.end_id,
        }


@keras.saving.register_keras_serializable(package="tfformer")
class CausalLMPreprocessor(Preprocessor):
    """Texts to a causal LM's windows: inputs, next-token labels and
    weights (`CausalLMPacker`); a long text gives several windows.

    Args:
        tokenizer: the run's text `Tokenizer`.
        sequence_length: the model's context.
        start_id, end_id: ids put before and after each text; None: none
            (a tfformer causal-LM run trains on a plain stream).
    """

    layer_arguments = ("tokenizer",)

    def __init__(self, tokenizer, sequence_length, start_id=None, end_id=None, **kw):
        self.tokenizer = checked_tokenizer(tokenizer, "tokenizer")
        self.packer = CausalLMPacker(sequence_length, start_id, end_id)
        super().__init__(**kw)

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    def call(self, x, y=None, sample_weight=None):
        if y is not None or sample_weight is not None:
            raise InputError(
                "y and sample_weight must be None for a causal LM: its labels "
                "are the next tokens of x. Received: "
                f"y={type(y).__name__}, sample_weight={type(sample_weight).__name__}"
            )
        return self.packer(self.tokenizer(x))

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "start_id": self.packer.start_id,
            "end_id": self.packer.end_id,
        }


@keras.saving.register_keras_serializable(package="tfformer")
class Seq2SeqPreprocessor(Preprocessor):
    """Sentence pairs to an encoder-decoder's inputs, labels and weights
    (`Seq2SeqPacker`); sources alone to the encoder's input.

    Args:
        source_tokenizer, target_tokenizer: the run's `Tokenizer`s.
        sequence_length: the run's `max_length`.
        start_id, end_id: the target's [START]/[END]; None: the target
            tokenizer's.
    """

    layer_arguments = ("source_tokenizer", "target_tokenizer")

    def __init__(
        self,
        source_tokenizer,
        target_tokenizer,
        sequence_length,
        start_id=None,
        end_id=None,
        **kwargs,
    ):
        self.source_tokenizer = checked_tokenizer(source_tokenizer, "source_tokenizer")
        self.target_tokenizer = checked_tokenizer(target_tokenizer, "target_tokenizer")
        start_id = target_tokenizer.start_id if start_id is None else start_id
        end_id = target_tokenizer.end_id if end_id is None else end_id
        self.packer = Seq2SeqPacker(sequence_length, start_id, end_id)
        super().__init__(**kwargs)

    @property
    def sequence_length(self):
        return self.packer.sequence_length

    def call(self, x, y=None, sample_weight=None):
        if isinstance(x, tuple):  # a list is data: the sources
            if len(x) != 2 or y is not None:
                raise InputError(
                    "x must be sources, or a pair (sources, targets) with y "
                    f"None. Received: a {type(x).__name__} of {len(x)}"
                    + ("" if y is None else " and y")
                )
            x, y = x
        sources = self.source_tokenizer(x)
        if y is None:
            return self.packer(sources)
        inputs, labels, weights = self.packer((sources, self.target_tokenizer(y)))
        if sample_weight is not None:
            weights = weights * tf.cast(sample_weight, tf.float32)[:, None]
        return inputs, labels, weights

    def get_config(self):
        return {
            **super().get_config(),
            "sequence_length": self.sequence_length,
            "start_id": self.packer.start_id,
            "end_id": self.packer.end_id,
        }
