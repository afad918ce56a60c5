"""The backbones and the task models on them: configs that rebuild the same
network, typed handles to every part, dtype policies that survive a save,
heads computed as their formulas say, and wrong pairings refused."""

import keras
import numpy as np
import pytest

from tfformer.models import (
    BertBackbone,
    CachedDecoder,
    CausalLM,
    GemmaBackbone,
    GPTBackbone,
    ImageClassifier,
    LlamaBackbone,
    MaskedLM,
    SentenceEmbedder,
    Seq2SeqBackbone,
    Seq2SeqLM,
    TextClassifier,
    ViTBackbone,
)

SMALL = dict(hidden_dim=16, num_heads=2, intermediate_dim=24)
IDS = np.array([[5, 9, 2, 7, 0, 0], [3, 4, 8, 1, 6, 2]], "int32")


def backbones():
    return {
        "seq2seq": (
            lambda **kw: Seq2SeqBackbone(
                30, 31, num_encoder_layers=2, num_decoder_layers=3, **SMALL, **kw
            ),
            {"encoder_token_ids": IDS, "decoder_token_ids": IDS[:, :4]},
        ),
        "gpt": (
            lambda **kw: GPTBackbone(
                30, num_layers=2, max_sequence_length=8, **SMALL, **kw
            ),
            {"token_ids": IDS},
        ),
        "llama": (
            lambda **kw: LlamaBackbone(
                30,
                num_layers=2,
                num_key_value_heads=1,
                max_sequence_length=8,
                **SMALL,
                **kw,
            ),
            {"token_ids": IDS},
        ),
        "gemma": (
            lambda **kw: GemmaBackbone(
                30,
                num_layers=2,
                num_key_value_heads=1,
                head_dim=6,
                max_sequence_length=8,
                **SMALL,
                **kw,
            ),
            {"token_ids": IDS},
        ),
        "bert": (
            lambda **kw: BertBackbone(
                30, num_layers=2, max_sequence_length=8, **SMALL, **kw
            ),
            {"token_ids": IDS, "segment_ids": np.zeros_like(IDS)},
        ),
        "vit": (
            lambda **kw: ViTBackbone(
                8,
                patch_size=4,
                num_layers=2,
                pixel_mean=[1.0, 2.0, 3.0],
                pixel_std=[4.0, 5.0, 6.0],
                **SMALL,
                **kw,
            ),
            np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype("float32"),
        ),
    }


def numpy_outputs(outputs):
    outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


@pytest.mark.parametrize("name", sorted(backbones()))
def test_the_config_rebuilds_the_same_network(name, tmp_path):
    build, inputs = backbones()[name]
    backbone = build()
    config = backbone.get_config()
    again = type(backbone).from_config(config)
    assert again.get_config() == config
    again.set_weights(backbone.get_weights())
    want = numpy_outputs(backbone(inputs))
    for key, value in numpy_outputs(again(inputs)).items():
        np.testing.assert_array_equal(value, want[key])
    backbone.save(tmp_path / "backbone.keras")
    loaded = keras.saving.load_model(tmp_path / "backbone.keras")
    assert type(loaded) is type(backbone)
    for key, value in numpy_outputs(loaded(inputs)).items():
        np.testing.assert_array_equal(value, want[key])


def test_the_handles_are_the_parts_the_graph_uses():
    seq2seq = backbones()["seq2seq"][0]()
    assert len(seq2seq.encoder_blocks) == 2 and len(seq2seq.decoder_blocks) == 3
    assert seq2seq.token_embedding is seq2seq.decoder_embedding
    assert seq2seq.encoder_embedding is not seq2seq.decoder_embedding
    assert seq2seq.encoder_norm is None  # post-norm: the blocks end normalized
    graph = {id(layer) for layer in seq2seq.layers}
    for part in (
        seq2seq.encoder_embedding,
        seq2seq.decoder_embedding,
        *seq2seq.encoder_blocks,
        *seq2seq.decoder_blocks,
    ):
        assert id(part) in graph
    gpt = backbones()["gpt"][0]()
    assert gpt.final_norm is not None and len(gpt.decoder_blocks) == 2
    bert = backbones()["bert"][0]()
    assert [b.name for b in bert.encoder_blocks] == [
        "encoder_block_0",
        "encoder_block_1",
    ]
    assert bert.pooler.units == 16 and bert.segment_embedding.input_dim == 2
    vit = backbones()["vit"][0]()
    assert vit.patch_embedding.num_patches == 4 and vit.pixel_normalization is not None


def assert_is_the_generic_decoder(model, **options):
    """`model` computes what `GPTBackbone` with its weights computes, given
    the rotary, RMS-norm, gated, bias-free options they share and `options`."""
    generic = GPTBackbone(
        30,
        num_layers=2,
        max_sequence_length=8,
        num_key_value_heads=1,
        position="rotary",
        normalization="rms",
        gated_ffn=True,
        use_bias=False,
        dropout=0.0,
        **SMALL,
        **options,
    )
    generic.set_weights(model.get_weights())
    np.testing.assert_array_equal(
        numpy_outputs(model({"token_ids": IDS}))["output"],
        numpy_outputs(generic({"token_ids": IDS}))["output"],
    )


def test_llama_is_the_generic_decoder_with_llamas_options():
    llama = backbones()["llama"][0]()
    assert_is_the_generic_decoder(llama, activation="silu", tie_embeddings=False)
    config = llama.get_config()
    assert "normalization" not in config and config["rope_max_wavelength"] == 10000


