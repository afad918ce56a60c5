"""Token embedding scaled by sqrt(d), plus positions, with optional tied output."""

import math

import keras
from keras import ops

from tfformer.errors import InputError, InputTypeError
from tfformer.layers.learned_position_embedding import LearnedPositionEmbedding
from tfformer.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from tfformer.layers.validation import check_positive_int

POSITION_KINDS = ("sinusoidal", "learned", "none")


@keras.saving.register_keras_serializable(package="tfformer")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Embeds token ids and adds position information (paper section 3.4).

        output = E[ids] * sqrt(d) + PE(positions)

    Called with `reverse=True` on hidden states it is the output projection
    `logits = h E^T` when `tie_weights=True` (the paper shares the embedding
    and pre-softmax matrices), or `h W_out` with its own matrix otherwise.

    Args:
        vocabulary_size: number of token ids.
        embedding_dim: d, the model width.
        sequence_length: longest sequence; required for `position="learned"`.
        position: "sinusoidal" (the paper), "learned" (BERT/GPT-2), or "none"
            (for rotary attention, where positions enter inside attention).
        scale_embeddings: multiply token embeddings by sqrt(d) as the paper
            does; BERT and GPT-2 do not.
        tie_weights: reuse the embedding matrix for `reverse=True`.
        mask_zero: treat id 0 as padding and attach a Keras mask.
        padding_logit: None, or the constant `reverse=True` writes as id 0's
            logit instead of its dot product. A checkpoint converted with its
            ids shifted by one (GPT-2, whose id 0 is a real token) keeps id 0
            for padding with -1e4 there, so padding takes no probability.
        embeddings_initializer: initializer of the token (and output) matrix.

    Call arguments:
        inputs: `(batch, length)` integer token ids, or with `reverse=True`
            `(batch, length, embedding_dim)` hidden states.
        start_index: position of the first token (int, scalar or `(batch,)`
            tensor), for incremental decoding.
        reverse: project hidden states to vocabulary logits.

    Returns:
        `(batch, length, embedding_dim)` embeddings, or with `reverse=True`
        `(batch, length, vocabulary_size)` logits.

    Example:
    >>> embed = TokenAndPositionEmbedding(1000, 64, mask_zero=True)
    >>> h = embed(keras.ops.array([[5, 7, 0]]))   # (1, 3, 64), masked at 0
    >>> logits = embed(h, reverse=True)           # (1, 3, 1000)
    """

    def __init__(
        self,
        vocabulary_size,
        embedding_dim,
        sequence_length=None,
        position="sinusoidal",
        scale_embeddings=True,
        tie_weights=True,
        mask_zero=False,
        embeddings_initializer=None,
        padding_logit=None,
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("embedding_dim", embedding_dim)
        check_positive_int("sequence_length", sequence_length, allow_none=True)
        if position not in POSITION_KINDS:
            raise InputError(
                f"position must be one of {POSITION_KINDS}. "
                f"Received: position={position!r}"
            )
        if position == "learned" and sequence_length is None:
            raise InputError(
                "position='learned' needs sequence_length. "
                "Received: sequence_length=None"
            )
        if padding_logit is not None and (
            isinstance(padding_logit, bool)
            or not isinstance(padding_logit, int | float)
            or not math.isfinite(padding_logit)
        ):
            raise InputError(
                "padding_logit must be None or a finite number. "
                f"Received: padding_logit={padding_logit!r}"
            )
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.padding_logit = padding_logit
        self.embedding_dim = embedding_dim
        self.sequence_length = sequence_length
        self.position = position
        self.scale_embeddings = scale_embeddings
        self.tie_weights = tie_weights
        self.mask_zero = mask_zero
        # The paper's scale sqrt(d) pairs with N(0, d^-1/2) token vectors, so
        # embeddings and positions start at the same magnitude.
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(stddev=embedding_dim**-0.5)
        )
        self.supports_masking = mask_zero
        self.position_embedding = None
        if position == "sinusoidal":
            self.position_embedding = SinusoidalPositionEncoding(
                dtype=self.dtype_policy, name="position_embedding"
            )
        elif position == "learned":
            self.position_embedding = LearnedPositionEmbedding(
                sequence_length, dtype=self.dtype_policy, name="position_embedding"
            )

    def build(self, inputs_shape):
        self.token_embeddings = self.add_weight(
            name="token_embeddings",
            shape=(self.vocabulary_size, self.embedding_dim),
            initializer=self.embeddings_initializer,
        )
        if not self.tie_weights:
            self.reverse_embeddings = self.add_weight(
                name="reverse_embeddings",
                shape=(self.embedding_dim, self.vocabulary_size),
                initializer=self.embeddings_initializer.clone(),
            )
        if self.position_embedding is not None:
            self.position_embedding.build((None, None, self.embedding_dim))
        self.built = True

    def call(self, inputs, start_index=0, reverse=False):
        if reverse:
            if inputs.shape[-1] != self.embedding_dim:
                raise InputError(
                    f"reverse=True expects hidden states with last axis "
                    f"{self.embedding_dim}. Received: inputs with shape "
                    f"{inputs.shape}"
                )
            if self.tie_weights:
                kernel = ops.transpose(self.token_embeddings)
            else:
                kernel = self.reverse_embeddings
            logits = ops.matmul(inputs, ops.cast(kernel, inputs.dtype))
            if self.padding_logit is not None:
                is_padding = ops.arange(self.vocabulary_size) == 0
                constant = ops.cast(self.padding_logit, logits.dtype)
                logits = ops.where(is_padding, constant, logits)
            return logits
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if "int" not in dtype:
            raise InputTypeError(
                f"TokenAndPositionEmbedding expects integer token ids. "
                f"Received: inputs with dtype {dtype}"
            )
        if len(inputs.shape) != 2:
            raise InputError(
                "TokenAndPositionEmbedding expects token ids of shape "
                f"(batch, length). Received: inputs with shape {inputs.shape}"
            )
        table = ops.cast(self.token_embeddings, self.compute_dtype)
        embedded = ops.take(table, inputs, axis=0)  # (B, L, d)
        if self.scale_embeddings:
            embedded = embedded * ops.cast(
                math.sqrt(self.embedding_dim), self.compute_dtype
            )
        if self.position_embedding is not None:
            embedded = embedded + self.position_embedding(
                embedded, start_index=start_index
            )
        return embedded

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero or "int" not in keras.backend.standardize_dtype(
            inputs.dtype
        ):
            # Hidden states (reverse=True) keep whatever mask they carried.
            return mask
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "sequence_length": self.sequence_length,
                "position": self.position,
                "scale_embeddings": self.scale_embeddings,
                "tie_weights": self.tie_weights,
                "mask_zero": self.mask_zero,
                "padding_logit": self.padding_logit,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
