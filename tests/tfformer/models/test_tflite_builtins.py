"""The builders' graphs convert to TFLite with builtin ops only.

The Export issue relies on this; it is checked here because it is a property
of the layers (causal mask, grouped heads, rotary positions), not of export.
Models go through `model.export` -> `from_saved_model`: the converter's
`from_keras_model` fails on dict inputs.
"""

import keras
import numpy as np
import pytest

from tfformer.models import CachedDecoder, gpt_decoder, transformer_seq2seq

SMALL = dict(hidden_dim=16, num_heads=4, intermediate_dim=32, max_sequence_length=16)


def _tensorflow():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("TFLite conversion needs the TensorFlow backend")
    return pytest.importorskip("tensorflow")


def _convert_and_compare(model, feeds, tmp_path):
    tf = _tensorflow()
    model.export(tmp_path / "saved_model", format="tf_saved_model", verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "saved_model"))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    runner = tf.lite.Interpreter(
        model_content=converter.convert()
    ).get_signature_runner()
    for feed in feeds:  # several lengths: the graph keeps dynamic shapes
        (got,) = runner(**feed).values()
        np.testing.assert_allclose(got, model(feed), atol=1e-4)


@pytest.mark.integration
def test_seq2seq_converts_with_builtin_ops(tmp_path):
    model = transformer_seq2seq(
        30,
        40,
        num_encoder_layers=1,
        num_decoder_layers=1,
        num_key_value_heads=2,
        **SMALL,
    )
    feeds = [
        {
            "encoder_token_ids": np.array([[5, 6, 7, 0]], "int32"),
            "decoder_token_ids": np.array([[1, 8, 9]], "int32"),
        },
        {
            "encoder_token_ids": np.array([[5, 6], [7, 8]], "int32"),
            "decoder_token_ids": np.array([[1, 8, 9, 10, 0], [1, 2, 0, 0, 0]], "int32"),
        },
    ]
    _convert_and_compare(model, feeds, tmp_path)


def test_rotary_gpt_converts_with_builtin_ops(tmp_path):
    model = gpt_decoder(
        30, num_layers=1, position="rotary", num_key_value_heads=1, **SMALL
    )
    feeds = [
        {"token_ids": np.array([[5, 6, 7]], "int32")},
        {"token_ids": np.array([[5, 6, 7, 8, 9, 0, 0]], "int32")},
    ]
    _convert_and_compare(model, feeds, tmp_path)


def test_cached_decoding_step_converts_and_matches_the_full_pass(tmp_path):
    """One KV-cached step (the body of an on-device decoding loop) runs in the
    TFLite interpreter with builtin ops only, and stepping it token by token
    reproduces the full causal pass."""
    tf = _tensorflow()
    model = gpt_decoder(
        30, num_layers=2, position="rotary", num_key_value_heads=2, **SMALL
    )
    decoder = CachedDecoder(model)

    def step(token_ids, cache_0, cache_1, index):
        logits, (cache_0, cache_1), _ = decoder.step(
            token_ids, (cache_0, cache_1), index
        )
        return {"logits": logits, "cache_0": cache_0, "cache_1": cache_1}

    cache_spec = tf.TensorSpec((1, 2, 2, 8, 4), tf.float32)  # (B, k/v, kv, len, d)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "step",
        step,
        input_signature=[
            tf.TensorSpec((1, 1), tf.int32),
            cache_spec,
            cache_spec,
            tf.TensorSpec((), tf.int32),
        ],
    )
    archive.write_out(str(tmp_path / "step"), verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(tmp_path / "step"), signature_keys=["step"]
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    runner = tf.lite.Interpreter(
        model_content=converter.convert()
    ).get_signature_runner("step")
    tokens = np.array([[5, 6, 7, 8, 9]], "int32")
    caches = [np.zeros(cache_spec.shape, "float32")] * 2
    steps = []
    for i in range(tokens.shape[1]):
        out = runner(
            token_ids=tokens[:, i : i + 1],
            cache_0=caches[0],
            cache_1=caches[1],
            index=np.array(i, "int32"),
        )
        caches = [out["cache_0"], out["cache_1"]]
        steps.append(out["logits"])
    full = np.asarray(model({"token_ids": tokens}))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-4)
