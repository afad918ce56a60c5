"""The initializer that draws attention projection kernels one head at a time."""

import keras
from keras import ops


# Registered under its old name: the class was `_PerHeadInitializer` in
# multi_head_attention.py, and configs saved then carry
# "tfformer>_PerHeadInitializer".
@keras.saving.register_keras_serializable(
    package="tfformer", name="_PerHeadInitializer"
)
class PerHeadInitializer(keras.initializers.Initializer):
    """Draws a 2-D projection kernel as head-split 3-D kernel(s), then
    flattens and concatenates them along the last axis.

    A fan-based initializer (Glorot, He, LeCun) then counts fans as Keras
    does for any kernel of rank > 2 (`compute_fans`: the leading axes are a
    receptive field): a `(features, heads, head_dim)` query/key/value kernel
    has fan_in = features * heads and fan_out = features * head_dim, a
    `(heads, head_dim, features)` output kernel fan_in = heads * head_dim
    and fan_out = heads * features. That is the draw of tf.keras 2's
    `MultiHeadAttention`, whose `EinsumDense` kernels had those shapes;
    Keras 3.15's `EinsumDense` passes its input/output axes and draws the
    larger 2-D one. At d_model 256 and 8 heads the Glorot limit is 0.024
    (query/key/value) and 0.051 (output) instead of 0.108.

    Measured, not assumed: the Multi30k `translate_de_en` model reaches a
    validation loss of 3.86 after one epoch with this draw, 4.16 with the
    2-D one (same seed; BENCHMARKS.md). Initializers without fans
    (`RandomNormal`, `TruncatedNormal`, ...) draw the same distribution
    either way.

    Args:
        base: the initializer each head-split part is drawn with (cloned per
            part).
        shapes: the 3-D shape of each part, concatenated in this order.
        heads_first: `False` for `(features, heads, head_dim)` input
            projections, `True` for `(heads, head_dim, features)` output ones.
    """

    def __init__(self, base, shapes, heads_first=False):
        self.base = base
        self.shapes = tuple(tuple(int(d) for d in shape) for shape in shapes)
        self.heads_first = heads_first

    def __call__(self, shape, dtype=None):
        parts = []
        for part_shape in self.shapes:
            kernel = self.base.clone()(part_shape, dtype=dtype)
            if self.heads_first:
                # (heads, head_dim, features) -> (heads * head_dim, features)
                parts.append(ops.reshape(kernel, (-1, part_shape[-1])))
            else:
                # (features, heads, head_dim) -> (features, heads * head_dim)
                parts.append(ops.reshape(kernel, (part_shape[0], -1)))
        kernel = parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)
        if tuple(kernel.shape) != tuple(shape):
            raise ValueError(  # a fault, not input
                f"Internal: per-head kernel shapes {self.shapes} do not make "
                f"a {tuple(shape)} kernel."
            )
        return kernel

    def get_config(self):
        return {
            "base": keras.initializers.serialize(self.base),
            "shapes": [list(s) for s in self.shapes],
            "heads_first": self.heads_first,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["base"] = keras.initializers.deserialize(config["base"])
        return cls(**config)
