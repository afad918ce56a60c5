import numpy as np

from tfformer.models import transformer_seq2seq
from training.evaluation import exact_match, greedy_decoder
from training.wordpiece_tokenizer import WordPieceTokenizer


def tiny_model(vocabulary=20):
    return transformer_seq2seq(
        vocabulary,
        vocabulary,
        num_encoder_layers=1,
        num_decoder_layers=1,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        max_sequence_length=16,
    )


def recompute_greedy(model, source, max_length, start_id, end_id):
    """Greedy decoding by re-running the full model on the prefix each step."""
    tokens = np.zeros((len(source), max_length), "int32")
    tokens[:, 0] = start_id
    finished = np.zeros(len(source), bool)
    for i in range(max_length - 1):
        logits = model.predict(
            {"encoder_token_ids": source, "decoder_token_ids": tokens[:, : i + 1]},
            verbose=0,
        )
        next_ids = np.where(finished, 0, logits[:, i].argmax(-1))
        tokens[:, i + 1] = next_ids
        finished |= next_ids == end_id
        if finished.all():
            break
    return tokens


def test_cached_greedy_equals_prefix_recompute():
    model = tiny_model()
    rng = np.random.default_rng(0)
    source = np.zeros((3, 8), "int32")
    for row, length in enumerate((8, 3, 5)):
        source[row, :length] = rng.integers(4, 20, length)
    decode = greedy_decoder(model, max_length=10, start_id=2, end_id=3)
    np.testing.assert_array_equal(
        decode(source).numpy(), recompute_greedy(model, source, 10, 2, 3)
    )


def test_exact_match_counts_identical_translations():
    pairs = [("a b", "a b"), ("b a", "b a"), ("a a", "b")]
    tokenizer = WordPieceTokenizer(["[PAD]", "[UNK]", "[START]", "[END]", "a", "b"])
    model = tiny_model(vocabulary=6)
    score, shown = exact_match(
        model, pairs, tokenizer, tokenizer, max_length=6, batch_size=2
    )
    decode = greedy_decoder(model, max_length=6, start_id=2, end_id=3)
    source = tokenizer.tokenize([s for s, _ in pairs]).to_tensor(shape=[3, 6])
    predicted = tokenizer.detokenize(decode(source)).numpy()
    expected = np.mean(
        [p.decode() == t for p, (_, t) in zip(predicted, pairs, strict=True)]
    )
    assert score == expected
    assert [s for s, _, _ in shown] == ["a b", "b a", "a a"]
