"""`SentencePieceTokenizer` (SentencePiece's BPE in core TensorFlow ops)
against the `sentencepiece` package on BPE models it trains here with
byte fallback, in Llama 2's settings (dummy prefix, whitespace kept, digits
split), Gemma's (no dummy prefix) and SentencePiece's defaults (extra
whitespace removed): the same ids for fixed cases and 1,000 random strings
of several scripts, emoji, whitespace runs, NUL and a user-defined piece;
the same text decoded; and the model files it refuses, named."""

import functools
import io
import random

import numpy as np
import pytest
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.preprocessing.sentencepiece_tokenizer import (
    SentencePieceTokenizer,
    read_model_proto,
)

spm = pytest.importorskip("sentencepiece")

TOOL = "<|tool|>"  # a user-defined piece: matched first, never merged
CORPUS_WORDS = (
    "the quick brown fox jumps over the lazy dog while a naïve café owner "
    "sings 2024 songs über straße 東京 大阪 тест слово مرحبا שלום 😀 "
    "tools <|tool|> called twice, then    spaces\tand\nlines"
).split(" ")
SETTINGS = {
    # Llama 2's tokenizer.model: identity normalizer, dummy prefix, extra
    # whitespace kept, digits split, whitespace-only pieces, byte fallback.
    "llama2": dict(
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
    ),
    # Gemma's: no dummy prefix either.
    "gemma": dict(
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
    ),
    # SentencePiece's own defaults (with the identity normalizer).
    "defaults": dict(add_dummy_prefix=True, remove_extra_whitespaces=True),
}
CASES = [
    "Hello world",
    "the quick brown fox",
    "",
    " ",
    "   ",
    "  lead and trail  ",
    "a  b   c",
    "tab\tand\nnewline\r\n",
    "\nstarts with a line break",
    "naïve café 2024",
    "東京 тест مرحبا 😀😀",
    "unseen: ξψω ☃ 𝄞 \u200b",
    TOOL,
    f"x{TOOL}y {TOOL}{TOOL}",
    "\x00",
    "a\x00b \x00 \x00\x00c",
    "\ufdd0\ufdd1\ufdd2 x\ufdd0",
    "\ufffd replacement",
]
POOL = [
    *list("abcdefghijklmnopqrstuvwxyz ABC  \n\t0123456789.,!?-_'"),
    "é",
    "ß",
    "ü",
    "東",
    "京",
    "т",
    "ж",
    "م",
    "ש",
    "😀",
    "🎉",
    "ξ",
    "☃",
    "\u3000",
    "\xa0",
    "\r",
    "\x00",
    "\ufdd0",
    "\ufffd",
    "\u0301",
    "the ",
    " fox",
    "straße",
    TOOL,
    "<|",
    "|>",
]


def train(settings, vocab_size=500):
    rng = random.Random(0)
    lines = [
        " ".join(rng.choice(CORPUS_WORDS) for _ in range(rng.randint(3, 12)))
        for _ in range(1500)
    ]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        normalization_rule_name="identity",
        character_coverage=1.0,
        # The corpus has fewer merges than that: as many as there are.
        hard_vocab_limit=False,
        minloglevel=2,
        **{"user_defined_symbols": [TOOL], **settings},
    )
    return model.getvalue()


@functools.cache
def pair_of(name):
    """(name, sentencepiece's processor, ours) of a model trained in the
    settings `name`."""
    data = train(SETTINGS[name])
    reference = spm.SentencePieceProcessor(model_proto=data)
    ours = SentencePieceTokenizer.from_model(read_model_proto(data))
    return name, reference, ours


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def pair(request):
    return pair_of(request.param)


def random_texts(n, seed=0):
    rng = random.Random(seed)
    return [
        "".join(rng.choice(POOL) for _ in range(rng.randint(0, 30))) for _ in range(n)
    ]


