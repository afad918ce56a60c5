import pytest

from tfformer.training.sources.number_words import english, german, number_words_splits


@pytest.mark.parametrize(
    "n, en, de",
    [
        (0, "zero", "null"),
        (1, "one", "eins"),
        (16, "sixteen", "sechzehn"),
        (21, "twenty-one", "einundzwanzig"),
        (30, "thirty", "dreißig"),
        (101, "one hundred one", "einhunderteins"),
        (1001, "one thousand one", "eintausendeins"),
        (21000, "twenty-one thousand", "einundzwanzigtausend"),
        (201001, "two hundred one thousand one", "zweihunderteintausendeins"),
        (
            999999,
            "nine hundred ninety-nine thousand nine hundred ninety-nine",
            "neunhundertneunundneunzigtausendneunhundertneunundneunzig",
        ),
    ],
)
def test_hand_checked_numbers(n, en, de):
    assert english(n) == en
    assert german(n) == de


def test_bad_numbers_are_rejected_by_name():
    with pytest.raises(ValueError, match="n must be in"):
        english(1_000_000)
    with pytest.raises(TypeError, match="n must be an int"):
        german(2.5)


def test_splits_are_deterministic_disjoint_and_sized():
    a = number_words_splits(seed=3, train_size=500, validation_size=50, test_size=50)
    b = number_words_splits(seed=3, train_size=500, validation_size=50, test_size=50)
    c = number_words_splits(seed=4, train_size=500, validation_size=50, test_size=50)
    assert a == b
    assert a != c
    assert {k: len(v) for k, v in a.items()} == {
        "train": 500,
        "validation": 50,
        "test": 50,
    }
    sources = [set(s for s, _ in a[k]) for k in ("train", "validation", "test")]
    assert not (
        sources[0] & sources[1] or sources[0] & sources[2] or sources[1] & sources[2]
    )
    # The held-out splits do not depend on the size of the training split.
    bigger = number_words_splits(
        seed=3, train_size=800, validation_size=50, test_size=50
    )
    assert bigger["test"] == a["test"]
    # Every number below 100 is in training; held-out numbers have 3+ digits.
    numbers = {english(n): n for n in range(100)}
    assert set(numbers) <= sources[0]
    assert not any(s in numbers for s in sources[1] | sources[2])


def test_bad_split_sizes():
    with pytest.raises(ValueError, match="train_size"):
        number_words_splits(train_size=0)
