"""Conversion of a built `keras.layers.MultiHeadAttention` into tfformer's."""

import keras

from tfformer.errors import InputError, InputTypeError


def mha_from_keras(layer_cls, keras_mha):
    """Build a `layer_cls` equivalent to a built `keras.layers.MultiHeadAttention`.

    The projections' weights are reshaped from Keras's
    `(features, heads, head_dim)` einsum layout into dense matrices, so the
    result gives the same outputs on the same inputs and masks. Users call it
    as `MultiHeadAttention.from_keras(keras_mha)`; the class is an argument
    (not imported here) so that classmethod also builds subclasses, without an
    import cycle.

    Args:
        layer_cls: `tfformer.layers.MultiHeadAttention` or a subclass.
        keras_mha: a built `keras.layers.MultiHeadAttention` over rank-3
            inputs, without `attention_axes`, `use_gate` or `sliding_window`.

    Returns:
        A built `layer_cls` with the same weights.
    """
    if not isinstance(keras_mha, keras.layers.MultiHeadAttention):
        raise InputTypeError(
            "from_keras expects a keras.layers.MultiHeadAttention. "
            f"Received: keras_mha of type {type(keras_mha).__name__}"
        )
    if not keras_mha.built:
        raise InputError(
            "from_keras needs a built layer (call it once first). "
            f"Received: keras_mha={keras_mha.name!r} with no weights"
        )
    config = keras_mha.get_config()
    if config.get("attention_axes") not in (None, (1,), [1]):
        raise InputError(
            "from_keras supports attention over the sequence axis only. "
            f"Received: attention_axes={config['attention_axes']}"
        )
    for unsupported in ("use_gate", "sliding_window"):
        if config.get(unsupported):
            raise InputError(
                f"from_keras does not support {unsupported}. Received: "
                f"{unsupported}={config[unsupported]}"
            )
    q_kernel = keras_mha.query_dense.kernel  # (features, H, d)
    k_kernel = keras_mha.key_dense.kernel
    v_kernel = keras_mha.value_dense.kernel
    o_kernel = keras_mha.output_dense.kernel  # (H, dv, out)
    if len(q_kernel.shape) != 3 or len(o_kernel.shape) != 3:
        raise InputError(
            "from_keras supports rank-3 inputs (batch, length, features). "
            f"Received: a layer with query kernel shape {q_kernel.shape}"
        )
    layer = layer_cls(
        num_heads=config["num_heads"],
        key_dim=config["key_dim"],
        value_dim=config["value_dim"],
        dropout=config["dropout"],
        use_bias=config["use_bias"],
        output_dim=int(o_kernel.shape[-1]),
        seed=config.get("seed"),
        dtype=keras_mha.dtype_policy,
        name=keras_mha.name,
    )
    layer.build(
        (None, None, q_kernel.shape[0]),
        (None, None, v_kernel.shape[0]),
        (None, None, k_kernel.shape[0]),
    )

    def numpy(weight):
        return keras.ops.convert_to_numpy(weight)

    # Inputs: (features, H, d) -> (features, H*d); output: (H, dv, out) ->
    # (H*dv, out). Biases flatten the same way.
    for ours, theirs in [
        (layer.query_dense, keras_mha.query_dense),
        (layer.key_dense, keras_mha.key_dense),
        (layer.value_dense, keras_mha.value_dense),
        (layer.output_dense, keras_mha.output_dense),
    ]:
        kernel = numpy(theirs.kernel)
        if theirs is keras_mha.output_dense:
            ours.kernel.assign(kernel.reshape(-1, kernel.shape[-1]))
        else:
            ours.kernel.assign(kernel.reshape(kernel.shape[0], -1))
        if layer.use_bias:
            ours.bias.assign(numpy(theirs.bias).reshape(-1))
    return layer
