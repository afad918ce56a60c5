"""Gemma's decoder (Gemma Team 2024), without its output projection."""

import keras

from tfformer.models.llama_backbone import LlamaBackbone


@keras.saving.register_keras_serializable(package="tfformer")
class GemmaBackbone(LlamaBackbone):
    """Gemma's decoder: `LlamaBackbone` (rotary positions, RMSNorm before
    every sublayer and at the end, no biases, grouped- or multi-query
    attention, heads of their own `head_dim`) with a GeGLU feed-forward
    network (GELU, tanh form, on the gate) and token embeddings multiplied
    by sqrt(hidden_dim) on the way in; the output projection is the token
    embedding (`tie_embeddings=True`, unscaled).

    Gemma's RMSNorm multiplies by (1 + w): the norms here multiply by their
    `gamma`, so a converted checkpoint's gammas are its 1 + w.

    The arguments are `LlamaBackbone`'s (Gemma's config.json sets the same
    ones; `head_dim` is 256 in Gemma 2B and 7B).
    """

    presets = {}
    activation_name = "gelu_approximate"
    embedding_scale = True

    def __init__(self, vocabulary_size, *, tie_embeddings=True, **kwargs):
        super().__init__(vocabulary_size, tie_embeddings=tie_embeddings, **kwargs)
