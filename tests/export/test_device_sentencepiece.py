"""The plain-Python SentencePiece BPE of `export/runtimes/tokenizer.py`
(what a converted Llama 2's or Gemma's TFLite export ships as
`tokenizer.py`) against the `sentencepiece` package, on the models, fixed
cases and random strings of
tests/tfformer/preprocessing/test_sentencepiece_tokenizer.py: the same ids
(with the start token and an id offset), the same text decoded from them and
from random ids, and the run's own tokenizer file read as the device reads
it."""

import random

import pytest

from tests.export.test_device_bpe import device_of
from tests.tfformer.preprocessing.test_sentencepiece_tokenizer import (
    CASES,
    SETTINGS,
    pair_of,
    random_texts,
)
from tfformer.preprocessing.sentencepiece_tokenizer import (
    SentencePieceTokenizer,
    read_model_proto,
)

spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def pair(request, tmp_path_factory):
    """(settings name, sentencepiece's processor, the device tokenizer of the
    run's tokenizer file, with ids one higher and the start token first)."""
    _, reference, _ = pair_of(request.param)
    ours = SentencePieceTokenizer.from_model(
        read_model_proto(reference.serialized_model_proto()),
        add_start_token=True,
        id_offset=1,
    )
    device = device_of(ours, tmp_path_factory.mktemp("device"), "sentencepiece")
    return request.param, reference, device


def test_the_same_ids_as_sentencepiece(pair):
    name, reference, device = pair
    texts = CASES + random_texts(1000) + ["=" * 3000, " " * 500 + "x"]
    start = reference.bos_id() + 1
    want = [[start, *(i + 1 for i in reference.encode(t))] for t in texts]
    got = [device.ids(t) for t in texts]
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, (name, mismatched[:3])


def test_text_decodes_as_sentencepiece_decodes(pair):
    name, reference, device = pair
    texts = CASES + random_texts(300, seed=1)
    for text in texts:
        ids = device.ids(text)
        # The device stops at the end id and drops the start token and padding.
        want = reference.decode([i - 1 for i in ids[1:]])
        assert device.detokenize([*ids, 0, 0]) == want, name
    rng = random.Random(5)
    size = reference.get_piece_size()
    for _ in range(1000):
        row = [i for i in rng.choices(range(size), k=rng.randint(0, 12))]
        row = [i for i in row if not reference.is_byte(i) and i != reference.eos_id()]
        assert device.detokenize([i + 1 for i in row]) == reference.decode(row), row