def test_the_same_ids_as_sentencepiece(pair):
    name, reference, ours = pair
    texts = CASES + random_texts(1000)
    want = [reference.encode(t) for t in texts]
    got = ours.tokenize(tf.constant(texts)).to_list()
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, (name, mismatched[:3])
    # Merges happened (not character by character), bytes fell back, and the
    # user-defined piece is one id.
    pieces = [reference.id_to_piece(i) for row in want for i in row]
    assert len(want[CASES.index("the quick brown fox")]) <= 4
    assert "<0xE2>" in pieces  # ☃'s first byte: no piece of the model
    assert reference.piece_to_id(TOOL) in want[CASES.index(TOOL)]


def test_the_same_ids_as_keras_hubs_sentencepiece_tokenizer(pair):
    """keras-hub's tokenizer (tensorflow-text's SentencePiece op, what its
    Gemma and Llama 2 presets use) on the same model file agrees too."""
    keras_hub = pytest.importorskip("keras_hub")
    name, reference, ours = pair
    hub = keras_hub.tokenizers.SentencePieceTokenizer(
        proto=reference.serialized_model_proto()
    )
    texts = CASES + random_texts(300, seed=3)
    want = hub(texts)  # Python lists in, lists of ids out
    assert ours.tokenize(tf.constant(texts)).to_list() == want, name


def test_text_decodes_as_sentencepiece_decodes(pair):
    name, reference, ours = pair
    texts = CASES + random_texts(300, seed=1)
    ids = ours.tokenize(tf.constant(texts))
    got = [b.decode("utf-8") for b in ours.detokenize(ids).numpy()]
    want = [reference.decode(row) for row in ids.to_list()]
    assert got == want, name
    # What the normalizer kept comes back: everything, but for the extra
    # spaces the defaults remove.
    if name != "defaults":
        assert got == texts
    # Any ids but byte pieces (whose bytes need not be UTF-8): control and
    # lone "▁" pieces first, unknown ones, pieces anywhere.
    rng = random.Random(5)
    size = reference.get_piece_size()
    rows = [
        [i for i in rng.choices(range(size), k=rng.randint(0, 12))] for _ in range(1000)
    ]
    rows = [[i for i in row if not reference.is_byte(i)] for row in rows]
    space, word = reference.piece_to_id("\u2581"), reference.piece_to_id("\u2581the")
    bos, unk = reference.bos_id(), reference.unk_id()
    rows += [
        [bos, space, space, word],
        [space, word, space],
        [space, space],
        [unk, word],
        [bos, word, bos, word],
    ]
    got = ours.detokenize(tf.ragged.constant(rows, dtype=tf.int32)).numpy()
    want = [reference.decode(row) for row in rows]
    assert [b.decode("utf-8") for b in got] == want, name


SPECIAL_CASES = [
    "<s>[INST] hi there [/INST]",
    "<s>[INST] hi [/INST] the fox </s><s>[INST] again [/INST]",
    "<s>",
    "<s><s>x",
    "</s> x",
    " <s> lead",
    "a<unk>b",
    "no special token here",
    "",
    f"<s>{TOOL}x{TOOL}</s>",
    "<s\x00>",
]


