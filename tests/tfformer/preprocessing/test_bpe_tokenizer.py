"""`ByteLevelBPETokenizer` (GPT-2's byte-level BPE in core TensorFlow ops)
against Hugging Face's `tokenizers` (the Rust implementation GPT-2's fast
tokenizer is) on a byte-level BPE it trains here: the same ids for fixed
cases and 1,000 random strings of letters, digits, contractions, Unicode
whitespace, CJK, emoji, combining marks and the special token; text back
unchanged; and the same from a SavedModel loaded by TensorFlow alone."""

import json
import random

import numpy as np
import pytest

from tests.testing import END_OF_TEXT as END
from tests.testing import run_python, train_byte_level_bpe
from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer, bytes_to_unicode

tokenizers = pytest.importorskip("tokenizers")

CASES = [
    "Hello world",
    "don't  stop",
    "a  b",
    "a   \n b",
    "x \n\n y",
    "  lead",
    "trail  ",
    f"{END}Hello",
    f" {END} x",
    "",
    " ",
    "aaaa aaa",
    "I'm 2024 naïve!!",
    "tab\tand\u00a0nbsp\u3000ideographic\u2009thin",
    "e\u0301 Ⅻ ٣ \u200b \x1c\x85\x0b\x0c\r\n",
    # NUL is a byte like any other (here it also marks where pieces are
    # cut, so the text's own NULs and their escape U+FDD0 travel escaped).
    "\x00",
    "a\x00b \x00 \x00\x00c",
    "  \x00x",
    f"{END}\x00",
    "\ufdd0\ufdd1\ufdd2 \ufdd0\x00\ufdd2 x\ufdd0",
]
POOL = [
    *list("abc xyz  \n\t'sdmltvre0123456789.,!?-_"),
    "é",
    "ß",
    "日",
    "😀",
    "\xa0",
    "\u3000",
    "\u2009",
    "\x0b",
    "\x0c",
    "\x85",
    "\r",
    END,
    "'s",
    "'ll",
    " 's",
    "\u200b",
    "\x1c",
    "́",
    "Ⅻ",
    "٣",
    "\x00",
    "\ufdd0",
    "\ufdd2",
]


def ours_from(hf, add_prefix_space=False, id_offset=1, **options):
    model = json.loads(hf.to_str())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    return ByteLevelBPETokenizer(
        tokens,
        merges,
        special_tokens=[END],
        start_token=END,
        end_token=END,
        id_offset=id_offset,
        add_prefix_space=add_prefix_space,
        **options,
    )


@pytest.fixture(scope="module")
def pair():
    hf = train_byte_level_bpe()
    return hf, ours_from(hf)


def random_texts(n, seed=0):
    rng = random.Random(seed)
    return [
        "".join(rng.choice(POOL) for _ in range(rng.randint(0, 25))) for _ in range(n)
    ]


def test_bytes_to_unicode_is_gpt2s_table():
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    # Printable ASCII is itself; space, newline and NUL are GPT-2's Ġ, Ċ, Ā.
    assert table[ord("a")] == "a" and table[ord("~")] == "~"
    assert (table[32], table[10], table[0]) == ("\u0120", "\u010a", "\u0100")


def test_the_same_ids_as_hugging_faces_tokenizers(pair):
    hf, ours = pair
    texts = CASES + random_texts(1000)
    want = [hf.encode(t).ids for t in texts]
    got = [[i - 1 for i in row] for row in ours.tokenize(texts).to_list()]
    mismatched = [
        (t, w, g) for t, w, g in zip(texts, want, got, strict=False) if w != g
    ]
    assert not mismatched, mismatched[:3]
    # Merges happened (not byte after byte) and the special token is one id.
    assert sum(map(len, want)) < 0.85 * sum(len(t.encode()) for t in texts)
    assert got[7][0] == hf.token_to_id(END)


def test_text_comes_back_unchanged_and_as_hugging_face_decodes(pair):
    hf, ours = pair
    texts = CASES + random_texts(300, seed=1)
    back = ours.detokenize(ours.tokenize(texts)).numpy()
    assert [b.decode("utf-8") for b in back] == texts
    decoded = [hf.decode(hf.encode(t).ids, skip_special_tokens=False) for t in texts]
    assert decoded == texts
    # Padding (0) and ids outside the vocabulary are dropped.
    ids = ours.tokenize(["Hello world"]).to_tensor(shape=[1, 9]).numpy()
    ids[0, -1] = 10**6
    assert ours.detokenize(ids).numpy().tolist() == [b"Hello world"]


