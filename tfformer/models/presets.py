"""Ready-made model sizes, and `from_preset` to build one."""

from tfformer.models.bert_encoder import bert_encoder
from tfformer.models.gpt_decoder import gpt_decoder
from tfformer.models.transformer_seq2seq import transformer_seq2seq
from tfformer.models.vit import vit

# name -> (builder, size arguments). Vocabulary sizes, image sizes and class
# counts depend on the data, so the caller passes them to `from_preset`.
PRESETS = {
    # Trains in minutes on a laptop CPU (the default task of tfformer-train).
    "transformer_tiny": (
        transformer_seq2seq,
        dict(
            num_encoder_layers=2,
            num_decoder_layers=2,
            hidden_dim=128,
            num_heads=4,
            intermediate_dim=512,
            dropout=0.1,
        ),
    ),
    # Multi30k-sized: 3+3 layers, d_model 256.
    "transformer_small": (
        transformer_seq2seq,
        dict(
            num_encoder_layers=3,
            num_decoder_layers=3,
            hidden_dim=256,
            num_heads=8,
            intermediate_dim=1024,
            dropout=0.1,
        ),
    ),
    # The paper's base model (Table 3): N=6, d_model=512, d_ff=2048, h=8.
    "transformer_base": (
        transformer_seq2seq,
        dict(
            num_encoder_layers=6,
            num_decoder_layers=6,
            hidden_dim=512,
            num_heads=8,
            intermediate_dim=2048,
            dropout=0.1,
        ),
    ),
    # The paper's big model: d_model=1024, d_ff=4096, h=16, P_drop=0.3.
    "transformer_big": (
        transformer_seq2seq,
        dict(
            num_encoder_layers=6,
            num_decoder_layers=6,
            hidden_dim=1024,
            num_heads=16,
            intermediate_dim=4096,
            dropout=0.3,
        ),
    ),
    "bert_tiny": (
        bert_encoder,
        dict(num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512),
    ),
    "bert_base": (
        bert_encoder,
        dict(num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072),
    ),
    # nanoGPT's tinyshakespeare character model: 6 layers, 384 wide, 6 heads.
    "gpt_tiny": (
        gpt_decoder,
        dict(
            num_layers=6,
            hidden_dim=384,
            num_heads=6,
            intermediate_dim=1536,
            dropout=0.2,
            max_sequence_length=256,
        ),
    ),
    "gpt2_small": (
        gpt_decoder,
        dict(num_layers=12, hidden_dim=768, num_heads=12, intermediate_dim=3072),
    ),
    "vit_tiny": (
        vit,
        dict(
            patch_size=4,
            num_layers=4,
            hidden_dim=128,
            num_heads=4,
            intermediate_dim=512,
        ),
    ),
    # ViT-B/16.
    "vit_base": (
        vit,
        dict(
            patch_size=16,
            num_layers=12,
            hidden_dim=768,
            num_heads=12,
            intermediate_dim=3072,
        ),
    ),
}


def from_preset(preset, *args, **kwargs):
    """Builds the model of a named size; `kwargs` override the preset's sizes.

    Example:
    >>> model = from_preset("transformer_tiny", 8000, 8000)
    >>> model = from_preset("vit_tiny", image_size=32, num_classes=10)
    """
    if preset not in PRESETS:
        raise ValueError(
            f"Unknown preset. Choose one of {sorted(PRESETS)}. "
            f"Received: preset={preset!r}"
        )
    builder, sizes = PRESETS[preset]
    return builder(*args, **{**sizes, **kwargs})