def without_dummy_prefix(reference):
    """`reference`'s model with add_dummy_prefix off."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(reference.serialized_model_proto())
    proto.normalizer_spec.add_dummy_prefix = False
    return spm.SentencePieceProcessor(model_proto=proto.SerializeToString())


def split_reference(reference, bare, text, after_special, before_space=True):
    """Hugging Face's reading of a rendered template: the control and
    unknown pieces found in the text (leftmost, longest first) are their
    ids; the text between is `sentencepiece`'s, with the dummy prefix
    before the first text and, when `after_special`, before each text that
    follows a special token (the legacy Llama tokenizer encodes each
    separately), but for `before_space` false not before a text that
    starts with a space (a `Metaspace` pre-tokenizer's rule,
    `test_the_prefix_rules_are_hugging_faces`)."""
    size = reference.get_piece_size()
    special = sorted(
        (
            reference.id_to_piece(i)
            for i in range(size)
            if reference.is_control(i) or reference.is_unknown(i)
        ),
        key=len,
        reverse=True,
    )
    ids, i, start, after = [], 0, 0, False
    while i <= len(text):
        found = next((t for t in special if text.startswith(t, i)), None)
        if found is None and i < len(text):
            i += 1
            continue
        if i > start:
            first = start == 0 or (after and after_special)
            first = first and (before_space or text[start] != " ")
            ids += (reference if first else bare).encode(text[start:i])
        if found is None:
            break
        ids.append(reference.piece_to_id(found))
        i = start = i + len(found)
        after = True
    return ids


def test_the_prefix_rules_are_hugging_faces():
    """The rules `split_reference` writes down, read off Hugging Face's
    `tokenizers`: `Prepend("▁")` prefixes a text that starts with a space
    too; `Metaspace` (either scheme) does not."""
    from tokenizers import normalizers, pre_tokenizers

    assert normalizers.Prepend("\u2581").normalize_str(" x") == "\u2581 x"
    for scheme in ("always", "first"):
        metaspace = pre_tokenizers.Metaspace(prepend_scheme=scheme, split=False)
        assert [p for p, _ in metaspace.pre_tokenize_str(" x")] == ["\u2581x"]
        assert [p for p, _ in metaspace.pre_tokenize_str("x")] == ["\u2581x"]


@pytest.mark.parametrize(
    "after_special, before_space",
    [(True, True), (False, True), (True, False), (False, False)],
    ids=["prepend", "legacy_false", "metaspace_always", "metaspace_first"],
)
def test_special_tokens_in_text_split_out_as_hugging_face_does(
    pair, after_special, before_space
):
    """`tokenize(..., special=True)`, as a chat template's text is read:
    `<s>`, `</s>` and `<unk>` are their ids, and the text between them is
    sentencepiece's, prefixed as the legacy Llama tokenizer (every text) or
    its `legacy: false` form (the first only) does. Without `special`,
    sentencepiece's own reading (characters) stays."""
    name, reference, ours = pair
    if ours.remove_extra_whitespaces:
        with pytest.raises(InputError, match="remove_extra_whitespaces"):
            ours.tokenize(["<s>x"], special=True)
        return
    ours = SentencePieceTokenizer(
        ours.pieces,
        add_dummy_prefix=ours.add_dummy_prefix,
        remove_extra_whitespaces=False,
        start_token="<s>",
        end_token="</s>",
        prefix_after_special=after_special,
        prefix_before_space=before_space,
    )
    bare = without_dummy_prefix(reference)
    rng = random.Random(7)
    pool = [*POOL, "<s>", "</s>", "<unk>", "<", "s>"]
    texts = SPECIAL_CASES + [
        "".join(rng.choice(pool) for _ in range(rng.randint(0, 20))) for _ in range(300)
    ]
    want = [
        split_reference(reference, bare, t, after_special, before_space) for t in texts
    ]
    got = ours.tokenize(tf.constant(texts), special=True).to_list()
    mismatched = [(t, w, g) for t, w, g in zip(texts, want, got, strict=True) if w != g]
    assert not mismatched, (name, mismatched[:3])
    bos, eos = reference.bos_id(), reference.eos_id()
    assert got[2] == [bos] and got[3][:2] == [bos, bos]
    assert eos in got[1] and got[1].count(bos) == 2
    # Without special=True, sentencepiece's own ids: "<s>" in characters.
    assert ours.tokenize(["<s>"]).to_list()[0] == reference.encode("<s>") != [bos]


def test_start_token_and_ids_outside_the_model(pair):
    _, reference, _ = pair
    with_start = SentencePieceTokenizer.from_model(
        read_model_proto(reference.serialized_model_proto()), add_start_token=True
    )
    ids = with_start.tokenize(tf.constant(["Hello world", ""])).to_list()
    bos = reference.bos_id()
    assert ids == [[bos, *reference.encode("Hello world")], [bos]]
    # Control pieces decode to nothing; ids outside the model are dropped.
    row = [bos, *reference.encode("Hello"), 10**6, reference.eos_id()]
    assert with_start.detokenize(tf.ragged.constant([row])).numpy() == [b"Hello"]


