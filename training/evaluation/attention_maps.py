"""Encoder-decoder attention of a translation, as PNG heat maps."""

import os

import numpy as np
from keras import ops

from tfformer.models import CachedDecoder
from tfformer.runs.files import atomic_path


def cross_attention_weights(model, source_ids, target_ids):
    """Cross-attention weights of every decoder layer for one sentence pair.

    Args:
        model: a `transformer_seq2seq` model.
        source_ids: `(S,)` source ids (no padding needed).
        target_ids: `(T,)` decoder input ids, starting with the start id.

    Returns:
        A list, one `(heads, T, S)` numpy array per decoder layer.
    """
    decoder = CachedDecoder(model)
    source = ops.convert_to_tensor(np.asarray(source_ids, "int32")[None])
    target = ops.convert_to_tensor(np.asarray(target_ids, "int32")[None])
    encoded, encoder_mask = decoder.encode(source)
    x = decoder.embedding(target)
    maps = []
    for block in decoder.blocks:
        x, scores = block(
            x, encoded, encoder_padding_mask=encoder_mask, return_attention_scores=True
        )
        maps.append(ops.convert_to_numpy(scores["cross_attention"])[0])
    return maps


def plot_cross_attention(maps, source_tokens, target_tokens, path, title=""):
    """One PNG: a row of heat maps per layer, one per head (rows = outputs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads = len(maps), maps[0].shape[0]
    width = max(2.0, 0.35 * len(source_tokens))
    height = max(2.0, 0.35 * len(target_tokens))
    figure, axes = plt.subplots(
        layers, heads, figsize=(width * heads, height * layers), squeeze=False
    )
    for layer, weights in enumerate(maps):
        for head in range(heads):
            axis = axes[layer][head]
            axis.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0)
            axis.set_xticks(range(len(source_tokens)))
            axis.set_xticklabels(source_tokens, rotation=90, fontsize=7)
            axis.set_yticks(range(len(target_tokens)))
            axis.set_yticklabels(target_tokens, fontsize=7)
            axis.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    with atomic_path(os.fspath(path)) as tmp:
        figure.savefig(tmp, format="png", dpi=90)
    plt.close(figure)
    return path


def attention_map_for(translator, sentence, path):
    """Translates `sentence` and plots its cross-attention into `path`."""
    ids = translator.translate_ids([sentence])[0]
    end = translator.target_tokenizer.end_id
    # Decoder inputs: the start token and the generated tokens before the end.
    target = [t for t in ids if t != 0]
    if end in target:
        target = target[: target.index(end)]
    source = translator.source_tokenizer.tokenize([sentence])[0].numpy()
    source = source[: translator.source_length]
    maps = cross_attention_weights(translator.model, source, target)
    vocabulary_source = getattr(translator.source_tokenizer, "vocabulary", None)
    vocabulary_target = getattr(translator.target_tokenizer, "vocabulary", None)

    def names(vocabulary, tokens):
        if vocabulary is None:
            return [repr(bytes([t - 4]))[2:-1] if t >= 4 else str(t) for t in tokens]
        return [vocabulary[t] for t in tokens]

    # Row i is the attention used to predict output token i.
    outputs = [t for t in ids[1:] if t != 0][: len(target)]
    translation = translator.target_tokenizer.detokenize([ids]).numpy()[0]
    return plot_cross_attention(
        maps,
        names(vocabulary_source, source),
        names(vocabulary_target, outputs),
        path,
        title=f"{sentence} → {translation.decode('utf-8', 'replace')}",
    )
