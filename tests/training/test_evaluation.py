"""Exact match (the one definition every command uses), on hand-made
translations with a known answer."""

import pytest

from tfformer.training.evaluation.translation import exact_match
from tfformer.training.text.wordpiece import WordPieceTokenizer


def test_exact_match_counts_identical_strings():
    hypotheses = ["a b", "b a", "a a", "b"]
    references = ["a b", "a b", "a a", "b "]
    # Rows 0 and 2 are equal; "b" vs "b " differs without a tokenizer.
    assert exact_match(hypotheses, references) == 0.5
    assert exact_match([], []) == 0.0
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        exact_match(["a", "b"], ["a"])


def test_references_are_compared_as_the_tokenizer_writes_them():
    tokenizer = WordPieceTokenizer(
        ["[PAD]", "[UNK]", "[START]", "[END]", "a", "dog", ".", "##s"]
    )
    # The detokenizer writes "a dogs." for all three references: extra
    # spaces and a space before the full stop do not count as errors, a
    # different word does.
    references = ["a  dogs .", "a dogs.", "a dog."]
    hypotheses = ["a dogs.", "a dogs.", "a dogs."]
    assert exact_match(hypotheses, references) == 1 / 3
    assert exact_match(hypotheses, references, tokenizer) == 2 / 3
