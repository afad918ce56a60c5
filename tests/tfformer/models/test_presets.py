import numpy as np
import pytest

from tfformer.models import PRESETS, from_preset


def _paper_base_parameter_count(vocabulary, d=512, d_ff=2048, layers=6):
    """Hand count of the base model with one shared, tied vocabulary."""
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocabulary * d + layers * (encoder_layer + decoder_layer)


def test_transformer_base_has_the_papers_size():
    model = from_preset("transformer_base", 37000, 37000, tie_embeddings="all")
    count = model.count_params()
    assert count == _paper_base_parameter_count(37000)
    # The paper's Table 3 reports 65M for base (37k shared BPE vocabulary).
    assert 60e6 < count < 66e6


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_and_runs(name):
    if name in ("transformer_big", "bert_base", "gpt2_small", "vit_base"):
        pytest.skip("large preset: counted, not run, in test_preset_sizes.py")
    backbone = PRESETS[name][0].__name__
    if backbone == "Seq2SeqBackbone":
        model = from_preset(name, 50, 60)
        out = model(
            {
                "encoder_token_ids": np.ones((1, 4), "int32"),
                "decoder_token_ids": np.ones((1, 3), "int32"),
            }
        )
        assert out.shape == (1, 3, 60)
    elif backbone == "ViTBackbone":
        model = from_preset(name, image_size=16, num_classes=3)
        assert model(np.zeros((1, 16, 16, 3), "float32")).shape == (1, 3)
    elif backbone == "BertBackbone":
        out = from_preset(name, 50)(
            {
                "token_ids": np.ones((1, 4), "int32"),
                "segment_ids": np.zeros((1, 4), "int32"),
            }
        )
        assert out["pooled_output"].shape == (1, PRESETS[name][1]["hidden_dim"])
    else:
        assert from_preset(name, 50)({"token_ids": np.ones((1, 4), "int32")}).shape == (
            1,
            4,
            50,
        )


def test_overrides_and_unknown_names():
    model = from_preset("transformer_tiny", 10, 10, num_encoder_layers=1)
    assert len(model.backbone.encoder_blocks) == 1
    assert len(model.backbone.decoder_blocks) == 2
    with pytest.raises(ValueError, match="Unknown preset"):
        from_preset("transformer_huge", 10, 10)


@pytest.mark.parametrize(
    "name", ["transformer_tiny", "bert_tiny", "gpt_tiny", "vit_tiny"]
)
def test_every_builder_passes_activation_dropout_to_every_block(name):
    """The builders' `activation_dropout` reaches each block's FFN; unset, the
    FFN's hidden rate is `dropout` (tfformer's behaviour before the option)."""
    args = {
        "transformer_tiny": (50, 60),
        "bert_tiny": (50,),
        "gpt_tiny": (50,),
        "vit_tiny": (),
    }[name]
    extra = dict(image_size=16, num_classes=3) if name == "vit_tiny" else {}
    for hidden, want in ((0.0, 0.0), (None, 0.25)):
        model = from_preset(
            name, *args, **extra, dropout=0.25, activation_dropout=hidden
        )
        backbone = getattr(model, "backbone", model)
        blocks = [
            *getattr(backbone, "encoder_blocks", []),
            *getattr(backbone, "decoder_blocks", []),
        ]
        assert len(blocks) >= 2
        assert {block.ffn.dropout for block in blocks} == {want}
        assert {block.dropout for block in blocks} == {0.25}
