"""BERT encoder with its MLM and classification heads."""

import keras
import numpy as np
import pytest

from tests.testing import FIT_STEP, run_model_test
from tfformer.models import bert_classifier, bert_encoder, bert_masked_lm

SMALL = dict(
    num_layers=2,
    hidden_dim=16,
    num_heads=2,
    intermediate_dim=32,
    max_sequence_length=12,
)
TOKENS = np.array([[2, 5, 6, 7, 3, 0], [2, 8, 9, 3, 10, 3]], "int32")
SEGMENTS = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]], "int32")
INPUTS = {"token_ids": TOKENS, "segment_ids": SEGMENTS}
# The contracts' model: one layer, since a second adds nothing they check
# and doubles the XLA compile of their fit step.
ONE_LAYER = {**SMALL, "num_layers": 1}


@FIT_STEP
def test_masked_lm_contract_and_tied_projection(tmp_path, jit_compile):
    positions = np.array([[1, 3], [2, 4]], "int32")
    model = run_model_test(
        lambda: bert_masked_lm(bert_encoder(40, **ONE_LAYER)),
        {**INPUTS, "mask_positions": positions},
        np.array([[6, 7], [9, 10]]),
        tmp_path,
        jit_compile=jit_compile,
    )
    # The vocabulary projection is the token embedding itself: no extra matrix.
    embedding = model.backbone.token_embedding
    assert embedding.tie_weights and not hasattr(embedding, "reverse_embeddings")


@FIT_STEP
def test_classifier_contract(tmp_path, jit_compile):
    run_model_test(
        lambda: bert_classifier(bert_encoder(40, **ONE_LAYER), num_classes=3),
        INPUTS,
        np.array([0, 2]),
        tmp_path,
        jit_compile=jit_compile,
    )


def test_encoder_saves_and_loads_with_both_outputs(tmp_path):
    encoder = bert_encoder(40, **SMALL)
    path = tmp_path / "encoder.keras"
    encoder.save(path)
    loaded = keras.models.load_model(path)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(
            loaded(INPUTS)[name], encoder(INPUTS)[name], atol=1e-6
        )


def test_heads_share_the_encoder_weights():
    encoder = bert_encoder(40, **SMALL)
    classifier = bert_classifier(encoder, 2)
    before = np.asarray(encoder(INPUTS)["pooled_output"])
    assert classifier.backbone is encoder
    block = encoder.encoder_blocks[0]
    kernel = block.ffn.output_dense.kernel
    kernel.assign(kernel * 2.0)
    assert not np.allclose(encoder(INPUTS)["pooled_output"], before)


def test_padding_changes_no_real_position():
    encoder = bert_encoder(40, **SMALL)
    base = encoder(INPUTS)
    padded = encoder(
        {
            "token_ids": np.pad(TOKENS, ((0, 0), (0, 3))),
            "segment_ids": np.pad(SEGMENTS, ((0, 0), (0, 3))),
        }
    )
    real = TOKENS != 0
    np.testing.assert_allclose(
        np.asarray(padded["sequence_output"])[:, :6][real],
        np.asarray(base["sequence_output"])[real],
        atol=1e-5,
    )
    np.testing.assert_allclose(
        padded["pooled_output"], base["pooled_output"], atol=1e-5
    )


def test_segments_matter():
    encoder = bert_encoder(40, **SMALL)
    a = encoder(INPUTS)["pooled_output"]
    b = encoder({"token_ids": TOKENS, "segment_ids": 1 - SEGMENTS})["pooled_output"]
    assert not np.allclose(a, b)


def test_bad_arguments():
    with pytest.raises(TypeError, match="TextClassifier needs a BertBackbone"):
        bert_classifier(keras.layers.Dense(2), 2)
    with pytest.raises(ValueError, match="num_classes must be a positive int"):
        bert_classifier(bert_encoder(40, **SMALL), 0)
    with pytest.raises(ValueError, match="num_segments must be a positive int"):
        bert_encoder(40, num_segments=0)


def test_next_sentence_head_is_a_dense_layer_on_the_pooled_output(tmp_path):
    encoder = bert_encoder(40, **SMALL)
    model = bert_masked_lm(encoder, next_sentence_prediction=True)
    positions = np.array([[1, 3], [2, 4]], "int32")
    inputs = {**INPUTS, "mask_positions": positions}
    out = model(inputs)
    assert sorted(out) == ["masked_lm", "next_sentence"]
    # The masked-LM logits are those of the model without the head.
    alone = bert_masked_lm(encoder)
    alone.mlm_head.set_weights(model.mlm_head.get_weights())
    np.testing.assert_allclose(out["masked_lm"], alone(inputs), atol=1e-6)
    pooled = np.asarray(encoder(INPUTS)["pooled_output"])
    kernel, bias = model.next_sentence_head.get_weights()
    assert kernel.shape == (16, 2)
    np.testing.assert_allclose(out["next_sentence"], pooled @ kernel + bias, atol=1e-5)
    path = tmp_path / "pretraining.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    for name in ("masked_lm", "next_sentence"):
        np.testing.assert_allclose(loaded(inputs)[name], out[name], atol=1e-6)