def test_an_id_offset_keeps_id_0_for_padding(pair):
    _, reference, _ = pair
    shifted = SentencePieceTokenizer.from_model(
        read_model_proto(reference.serialized_model_proto()), id_offset=1
    )
    texts = ["Hello world", "東京 ☃", ""]
    ids = shifted.tokenize(tf.constant(texts))
    assert ids.to_list() == [[i + 1 for i in reference.encode(t)] for t in texts]
    assert shifted.end_id == reference.eos_id() + 1
    padded = ids.to_tensor(shape=[3, 12]).numpy()  # padding: 0
    assert [b.decode() for b in shifted.detokenize(padded).numpy()] == texts


# The graph runs the eager ops: one setting in the default suite.
@pytest.mark.parametrize(
    "name",
    [
        "llama2",
        pytest.param("gemma", marks=pytest.mark.integration),
        pytest.param("defaults", marks=pytest.mark.integration),
    ],
)
def test_tokenizes_inside_a_traced_function(name):
    _, reference, ours = pair_of(name)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def ids(texts):
        return ours.tokenize(texts).to_tensor()

    texts = ["Hello world", "東京 😀", ""]
    got = ids(tf.constant(texts)).numpy()
    for row, text in zip(got, texts, strict=True):
        want = reference.encode(text)
        assert row[: len(want)].tolist() == want and not row[len(want) :].any()


def test_a_saved_tokenizer_loads_equal(pair, tmp_path):
    _, reference, ours = pair
    path = str(tmp_path / "tokenizer.json")
    ours.save(path)
    again = SentencePieceTokenizer.load(path)
    texts = random_texts(50, seed=2)
    assert again.tokenize(tf.constant(texts)).to_list() == [
        reference.encode(t) for t in texts
    ]


@pytest.mark.parametrize("id_offset", [0, 1])
def test_the_model_proto_it_writes_is_its_tokenizer_in_sentencepiece(pair, id_offset):
    """`model_proto` (a LiteRT-LM bundle's tokenizer.model) loaded by
    `sentencepiece`: the tokenizer's ids (without its start token, which a
    runtime adds itself) and texts on fixed and 300 random strings, its
    start, end and unknown ids, and with an id offset of 1 the padding piece
    at id 0, a control piece that no text makes."""
    name, reference, _ = pair
    ours = SentencePieceTokenizer.from_model(
        read_model_proto(reference.serialized_model_proto()),
        add_start_token=True,
        id_offset=id_offset,
    )
    proto = ours.model_proto("<pad>" if id_offset else None)
    written = spm.SentencePieceProcessor(model_proto=proto)
    texts = CASES + random_texts(300, seed=4)
    ids = ours.tokenize(tf.constant(texts)).to_list()
    assert [written.encode(t) for t in texts] == [row[1:] for row in ids], name
    assert [written.decode(row) for row in ids] == [
        b.decode("utf-8") for b in ours.detokenize(tf.ragged.constant(ids)).numpy()
    ]
    assert written.get_piece_size() == ours.vocabulary_size
    assert (written.bos_id(), written.eos_id(), written.unk_id()) == (
        ours.start_id,
        ours.end_id,
        ours.unknown_id,
    )
    # (sentencepiece finds them by their pieces; the ids say the same.)
    trainer = read_model_proto(proto)["trainer"]
    assert [trainer[f"{k}_id"] for k in ("bos", "eos", "unk", "pad")] == [
        ours.start_id,
        ours.end_id,
        ours.unknown_id,
        0 if id_offset else -1,
    ]
    if id_offset:
        assert written.id_to_piece(0) == "<pad>" and written.is_control(0)
        assert written.pad_id() == 0 and written.encode("<pad>")[0] != 0
    else:  # the model it was read from, piece for piece
        every = range(reference.get_piece_size())
        assert [(written.id_to_piece(i), written.get_score(i)) for i in every] == [
            (reference.id_to_piece(i), reference.get_score(i)) for i in every
        ]


