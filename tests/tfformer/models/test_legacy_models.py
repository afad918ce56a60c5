"""Models saved before tfformer had backbones (plain functional models whose
parts were found by layer name) are rebuilt as today's classes with every
weight in place: the outputs recorded by the old code, on the old file's
inputs, come out again.

The files are `tests/data/legacy_runs/` (written by
`tests/data/make_legacy_runs.py` at the last commit before the backbones).
"""

import glob
import os

import keras
import numpy as np
import pytest

from tfformer.models import (
    Backbone,
    BertBackbone,
    CausalLM,
    ImageClassifier,
    LlamaBackbone,
    MaskedLM,
    SentenceEmbedder,
    Seq2SeqLM,
    TaskModel,
    TextClassifier,
    upgrade_legacy_model,
)

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "legacy_runs")
EXPECTED_CLASSES = {
    "seq2seq_post_norm_tied_decoder": Seq2SeqLM,
    "seq2seq_pre_norm_learned_tied_all": Seq2SeqLM,
    "seq2seq_untied_fused_gelu": Seq2SeqLM,
    "gpt2_style": CausalLM,
    "llama_style": CausalLM,
    "gpt_post_norm_sinusoidal": CausalLM,
    "bert_encoder": BertBackbone,
    "bert_classifier": TextClassifier,
    "bert_masked_lm": MaskedLM,
    "bert_pretraining": MaskedLM,
    "bert_embedder": SentenceEmbedder,
    "vit_with_pixel_statistics": ImageClassifier,
    "vit_plain": ImageClassifier,
    "translation_run": Seq2SeqLM,
    "causal_lm_run": CausalLM,
    "text_classification_run": TextClassifier,
    "masked_lm_run": MaskedLM,
    "sentence_embedding_converted": SentenceEmbedder,
    "llama_converted": CausalLM,
    "gpt2_converted": CausalLM,
    "vit_converted": ImageClassifier,
}


def legacy_files():
    """(name, model file, recorded inputs and outputs) of every legacy model."""
    files = []
    for path in sorted(glob.glob(os.path.join(DATA, "models", "*.keras"))):
        name = os.path.basename(path)[: -len(".keras")]
        files.append((name, path, path[: -len(".keras")] + ".npz"))
    for path in sorted(glob.glob(os.path.join(DATA, "*", "model.keras"))):
        directory = os.path.dirname(path)
        name = os.path.basename(directory)
        files.append((name, path, os.path.join(directory, "outputs.npz")))
    return files


def recorded(npz):
    data = np.load(npz)
    inputs = {k[len("input/") :]: data[k] for k in data if k.startswith("input/")}
    if list(inputs) == ["images"]:
        inputs = inputs["images"]
    outputs = {k[len("output/") :]: data[k] for k in data if k.startswith("output/")}
    return inputs, outputs


def as_dict(outputs):
    outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def test_every_kind_of_legacy_file_is_covered():
    assert sorted(name for name, _, _ in legacy_files()) == sorted(EXPECTED_CLASSES)


# One legacy file per model class in the default suite; the other variants
# (norm placements, tying, positions) in the integration tier.
DEFAULT_LEGACY = {
    "translation_run",
    "causal_lm_run",
    "llama_converted",
    "bert_encoder",
    "text_classification_run",
    "masked_lm_run",
    "sentence_embedding_converted",
    "vit_converted",
}


@pytest.mark.parametrize(
    "name,path,npz",
    [
        pytest.param(
            *f,
            id=f[0],
            marks=() if f[0] in DEFAULT_LEGACY else pytest.mark.integration,
        )
        for f in legacy_files()
    ],
)
def test_a_legacy_model_computes_what_it_computed(name, path, npz, tmp_path):
    old = keras.saving.load_model(path, compile=False)
    assert not isinstance(old, Backbone | TaskModel)  # a plain functional model
    model = upgrade_legacy_model(old)
    assert type(model) is EXPECTED_CLASSES[name]
    inputs, want = recorded(npz)
    got = as_dict(model(inputs, training=False))
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)
    # Saved again, it is today's class and computes the same.
    model.save(tmp_path / "upgraded.keras")
    again = keras.saving.load_model(tmp_path / "upgraded.keras", compile=False)
    assert type(again) is type(model)
    for key, value in as_dict(again(inputs, training=False)).items():
        np.testing.assert_array_equal(value, got[key])


def test_the_typed_handles_follow_the_old_structure():
    def load(name):
        path = os.path.join(DATA, "models", f"{name}.keras")
        return upgrade_legacy_model(keras.saving.load_model(path, compile=False))

    shared = load("seq2seq_pre_norm_learned_tied_all").backbone
    assert shared.tie_embeddings == "all"
    assert shared.encoder_embedding is shared.decoder_embedding
    assert len(shared.encoder_blocks) == 1 and len(shared.decoder_blocks) == 2
    assert shared.encoder_norm is not None and shared.position == "learned"
    post = load("seq2seq_post_norm_tied_decoder").backbone
    assert post.encoder_norm is None and post.tie_embeddings == "decoder"
    assert load("seq2seq_untied_fused_gelu").backbone.fused_qkv
    llama = load("llama_style").backbone
    assert type(llama) is LlamaBackbone
    assert (llama.num_key_value_heads, llama.rope_max_wavelength) == (1, 500)
    assert load("bert_pretraining").next_sentence_prediction
    assert not load("bert_masked_lm").next_sentence_prediction
    assert load("vit_with_pixel_statistics").backbone.pixel_normalization is not None
    assert load("vit_plain").backbone.pixel_normalization is None


def test_todays_models_pass_through_unchanged():
    model = upgrade_legacy_model(
        keras.saving.load_model(
            os.path.join(DATA, "models", "gpt2_style.keras"), compile=False
        )
    )
    assert upgrade_legacy_model(model) is model
    assert upgrade_legacy_model(model.backbone) is model.backbone


def test_other_models_are_refused_naming_them():
    inputs = keras.Input((4,))
    plain = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="someone_elses")
    with pytest.raises(ValueError, match="'someone_elses' is not a model tfformer"):
        upgrade_legacy_model(plain)


def test_a_weight_without_a_place_is_refused_naming_its_layer():
    """An old-style decoder with a layer today's classes do not have."""
    from tfformer.layers import TokenAndPositionEmbedding, TransformerDecoderBlock

    ids = keras.Input((None,), dtype="int32", name="token_ids")
    embedding = TokenAndPositionEmbedding(
        20, 8, sequence_length=8, position="learned", name="decoder_embedding"
    )
    x = embedding(ids)
    x = TransformerDecoderBlock(2, 16, name="decoder_block_0")(x)
    x = keras.layers.Dense(8, name="adapter")(x)
    old = keras.Model({"token_ids": ids}, embedding(x, reverse=True), name="odd")
    with pytest.raises(ValueError, match="layer 'adapter' has no counterpart"):
        upgrade_legacy_model(old)
