"""BERT's bidirectional encoder (Devlin et al. 2019)."""

import keras

from tfformer.layers.dropout import Dropout
from tfformer.layers.feed_forward import get_activation
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.backbone import Backbone
from tfformer.models.common import encoder_stack


@keras.saving.register_keras_serializable(package="tfformer")
class BertBackbone(Backbone):
    """A BERT encoder: token + segment + learned position embeddings, then
    LayerNorm and dropout, post-norm GELU blocks, and the pooler
    tanh(W h_[CLS] + b) of the first position.

    `{"token_ids": (batch, L), "segment_ids": (batch, L)}` in;
    `{"sequence_output": (batch, L, hidden_dim), "pooled_output": (batch,
    hidden_dim)}` out. Id 0 is padding. Defaults are BERT-base. Heads:
    `MaskedLM`, `TextClassifier`, `SentenceEmbedder`.

    Args:
        vocabulary_size: vocabulary size.
        num_layers, hidden_dim, num_heads, intermediate_dim: sizes.
        dropout: dropout rate.
        activation_dropout: dropout on the FFN's hidden activations; None:
            `dropout`. keras-hub's blocks, GPT-2 and BERT have none (0.0).
        max_sequence_length: rows of the position table.
        num_segments: number of segment (token type) ids.
        activation: FFN activation.
        layer_norm_epsilon: epsilon of the layer norms.
        dtype: dtype policy of every layer (None: the global policy).

    Attributes:
        token_embedding (a `TokenAndPositionEmbedding`, positions inside it),
        segment_embedding, embeddings_norm, encoder_blocks (a list of
        `TransformerEncoderBlock`) and pooler.
    """

    presets = {
        "bert_tiny": dict(
            num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512
        ),
        "bert_base": dict(
            num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072
        ),
    }

    def __init__(
        self,
        vocabulary_size,
        *,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        activation_dropout=None,
        max_sequence_length=512,
        num_segments=2,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        dtype=None,
        **kwargs,
    ):
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("num_layers", num_layers)
        check_positive_int("num_segments", num_segments)
        policy = self.resolve_dtype(dtype)

        # === Layers, each created right before its first call ===
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
        token_embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            hidden_dim,
            sequence_length=max_sequence_length,
            position="learned",
            scale_embeddings=False,
            mask_zero=True,
            embeddings_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=policy,
            name="token_embedding",
        )
        tokens = token_embedding(token_ids)
        segment_embedding = keras.layers.Embedding(
            num_segments,
            hidden_dim,
            embeddings_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=policy,
            name="segment_embedding",
        )
        x = keras.layers.Add(dtype=policy, name="embeddings_add")(
            [tokens, segment_embedding(segment_ids)]
        )
        embeddings_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="embeddings_norm"
        )
        x = embeddings_norm(x)
        x = Dropout(dropout, dtype=policy, name="embeddings_dropout")(x)
        # Keras's Add drops the embedding's mask, so pass padding explicitly.
        x, blocks = encoder_stack(
            x,
            num_layers,
            policy,
            padding_mask=keras.ops.not_equal(token_ids, 0),
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            activation_dropout=activation_dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        pooler = keras.layers.Dense(
            hidden_dim, activation="tanh", dtype=policy, name="pooler"
        )
        pooled = pooler(x[:, 0, :])
        super().__init__(
            inputs={"token_ids": token_ids, "segment_ids": segment_ids},
            outputs={"sequence_output": x, "pooled_output": pooled},
            dtype=policy,
            **kwargs,
        )

        # === Handles and config ===
        self.token_embedding = token_embedding
        self.segment_embedding = segment_embedding
        self.embeddings_norm = embeddings_norm
        self.encoder_blocks = blocks
        self.pooler = pooler
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation_dropout = activation_dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = layer_norm_epsilon

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation_dropout": self.activation_dropout,
                "max_sequence_length": self.max_sequence_length,
                "num_segments": self.num_segments,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
