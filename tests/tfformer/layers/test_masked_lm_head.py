import keras
import numpy as np
import pytest

from tests import numpy_reference as ref
from tests.testing import norm_weights, run_layer_test
from tfformer.layers import MaskedLMHead

RNG = np.random.default_rng(2)


def test_gathers_masked_positions_then_dense_gelu_layer_norm():
    head = MaskedLMHead()
    sequence = RNG.normal(size=(2, 6, 8)).astype("float32")
    positions = np.array([[1, 4], [0, 5]], "int32")
    out = np.asarray(head(sequence, mask_positions=positions))
    n = keras.ops.convert_to_numpy
    gathered = np.stack([sequence[0, [1, 4]], sequence[1, [0, 5]]])
    hidden = ref.gelu(gathered @ n(head.dense.kernel) + n(head.dense.bias))
    want = ref.layer_norm(hidden, *norm_weights(head.layer_norm))
    np.testing.assert_allclose(out, want, atol=1e-4)


def test_layer_contract(tmp_path):
    run_layer_test(
        MaskedLMHead,
        {},
        {
            "inputs": RNG.normal(size=(2, 6, 8)).astype("float32"),
            "mask_positions": np.array([[1, 2], [3, 0]], "int32"),
        },
        tmp_path,
    )


def test_bad_arguments():
    with pytest.raises(TypeError, match="mask_positions must be integers"):
        MaskedLMHead()(np.zeros((1, 3, 4), "float32"), mask_positions=np.zeros((1, 1)))
    with pytest.raises(ValueError, match="layer_norm_epsilon must be a positive"):
        MaskedLMHead(layer_norm_epsilon=-1)
