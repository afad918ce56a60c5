"""Ready-made model sizes, and `from_preset` to build one."""

from tfformer.errors import InputError
from tfformer.models import builders
from tfformer.models.bert_backbone import BertBackbone
from tfformer.models.gpt_backbone import GPTBackbone
from tfformer.models.seq2seq_backbone import Seq2SeqBackbone
from tfformer.models.vit_backbone import ViTBackbone

# The builder that turns a backbone family's preset into its usual model: a
# Seq2SeqLM, a bare BertBackbone (heads are added by the caller), a CausalLM
# or an ImageClassifier.
BUILDERS = {
    Seq2SeqBackbone: builders.transformer_seq2seq,
    BertBackbone: builders.bert_encoder,
    GPTBackbone: builders.gpt_decoder,
    ViTBackbone: builders.vit,
}

# name -> (backbone class, size arguments). Vocabulary sizes, image sizes and
# class counts depend on the data, so the caller passes them to `from_preset`.
PRESETS = {
    name: (backbone, sizes)
    for backbone in BUILDERS
    for name, sizes in backbone.presets.items()
}


def preset_backbone(preset):
    """The backbone class of a preset name (ValueError naming the choices)."""
    if preset not in PRESETS:
        raise InputError(
            f"Unknown preset. Choose one of {sorted(PRESETS)}. "
            f"Received: preset={preset!r}"
        )
    return PRESETS[preset][0]


def from_preset(preset, *args, **kwargs):
    """Builds the model of a named size; `kwargs` override the preset's sizes.

    Example:
    >>> model = from_preset("transformer_tiny", 8000, 8000)    # Seq2SeqLM
    >>> model = from_preset("vit_tiny", image_size=32, num_classes=10)
    """
    backbone = preset_backbone(preset)
    return BUILDERS[backbone](*args, **{**PRESETS[preset][1], **kwargs})
