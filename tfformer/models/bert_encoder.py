"""A BERT-style bidirectional encoder and its two task heads."""

import keras

from tfformer.layers.dropout import Dropout
from tfformer.layers.layer_normalization import LayerNormalization
from tfformer.layers.masked_lm_head import MaskedLMHead
from tfformer.layers.sequence_pooling import SequencePooling
from tfformer.layers.token_and_position_embedding import TokenAndPositionEmbedding
from tfformer.layers.validation import check_positive_int
from tfformer.models.common import encoder_stack, float32_logits


def bert_encoder(
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
    name="bert_encoder",
):
    """Builds a BERT encoder ("backbone") as a functional `keras.Model`.

    `{"token_ids": (batch, L), "segment_ids": (batch, L)}` in; `{"sequence_output":
    (batch, L, hidden_dim), "pooled_output": (batch, hidden_dim)}` out. Id 0 is
    padding. Embeddings = token + learned position + segment, then LayerNorm
    and dropout; post-norm GELU blocks; the pooled output is
    tanh(W h_[CLS] + b) of the first position. Defaults are BERT-base.

    Add a head with `bert_masked_lm(encoder)` or `bert_classifier(encoder, n)`.

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
        name: the model's name.
    """
    check_positive_int("vocabulary_size", vocabulary_size)
    check_positive_int("num_layers", num_layers)
    check_positive_int("num_segments", num_segments)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    tokens = TokenAndPositionEmbedding(
        vocabulary_size,
        hidden_dim,
        sequence_length=max_sequence_length,
        position="learned",
        scale_embeddings=False,
        mask_zero=True,
        embeddings_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        name="token_embedding",
    )(token_ids)
    segments = keras.layers.Embedding(
        num_segments,
        hidden_dim,
        embeddings_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
        name="segment_embedding",
    )(segment_ids)
    x = keras.layers.Add(name="embeddings_add")([tokens, segments])
    x = LayerNormalization(epsilon=layer_norm_epsilon, name="embeddings_norm")(x)
    x = Dropout(dropout, name="embeddings_dropout")(x)
    # Keras's Add drops the embedding's mask, so pass padding explicitly.
    padding_mask = keras.ops.not_equal(token_ids, 0)
    x = encoder_stack(
        x,
        num_layers,
        padding_mask=padding_mask,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        activation_dropout=activation_dropout,
        activation=activation,
        layer_norm_epsilon=layer_norm_epsilon,
    )
    cls = x[:, 0, :]
    pooled = keras.layers.Dense(hidden_dim, activation="tanh", name="pooler")(cls)
    return keras.Model(
        {"token_ids": token_ids, "segment_ids": segment_ids},
        {"sequence_output": x, "pooled_output": pooled},
        name=name,
    )


def _check_encoder(encoder):
    if not isinstance(encoder, keras.Model) or "pooled_output" not in getattr(
        encoder, "output", {}
    ):
        raise TypeError(
            "encoder must be a model from tfformer.models.bert_encoder. "
            f"Received: encoder={encoder!r}"
        )


def bert_masked_lm(encoder, *, next_sentence_prediction=False, name="bert_masked_lm"):
    """Adds the masked-language-model head to a `bert_encoder`.

    Inputs are the encoder's plus `mask_positions` `(batch, num_masked)`;
    the output is `(batch, num_masked, vocabulary_size)` float32 logits, the
    vocabulary projection tied to the token embedding. The new model shares the
    encoder's layers (and weights).

    With `next_sentence_prediction`, BERT's pre-training model: the outputs
    are a dict, `masked_lm` (the logits above) and `next_sentence`
    `(batch, 2)` float32 logits of a dense layer on the pooled output (class
    0: segment B follows segment A; 1: B is a random sentence), as BERT's
    `cls/seq_relationship`.
    """
    _check_encoder(encoder)
    mask_positions = keras.Input((None,), dtype="int32", name="mask_positions")
    hidden = MaskedLMHead(name="mlm_head")(
        encoder.output["sequence_output"], mask_positions
    )
    logits = float32_logits(encoder.get_layer("token_embedding")(hidden, reverse=True))
    inputs = {**encoder.input, "mask_positions": mask_positions}
    if not next_sentence_prediction:
        return keras.Model(inputs, logits, name=name)
    next_sentence = keras.layers.Dense(2, name="next_sentence_head")(
        encoder.output["pooled_output"]
    )
    outputs = {
        "masked_lm": logits,
        "next_sentence": float32_logits(next_sentence, name="next_sentence_logits"),
    }
    return keras.Model(inputs, outputs, name=name)


def bert_classifier(encoder, num_classes, *, dropout=0.1, name="bert_classifier"):
    """Adds a sequence-classification head on the pooled [CLS] output.

    Output: `(batch, num_classes)` float32 logits. The new model shares the
    encoder's layers (and weights), so a pretrained encoder fine-tunes in place.
    """
    _check_encoder(encoder)
    check_positive_int("num_classes", num_classes)
    x = Dropout(dropout, name="classifier_dropout")(encoder.output["pooled_output"])
    logits = keras.layers.Dense(num_classes, name="classifier")(x)
    return keras.Model(encoder.input, float32_logits(logits), name=name)


def bert_embedder(encoder, *, pooling="mean", normalize=True, name="bert_embedder"):
    """Adds sentence-embedding pooling to a `bert_encoder`: the
    sentence-transformers recipe (all-MiniLM-L6-v2's is mean pooling over the
    real tokens, [CLS] and [SEP] included, then L2 normalization).

    Outputs: a dict, `embedding` `(batch, hidden_dim)` float32 (`SequencePooling`
    modes "mean", "cls" or "max"), and the encoder's `sequence_output` and
    `pooled_output` (so the pooler stays part of the model: a classifier
    fine-tuned from it starts from the checkpoint's pooler). The new model
    shares the encoder's layers (and weights).
    """
    _check_encoder(encoder)
    padding_mask = keras.ops.not_equal(encoder.input["token_ids"], 0)
    pooled = SequencePooling(pooling, normalize, name="pooling", dtype="float32")(
        encoder.output["sequence_output"], padding_mask
    )
    return keras.Model(
        encoder.input, {"embedding": pooled, **encoder.output}, name=name
    )