def test_long_pieces_and_a_non_ascii_special_token():
    """Pieces of thousands of bytes (merged pass by pass, every occurrence
    of the best pair at once) and a special token RE2 needs escaped as code
    points, against Hugging Face."""
    hf = train_byte_level_bpe()
    other = "<\uff5cend\u2581of\u2581sentence\uff5c>"  # DeepSeek's
    hf.add_special_tokens([other])
    model = json.loads(hf.to_str())["model"]
    tokens = [*sorted(model["vocab"], key=model["vocab"].get), other]
    assert hf.token_to_id(other) == len(tokens) - 1
    ours = ByteLevelBPETokenizer(
        tokens,
        [m.split(" ") if isinstance(m, str) else m for m in model["merges"]],
        special_tokens=[END, other],
        start_token=END,
        end_token=END,
    )
    texts = [
        "=" * 3000,
        " " * 2000 + "x",
        "aaaa" * 700,
        "1234567890" * 200,
        "the cat " * 300,
        f"a{other}b {other}",
        "\n" * 500,
    ]
    assert ours.tokenize(texts).to_list() == [hf.encode(t).ids for t in texts]


def test_add_prefix_space_as_hugging_faces():
    hf = train_byte_level_bpe(add_prefix_space=True)
    ours = ours_from(hf, add_prefix_space=True, id_offset=0)
    texts = ["Hello", " Hello", "\nHello", "", END, *random_texts(200, seed=2)]
    want = [hf.encode(t).ids for t in texts]
    assert ours.tokenize(texts).to_list() == want


def test_ids_and_specials(pair):
    hf, ours = pair
    assert ours.vocabulary_size == hf.get_vocab_size() + 1
    assert ours.start_id == ours.end_id == hf.token_to_id(END) + 1
    assert ours.pad_id == 0 and ours.unk_id is None


def test_saved_and_loaded(pair, tmp_path):
    _, ours = pair
    path = str(tmp_path / "text_tokenizer.json")
    ours.save(path)
    again = ByteLevelBPETokenizer.load(path)
    texts = random_texts(100, seed=3)
    np.testing.assert_array_equal(
        again.tokenize(texts).flat_values, ours.tokenize(texts).flat_values
    )
    with open(path) as f:
        spec = json.load(f)
    del spec["merges"]
    with open(path, "w") as f:
        json.dump(spec, f)
    with pytest.raises(ValueError, match="lacks 'merges'"):
        ByteLevelBPETokenizer.load(path)


def save_tokenizer_model(tokenizer, path):
    """Saves a SavedModel whose `tokenize` signature gives `tokenizer`'s
    token_ids (dense, 0 after each row) and the text they detokenize to."""
    import tensorflow as tf

    class Served(tf.Module):
        def __init__(self):
            super().__init__()
            self.tokenizer = tokenizer

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def tokenize(self, text):
            ids = self.tokenizer.tokenize(text)
            text = self.tokenizer.detokenize(ids)
            return {"token_ids": ids.to_tensor(), "text": text}

    served = Served()
    tf.saved_model.save(served, str(path), signatures={"tokenize": served.tokenize})


def test_in_a_saved_model_loaded_by_tensorflow_alone(pair, tmp_path):
    hf, ours = pair
    save_tokenizer_model(ours, tmp_path / "sm")
    texts = CASES[:9] + random_texts(20, seed=4)
    script = f"""
import json, sys
sys.modules["keras"] = None  # any import of Keras fails
import tensorflow as tf
model = tf.saved_model.load({str(tmp_path / "sm")!r})
out = model.signatures["tokenize"](text=tf.constant({texts!r}))
ids = [[int(i) - 1 for i in row if i] for row in out["token_ids"].numpy()]
print("IDS", json.dumps(ids))
print("TEXT", json.dumps([t.decode() for t in out["text"].numpy()]))
mods = ("tfformer", "keras", "tensorflow_text")
print("LEAKED", [m for m in mods if sys.modules.get(m) is not None])
"""
    done = run_python(script)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert json.loads(lines["IDS"]) == [hf.encode(t).ids for t in texts]
    assert json.loads(lines["TEXT"]) == texts
    assert lines["LEAKED"] == "[]"


