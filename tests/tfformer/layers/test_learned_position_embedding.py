import numpy as np
import pytest

from tests.testing import run_layer_test
from tfformer.layers import LearnedPositionEmbedding


def test_looks_up_rows_of_the_table_with_offsets():
    layer = LearnedPositionEmbedding(sequence_length=10)
    x = np.zeros((2, 4, 6), "float32")
    out = np.asarray(layer(x))
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_array_equal(out[0], table[:4])
    np.testing.assert_array_equal(out[1], table[:4])
    np.testing.assert_array_equal(layer(x, start_index=6)[0], table[6:10])
    per_example = np.asarray(layer(x[:, :1], start_index=np.array([2, 9])))
    np.testing.assert_array_equal(per_example[:, 0], table[[2, 9]])


def test_sequence_longer_than_the_table_is_an_error():
    layer = LearnedPositionEmbedding(sequence_length=4)
    with pytest.raises(ValueError, match="longer than the position table"):
        layer(np.zeros((1, 5, 3), "float32"))
    with pytest.raises(ValueError, match="starting at position 2"):
        layer(np.zeros((1, 3, 3), "float32"), start_index=2)


def test_layer_contract(tmp_path):
    run_layer_test(
        LearnedPositionEmbedding,
        {"sequence_length": 8},
        {"inputs": np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")},
        tmp_path,
    )


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, None])
def test_bad_sequence_length(bad):
    with pytest.raises(ValueError, match="sequence_length must be a positive int"):
        LearnedPositionEmbedding(sequence_length=bad)
