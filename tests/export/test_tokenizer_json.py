"""The bundles' Hugging Face tokenizer.json files, read by Hugging Face's
`tokenizers` (what LiteRT-LM's Hugging Face tokenizer follows), against the
run's own tokenizer: the same ids on fixed and random strings, the same
text back."""

import json
import os
import random

import pytest
import tensorflow as tf

from tests.export.test_litertlm import (
    TEXTS,
    converted_gpt2,
    converted_llama3,
    converted_qwen2,
)
from tfformer.export import tokenizer_json
from tfformer.preprocessing.byte_tokenizer import ByteTokenizer
from tfformer.preprocessing.text import RESERVED_TOKENS

pytest.importorskip("tokenizers")


def test_the_byte_tokenizer_json_tokenizes_as_tfformer_does():
    """Hugging Face's `tokenizers` (what LiteRT-LM's HF tokenizer follows)
    reads the written tokenizer.json as tfformer's byte tokenizer: same ids,
    and decoding gives the text back."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(tokenizer_json.byte_tokenizer_json()))
    ours = ByteTokenizer()
    expected = ours.tokenize(TEXTS).to_list()
    for text, ids in zip(TEXTS, expected, strict=True):
        assert hf.encode(text).ids == ids, text
        assert hf.decode(ids) == text
    # Each of the 256 bytes is one token (id b + 4); the 4 reserved tokens
    # are special.
    assert hf.get_vocab_size() == 260
    assert [hf.token_to_id(t) for t in RESERVED_TOKENS] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "converted", [converted_gpt2, converted_llama3, converted_qwen2]
)
def test_a_converted_runs_tokenizer_json_tokenizes_as_the_run_does(tmp_path, converted):
    """The bundle's tokenizer.json, read by Hugging Face's `tokenizers`,
    gives the run's ids (the checkpoint's plus one) on fixed and 300 random
    strings; LiteRT-LM puts the metadata's start token first, so the run's
    own start token (Llama 3's template) is not in it."""
    from tokenizers import Tokenizer

    from tests.tfformer.preprocessing.test_bpe_tokenizer import random_texts
    from tfformer.preprocessing.bpe_tokenizer import ByteLevelBPETokenizer

    checkpoint_hf, run = converted(tmp_path)
    ours = ByteLevelBPETokenizer.load(os.path.join(run, "text_tokenizer.json"))
    bundled = Tokenizer.from_str(json.dumps(tokenizer_json.bpe_tokenizer_json(ours)))
    texts = [*TEXTS, *random_texts(300, seed=7)]
    skip = 1 if ours.add_start_token else 0
    expected = [row[skip:] for row in ours.tokenize(texts).to_list()]
    got = [bundled.encode(t).ids for t in texts]
    mismatched = [
        (t, e, g) for t, e, g in zip(texts, expected, got, strict=True) if e != g
    ]
    assert not mismatched, mismatched[:3]
    # And they are the checkpoint's own ids, one higher.
    own = [checkpoint_hf.encode(t).ids[skip:] for t in texts]
    assert [[i - 1 for i in row] for row in got] == own
    assert bundled.token_to_id(tokenizer_json.BUNDLE_PADDING) == 0


def test_the_token_id_tokenizer_json_reads_and_writes_ids_as_text():
    from tokenizers import Tokenizer

    from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer

    run = TokenIdTokenizer(41, 2, 3, pad_id=0, id_offset=1)
    hf = Tokenizer.from_str(json.dumps(tokenizer_json.token_id_tokenizer_json(run)))
    for text in ("1 5 0 12", "  39\t0\n7 ", "0"):
        assert hf.encode(text).ids == run.tokenize([text])[0].numpy().tolist()
    # Token by token, with a space before each: predict's text after a prompt.
    assert "".join(hf.decode([i]) for i in (8, 1, 40)) == " 7 0 39"
    assert hf.decode([8, 1, 40]) == " 7 0 39"
    assert hf.encode("x 3 007").ids == [0, 4, 0]  # no id: 0 (documented)


# Strings for WordPiece: words, punctuation the join rules rewrite, Greek
# capitals (a final sigma when lower-cased), NUL and other dropped
# characters, CJK, whitespace of every kind, and characters no vocabulary
# learned here holds.
WORDPIECE_POOL = [
    *"to be or not that is the question well known Hamlet isn't it",
    *"  \n\t'-.,!?;:%()[]{}$€©_0123456789",
    "ΣΑΣ",
    "Σ",
    "\u03c3",
    "İ",
    "ǅ",
    "ﬃ",
    "\x00",
    "\x1c",
    "\u200b",
    "\ufeff",
    "\xa0",
    "\u3000",
    "\x85",
    "日本",
    "é",
    "e\u0301",
    "😀",
    "[UNK]",
    "[END]",
]
WORDPIECE_CASES = [
    "a-b-c",
    "it's's",
    "x - y - z",
    "( [ { x } ] )",
    "well-known, isn't it?",
    "ΣΑΣ ΑΣ. Σ",
    "a\x00B \x00c",
    "",
]
LINE = "To be or not to be, that is the question: it's a well-known line - isn't it?"


def wordpiece_json(ours, classes):
    return tokenizer_json.wordpiece_tokenizer_json(
        ours.vocabulary,
        ours.special_ids,
        ours.unk_id,
        classes,
        lower_case=ours.lower_case,
        normalizer=ours.normalizer,
        strip_accents=ours.strip_accents,
    )


@pytest.mark.parametrize("lower_case", [False, True])
def test_a_wordpiece_runs_tokenizer_json_reads_and_writes_as_the_run_does(
    lower_case,
):
    """A vocabulary learned by tfformer (on two lines; most of the random
    strings' characters are unknown words): `tokenizers` gives the run's
    ids on fixed cases and 1,000 random strings, and its decoding of the
    run's ids is the run's detokenized text (special tokens dropped, "##"
    pieces glued, the join rules applied), "a-b-c" included."""
    from tokenizers import Tokenizer

    from tfformer.export.wordpiece import probe_character_classes
    from tfformer.training.text.wordpiece import WordPieceTokenizer

    # Capital sigmas, and small final and other ones.
    greek = "\u039f\u0394\u039f\u03a3 \u03c3\u03b1\u03c2 \u03bf\u03c3 \u03c3"
    ours = WordPieceTokenizer.learn([LINE, greek] * 50, 150, lower_case=lower_case)
    assert {"\u03c2", "\u03c3"} <= set(ours.vocabulary)
    hf = Tokenizer.from_str(json.dumps(wordpiece_json(ours, probe_character_classes())))
    rng = random.Random(4)
    texts = [
        *TEXTS,
        *WORDPIECE_CASES,
        LINE,
        *(
            "".join(rng.choice(WORDPIECE_POOL) for _ in range(rng.randint(0, 30)))
            for _ in range(1000)
        ),
    ]
    want = ours.tokenize(texts).to_list()
    got = [hf.encode(t).ids for t in texts]
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, mismatched[:3]
    # Special ids in the middle and first are dropped with their space.
    unk, end = ours.unk_id, ours.end_id
    rows = [*want, [unk, *want[-1]], [*want[-2], end, unk, *want[-3]]]
    texts = ours.detokenize(tf.ragged.constant(rows, tf.int32)).numpy()
    back = [t.decode("utf-8") for t in texts]
    decoded = [hf.decode(r) for r in rows]
    mismatched = [
        (r, b, d) for r, b, d in zip(rows, back, decoded, strict=True) if d != b
    ]
    assert not mismatched, mismatched[:3]
    chain = ours.tokenize(["be-or-not it - is - the"]).to_list()[0]
    assert hf.decode(chain) == "be-or-not it-is-the"


def test_a_bert_vocabularys_tokenizer_json_normalizes_as_the_run_does():
    """The "bert" normalizer (cleanup, CJK spacing, accents, one-character
    lower-casing) as Hugging Face's BertNormalizer, on a converted BERT
    vocabulary with its own special tokens."""
    from tokenizers import Tokenizer

    from tests.training.convert.huggingface.test_bert import VOCAB
    from tfformer.export.wordpiece import probe_character_classes
    from tfformer.training.text.wordpiece import WordPieceTokenizer

    specials = {"pad": "[PAD]", "unk": "[UNK]", "start": "[CLS]", "end": "[SEP]"}
    ours = WordPieceTokenizer(
        VOCAB,
        lower_case=True,
        special_tokens=specials,
        normalizer="bert",
        strip_accents=True,
    )
    hf = Tokenizer.from_str(json.dumps(wordpiece_json(ours, probe_character_classes())))
    rng = random.Random(5)
    texts = [
        *TEXTS,
        *WORDPIECE_CASES,
        *(
            "".join(rng.choice(WORDPIECE_POOL) for _ in range(rng.randint(0, 30)))
            for _ in range(1000)
        ),
    ]
    want = ours.tokenize(texts).to_list()
    assert [hf.encode(t).ids for t in texts] == want


def test_a_wordpiece_tokenizer_json_refuses_what_it_cannot_reproduce():
    from tfformer.errors import InputError

    with pytest.raises(InputError, match="strip_accents=True"):
        tokenizer_json.wordpiece_tokenizer_json(
            ["[PAD]", "[UNK]"], [0, 1], 1, ([0], [0]), strip_accents=True
        )