def test_a_model_proto_needs_a_new_padding_piece_for_its_offset(pair):
    _, reference, ours = pair
    shifted = SentencePieceTokenizer.from_model(
        read_model_proto(reference.serialized_model_proto()), id_offset=1
    )
    for padding, received in ((None, "None"), ("<s>", "'<s>'"), ("a b", "'a b'")):
        with pytest.raises(InputError, match="padding_piece") as e:
            shifted.model_proto(padding)
        assert received in str(e.value)
    twice = SentencePieceTokenizer.from_model(
        read_model_proto(reference.serialized_model_proto()), id_offset=2
    )
    with pytest.raises(InputError, match="id_offset=2"):
        twice.model_proto("<pad>")
    assert read_model_proto(ours.model_proto())["pieces"] == [
        (p, pytest.approx(s), t) for p, s, t in ours.pieces
    ]


# -- files it refuses ----------------------------------------------------------


def test_models_it_does_not_reproduce_are_refused_naming_why():
    base = dict(
        vocab_size=400, normalization_rule_name="identity", hard_vocab_limit=False
    )
    cases = [
        (dict(model_type="unigram", byte_fallback=True), "model_type 'unigram'"),
        (dict(model_type="bpe", byte_fallback=False), "byte_fallback=false"),
        (
            dict(model_type="bpe", byte_fallback=True, normalization_rule_name="nfkc"),
            "normalizer 'nfkc' maps characters",
        ),
        (
            dict(model_type="bpe", byte_fallback=True, treat_whitespace_as_suffix=True),
            "treat_whitespace_as_suffix",
        ),
    ]
    rng = random.Random(0)
    lines = [" ".join(rng.choice(CORPUS_WORDS) for _ in range(8)) for _ in range(300)]
    for settings, message in cases:
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=model,
            minloglevel=2,
            **{**base, **settings},
        )
        with pytest.raises(InputError, match="does not reproduce") as error:
            SentencePieceTokenizer.from_model(
                read_model_proto(model.getvalue(), "m.model"), where="m.model"
            )
        assert message in str(error.value) and "m.model" in str(error.value)


def test_a_damaged_model_file_is_named():
    data = train(SETTINGS["llama2"])
    for damaged in (data[: len(data) // 2], b"\xff" * 11, b"not a model"):
        with pytest.raises(InputError, match=r"tokenizer\.model is damaged"):
            read_model_proto(damaged)
    reference = spm.SentencePieceProcessor(model_proto=data)
    assert len(read_model_proto(data)["pieces"]) == reference.get_piece_size()


def test_bad_pieces_are_refused():
    model = read_model_proto(train(SETTINGS["llama2"]))
    pieces = list(model["pieces"])
    options = dict(
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        start_token="<s>",
        end_token="</s>",
    )
    with pytest.raises(InputError, match="repeat"):
        SentencePieceTokenizer([*pieces, pieces[5]], **options)
    with pytest.raises(InputError, match="holds a space"):
        SentencePieceTokenizer([*pieces, ("a b", 0.0, 1)], **options)
    with pytest.raises(InputError, match="byte pieces"):
        SentencePieceTokenizer([p for p in pieces if p[0] != "<0x41>"], **options)
    with pytest.raises(InputError, match="start_token='<bos>'"):
        SentencePieceTokenizer(pieces, **{**options, "start_token": "<bos>"})
    # An unused piece that merges could make.
    merged = next(p for p, _, t in pieces if t == 1 and len(p) == 2)
    unused = [(p, s, 5 if p == merged else t) for p, s, t in pieces]
    with pytest.raises(InputError, match="unused piece"):
        SentencePieceTokenizer(unused, **options)
    assert np.isfinite([s for _, s, _ in pieces]).all()