def test_gemma_is_the_generic_decoder_with_gemmas_options():
    """GEGLU (the tanh GELU on the gate), heads of their own size, a tied
    output and token embeddings times sqrt(width) on the way in only."""
    gemma = backbones()["gemma"][0]()
    assert_is_the_generic_decoder(
        gemma,
        key_dim=6,
        activation="gelu_approximate",
        tie_embeddings=True,
        scale_embeddings=True,
    )
    embedding = gemma.token_embedding
    table = keras.ops.convert_to_numpy(embedding.token_embeddings)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(embedding(IDS)), table[IDS] * 4.0, rtol=1e-6
    )  # sqrt(16)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(embedding(hidden, reverse=True)),
        hidden @ table.T,
        rtol=1e-5,
        atol=1e-5,
    )
    config = gemma.get_config()
    assert "scale_embeddings" not in config and config["tie_embeddings"] is True


def test_a_backbone_keeps_its_dtype_policy_through_a_save(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    mixed = backbones()["gpt"][0]()
    pinned = backbones()["gpt"][0](dtype="float32")
    keras.config.set_dtype_policy("float32")
    assert mixed.decoder_blocks[0].compute_dtype == "bfloat16"
    assert pinned.decoder_blocks[0].compute_dtype == "float32"
    mixed.save(tmp_path / "mixed.keras")
    # Loaded while the global policy is float32, it is still mixed.
    loaded = keras.saving.load_model(tmp_path / "mixed.keras")
    assert loaded.decoder_blocks[0].compute_dtype == "bfloat16"
    keras.config.set_dtype_policy("mixed_bfloat16")
    pinned.save(tmp_path / "pinned.keras")
    assert keras.saving.load_model(tmp_path / "pinned.keras").dtype_policy.name == (
        "float32"
    )


def test_the_language_model_heads_are_the_reversed_embedding():
    seq2seq = backbones()["seq2seq"][0]()
    model = Seq2SeqLM(seq2seq)
    inputs = backbones()["seq2seq"][1]
    hidden = numpy_outputs(seq2seq(inputs))["decoder_sequence_output"]
    table = keras.ops.convert_to_numpy(seq2seq.decoder_embedding.token_embeddings)
    np.testing.assert_allclose(
        numpy_outputs(model(inputs))["output"], hidden @ table.T, rtol=1e-5, atol=1e-5
    )
    llama = backbones()["llama"][0]()
    lm = CausalLM(llama)
    hidden = numpy_outputs(llama({"token_ids": IDS}))["output"]
    head = keras.ops.convert_to_numpy(llama.token_embedding.reverse_embeddings)
    np.testing.assert_allclose(
        numpy_outputs(lm({"token_ids": IDS}))["output"],
        hidden @ head,
        rtol=1e-5,
        atol=1e-5,
    )


def test_the_classification_heads_read_the_first_token():
    bert = backbones()["bert"][0]()
    inputs = backbones()["bert"][1]
    classifier = TextClassifier(bert, 3)
    pooled = numpy_outputs(bert(inputs))["pooled_output"]
    kernel, bias = classifier.head.get_weights()
    np.testing.assert_allclose(
        numpy_outputs(classifier(inputs))["output"], pooled @ kernel + bias, atol=1e-5
    )
    vit = backbones()["vit"][0]()
    images = backbones()["vit"][1]
    model = ImageClassifier(vit, 4)
    first = numpy_outputs(vit(images))["output"][:, 0]
    kernel, bias = model.head.get_weights()
    np.testing.assert_allclose(
        numpy_outputs(model(images))["output"], first @ kernel + bias, atol=1e-5
    )


def test_the_embedder_averages_the_real_tokens():
    bert = backbones()["bert"][0]()
    inputs = backbones()["bert"][1]
    out = numpy_outputs(SentenceEmbedder(bert, normalize=False)(inputs))
    real = (IDS != 0)[..., None]
    mean = (out["sequence_output"] * real).sum(1) / real.sum(1)
    np.testing.assert_allclose(out["embedding"], mean, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "task,backbone,message",
    [
        (Seq2SeqLM, "gpt", "Seq2SeqLM needs a Seq2SeqBackbone. Received: backbone=GPT"),
        (CausalLM, "bert", "CausalLM needs a GPTBackbone or LlamaBackbone"),
        (MaskedLM, "gpt", "MaskedLM needs a BertBackbone"),
        (SentenceEmbedder, "vit", "SentenceEmbedder needs a BertBackbone"),
    ],
)
def test_a_head_on_the_wrong_backbone_is_refused(task, backbone, message):
    with pytest.raises(TypeError, match=message):
        task(backbones()[backbone][0]())


def test_presets_and_cached_decoding_from_the_backbone():
    with pytest.raises(ValueError, match="GPTBackbone has no preset 'bert_tiny'"):
        GPTBackbone.from_preset("bert_tiny", 30)
    backbone = GPTBackbone.from_preset("gpt_tiny", 30, num_layers=1, hidden_dim=24)
    assert (backbone.num_layers, backbone.num_heads, backbone.hidden_dim) == (1, 6, 24)
    assert backbone.intermediate_dim == 1536  # the preset's, not overridden
    # CachedDecoder takes the task model or its backbone.
    model = CausalLM(backbones()["gpt"][0]())
    ids = IDS[1:]  # no padding: the full pass masks it, a step does not
    for source in (model, model.backbone):
        decoder = CachedDecoder(source)
        cache = decoder.init_cache(1, 6)
        logits, _, _ = decoder.step(ids, cache, 0)
        np.testing.assert_allclose(
            numpy_outputs(logits)["output"],
            numpy_outputs(model({"token_ids": ids}))["output"],
            atol=1e-5,
        )