def test_bad_vocabularies_are_refused(pair):
    _, ours = pair
    tokens, merges = list(ours.vocabulary), list(ours.merges)
    kwargs = {"start_token": END, "end_token": END}
    with pytest.raises(ValueError, match="lacks byte characters"):
        ByteLevelBPETokenizer([t for t in tokens if t != "a"], [], **kwargs)
    with pytest.raises(ValueError, match=r"merges\[0\]=\('x', 'nope'\)"):
        ByteLevelBPETokenizer(tokens, [("x", "nope"), *merges], **kwargs)
    with pytest.raises(ValueError, match="repeats tokens: \\['a'\\]"):
        ByteLevelBPETokenizer([*tokens, "a"], merges, **kwargs)
    with pytest.raises(ValueError, match="end_token='<eos>' is not in the vocab"):
        ByteLevelBPETokenizer(tokens, merges, start_token=END, end_token="<eos>")
    with pytest.raises(ValueError, match="special_tokens: '<x>' is not a token"):
        ByteLevelBPETokenizer(tokens, merges, special_tokens=["<x>"], **kwargs)


# -- Llama 3's pre-tokenizer ---------------------------------------------------

# Llama 3's tokenizer.json: a Split on this regex (isolated), then ByteLevel
# without its own regex; ignore_merges in the BPE model.
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_CASES = [
    "a \n\nb",
    "a\n\n  b",
    "a \n b",
    " \n  x",
    "\n x",
    "!\n\n abc",
    "x  \n",
    "\t\tabc",
    "12345 678",
    "I'LL DON'T we'Re",
    "\r\n\r\n  \r x",
    "a\u2028\u2029 b",
    "  \x00\n x",
]


def llama3_style_hf(ignore_merges=True, vocab_size=400):
    """A byte-level BPE trained by Hugging Face's tokenizers with Llama 3's
    pre-tokenizer (Split, then ByteLevel without its regex)."""
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return train_byte_level_bpe(
        vocab_size,
        words=["the", "cat", "2024", "don't", "!!", "\n", "  ", "naïve", "日本"],
        pre_tokenizer=split,
        ignore_merges=ignore_merges,
    )


def llama3_ours(hf, ignore_merges=True):
    model = json.loads(hf.to_str())["model"]
    return ByteLevelBPETokenizer(
        sorted(model["vocab"], key=model["vocab"].get),
        [m.split(" ") if isinstance(m, str) else m for m in model["merges"]],
        special_tokens=[END],
        start_token=END,
        end_token=END,
        pre_tokenizer="llama3",
        ignore_merges=ignore_merges,
    )


def test_llama3_pieces_are_hugging_faces():
    """The pre-tokenizer alone: the pieces Hugging Face's Split cuts, on
    fixed cases and 1,000 random strings."""
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated")
    ours = llama3_ours(llama3_style_hf())
    texts = [*CASES, *LLAMA3_CASES, *random_texts(1000, seed=5)]
    texts = [t.replace(END, "") for t in texts]  # specials are cut out first
    want = [[p for p, _ in split.pre_tokenize_str(t)] for t in texts]
    got = [[p.decode("utf-8") for p in row] for row in ours.pieces(texts).to_list()]
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]


def test_llama3_ids_are_hugging_faces():
    hf = llama3_style_hf()
    ours = llama3_ours(hf)
    texts = [*CASES, *LLAMA3_CASES, *random_texts(1000, seed=6)]
    want = [hf.encode(t).ids for t in texts]
    got = ours.tokenize(texts).to_list()
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]
    back = ours.detokenize(ours.tokenize(texts)).numpy()
    assert [b.decode("utf-8") for b in back] == texts


def test_llama3_pieces_take_no_prefix_space():
    hf = llama3_style_hf()
    model = json.loads(hf.to_str())["model"]
    with pytest.raises(ValueError, match="pre_tokenizer='llama3', add_prefix_space"):
        ByteLevelBPETokenizer(
            sorted(model["vocab"], key=model["vocab"].get),
            [m.split(" ") if isinstance(m, str) else m for m in model["merges"]],
            start_token=END,
            end_token=END,
            pre_tokenizer="llama3",
            add_prefix_space=True,
        )


