import numpy as np

from tfformer.decoding import Generator
from tfformer.models import transformer_seq2seq
from tfformer.training.evaluation.exact_match import exact_match
from tfformer.training.text.wordpiece import WordPieceTokenizer


def test_exact_match_counts_identical_greedy_translations():
    pairs = [("a b", "a b"), ("b a", "b a"), ("a a", "b")]
    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[START]", "[END]", "a", "b"])
    model = transformer_seq2seq(
        6,
        6,
        num_encoder_layers=1,
        num_decoder_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_sequence_length=16,
    )
    score, shown = exact_match(
        model, pairs, tokenizer, tokenizer, max_length=6, batch_size=2
    )
    source = tokenizer.tokenize([s for s, _ in pairs]).to_tensor(shape=[3, 6])
    ids = Generator(model, max_length=6)(source)["token_ids"]
    predicted = tokenizer.detokenize(ids).numpy()
    expected = np.mean(
        [p.decode() == t for p, (_, t) in zip(predicted, pairs, strict=True)]
    )
    assert score == expected
    assert [s for s, _, _ in shown] == ["a b", "b a", "a a"]
    assert [p for _, _, p in shown] == [p.decode() for p in predicted]