def test_ignore_merges_takes_a_vocabulary_piece_whole():
    """ "abc" is a token, but the merges (b c first, no "a bc") make "a",
    "bc" of it: with ignore_merges it is one token, as in Hugging Face."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {token: i for i, token in enumerate([END, *alphabet, "bc", "ab", "abc"])}
    merges = [("b", "c"), ("a", "b")]
    for ignore in (False, True):
        hf = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(
            add_prefix_space=False, use_regex=False
        )
        ours = ByteLevelBPETokenizer(
            list(vocab),
            merges,
            start_token=END,
            end_token=END,
            pre_tokenizer="llama3",
            ignore_merges=ignore,
        )
        texts = ["abc", "abcabc", "xabc"]
        want = [hf.encode(t).ids for t in texts]
        assert ours.tokenize(texts).to_list() == want
        assert want[0] == ([vocab["abc"]] if ignore else [vocab["a"], vocab["bc"]])


# -- Qwen2's tokenizer ------------------------------------------------------------

# Qwen2.5's (and Qwen3's) tokenizer.json: Llama 3's Split with one digit a
# piece, after an NFC normalizer; no ignore_merges.
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
QWEN2_POOL = [
    *POOL,
    "\u0323",
    "\u0338",
    "<",
    "=",
    "A",
    "\u1100",
    "\u1161",
    "\u11a8",
    "\uac00",
    "\u212b",
    "\u0344",
    "\u0f73",
    "\U00011935\U00011930",
]
QWEN2_CASES = [
    "2024 12345 678",
    "e\u0301 A\u030a\u0323 <\u0338",
    f"{END}\u0338",  # the mark after a special token composes with nothing
    f"=\u0338{END}e\u0301",
    "\u1100\u1161\u11a8 \u212b",
    "\x00\u0301",
]


def qwen2_style_hf():
    """Llama 3's trained vocabulary (which merges digits: "2024" is one of
    its words) read with Qwen2's pieces after NFC."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    hf = llama3_style_hf(ignore_merges=False)
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_REGEX), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.normalizer = normalizers.NFC()
    return hf


def test_qwen2_ids_are_hugging_faces_after_nfc(tmp_path):
    """Qwen2's pieces (one digit each) after NFC of each text between
    special tokens: the ids of Hugging Face's tokenizer on fixed cases and
    1,000 random strings of marks, composable letters, Hangul jamo and
    singletons; the text comes back in NFC; saved and loaded, the same."""
    from tokenizers import normalizers

    hf = qwen2_style_hf()
    ours = ours_from(hf, id_offset=0, pre_tokenizer="qwen2", normalizer="nfc")
    rng = random.Random(9)
    texts = [
        *CASES,
        *LLAMA3_CASES,
        *QWEN2_CASES,
        *(
            "".join(rng.choice(QWEN2_POOL) for _ in range(rng.randint(0, 25)))
            for _ in range(1000)
        ),
    ]
    want = [hf.encode(t).ids for t in texts]
    got = ours.tokenize(texts).to_list()
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]
    # One digit a piece, where Llama 3's pieces ("202", "4") merge.
    digits = [hf.token_to_id(c) for c in "2024"]
    assert got[len(CASES) + len(LLAMA3_CASES)][:4] == digits
    assert llama3_style_hf(ignore_merges=False).encode("2024").ids != digits
    nfc = normalizers.NFC()
    back = [b.decode("utf-8") for b in ours.detokenize(ours.tokenize(texts)).numpy()]
    assert back == [
        END.join(nfc.normalize_str(part) for part in t.split(END)) for t in texts
    ]
    ours.save(tmp_path / "qwen2.json")
    loaded = ByteLevelBPETokenizer.load(tmp_path / "qwen2.json")
    assert (loaded.pre_tokenizer, loaded.normalizer) == ("qwen2", "nfc")
    assert loaded.tokenize(texts[-50:]).to_list() == want[-50:]


def test_qwen2_in_a_saved_model_loaded_by_tensorflow_alone(tmp_path):
    """The NFC tables travel in the SavedModel: its ids are Hugging Face's."""
    hf = qwen2_style_hf()
    ours = ours_from(hf, id_offset=1, pre_tokenizer="qwen2", normalizer="nfc")
    save_tokenizer_model(ours, tmp_path / "sm")
    texts = [*QWEN2_CASES, "naïve café e\u0301"]
    script = f"""
import json, sys
sys.modules["keras"] = None
import tensorflow as tf
model = tf.saved_model.load({str(tmp_path / "sm")!r})
out = model.signatures["tokenize"](text=tf.constant({texts!r}))
print(json.dumps([[int(i) - 1 for i in row if i] for row in out["token_ids"].numpy()]))
"""
    done = run_python(script)
    assert json.loads(done.stdout.splitlines()[-1]) == [hf.encode(t).ids for t in texts]
