"""`tfformer-export --lora file`: a LoRA run's bundle holds the model it
started from, `lora.tflite` its adapters and `lora_none.tflite` none.
Google's LiteRT-LM runtime, given the first, decodes what tfformer-predict
decodes with the run's merged Keras model; given the second, what predict
decodes with the source run.
The file round-trips through `generate.py`'s reader; runs it cannot ship
are refused by name with nothing written."""

import numpy as np
import pytest

from tests.export.test_litertlm import converted_gpt2, needs_runtime
from tests.training.convert.huggingface.test_gpt2 import fine_tuning_config
from tfformer.export import litertlm
from tfformer.export.cli import main as export_main
from tfformer.export.lora_file import lora_file_bytes
from tfformer.export.runtimes.model_file import read_lora_file
from tfformer.training.trainer import train

PROMPTS = ("the cat", "we'll", "hello")


def quiet(*_):
    pass


def predicted(run, prompt, capsys):
    """tfformer-predict's greedy continuation of `prompt` (8 tokens)."""
    from tfformer.training.commands import predict as predict_cli

    capsys.readouterr()
    argv = ["--checkpoint", run, "--max-new-tokens", "8", "--search", "greedy"]
    assert predict_cli.main([*argv, prompt]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(prompt) and printed.endswith("\n")
    return printed[len(prompt) : -1]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A converted GPT-2 (random weights) fine-tuned with rank-2 adapters on
    query, value and output."""
    tmp_path = tmp_path_factory.mktemp("lora_run")
    _, source = converted_gpt2(tmp_path)
    overrides = ["model.lora_rank=2", "model.lora_targets=[query,value,output]"]
    train(fine_tuning_config(tmp_path, source, *overrides), progress=quiet)
    return source, str(tmp_path / "tuned")


@needs_runtime
def test_litert_lm_with_the_lora_file_decodes_as_the_merged_run(
    lora_run, tmp_path, capsys
):
    source, tuned = lora_run
    out = tmp_path / "bundle"
    argv = ["--checkpoint", tuned, "--format", "litertlm", "--lora", "file"]
    assert export_main([*argv, "--out", str(out)]) == 0
    bundle, adapters = str(out / "model.litertlm"), str(out / "lora.tflite")
    none = str(out / "lora_none.tflite")
    sums = (out / "SHA256SUMS").read_text()
    assert "lora.tflite" in sums and "lora_none.tflite" in sums
    changed = 0
    for prompt in PROMPTS:
        with_file = litertlm.litert_lm_greedy(bundle, prompt, 8, lora=adapters)
        without = litertlm.litert_lm_greedy(bundle, prompt, 8, lora=none)
        assert with_file == predicted(tuned, prompt, capsys), prompt
        assert without == predicted(source, prompt, capsys), prompt
        changed += with_file != without
    assert changed, "the adapters changed no continuation: the test checks nothing"


def test_the_lora_file_holds_the_scaled_adapters_padded_to_rank_16(lora_run, tmp_path):
    """`lora.tflite` of `--format tflite --lora file`, read back: for each
    adapted projection, A times alpha / rank and B, zero-padded to 16 (the
    smallest rank LiteRT-LM takes on CPU), from the run's adapters.npz; the
    model takes those inputs (zeros for key, which the run left alone)."""
    _, tuned = lora_run
    out = tmp_path / "tflite"
    argv = ["--checkpoint", tuned, "--format", "tflite", "--lora", "file"]
    assert export_main([*argv, "--out", str(out)]) == 0
    weights, rank = read_lora_file(str(out / "lora.tflite"))
    assert rank == 16
    with np.load(f"{tuned}/adapters.npz") as f:
        saved = {k: f[k] for k in f.files}
    letters = {"query": "q", "value": "v", "attention_output": "o", "output": "o"}
    blocks = {k.split("/")[1] for k in saved}
    assert len(weights) == 2 * 3 * len(blocks)
    for key in {k.rsplit("/", 1)[0] for k in saved}:
        _, layer, _, name = key.split("/")
        letter = letters[name]
        a = weights[f"lora_atten_{letter}_a_prime_weight_{layer}"]
        b = weights[f"lora_atten_{letter}_b_prime_weight_{layer}"]
        np.testing.assert_allclose(a[:, :2], saved[f"{key}/scale"] * saved[f"{key}/a"])
        np.testing.assert_array_equal(b[:2], saved[f"{key}/b"])
        assert not a[:, 2:].any() and not b[2:].any()
    from tfformer.export.runtimes.generate import LiteRTGenerator

    generator = LiteRTGenerator(
        str(out / "model.tflite"), lora=str(out / "lora.tflite")
    )
    assert not generator.lora_inputs["lora_atten_k_a_prime_weight_0"].any()
    assert generator.lora_inputs["lora_atten_q_a_prime_weight_0"].any()


def test_the_file_layout_is_litert_lms(tmp_path):
    """Each tensor's bytes at its buffer's offset, 64-byte aligned, the file
    a whole number of 4 KiB pages, the rank in `lora_rank`."""
    from ai_edge_litert import schema_py_generated as schema

    rng = np.random.default_rng(0)
    weights = {
        "lora_atten_q_a_prime_weight_0": rng.standard_normal((5, 16), np.float32),
        "lora_atten_q_b_prime_weight_0": rng.standard_normal((16, 7), np.float32),
    }
    data = lora_file_bytes(weights, 16)
    assert len(data) % 4096 == 0 and data[4:8] == b"TFL3"
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    assert [(m.name, m.buffer) for m in model.metadata] == [(b"lora_rank", 16)]
    assert model.buffers[0].offset == 0 and not model.buffers[0].data
    for tensor in model.subgraphs[0].tensors:
        buffer = model.buffers[tensor.buffer]
        assert buffer.offset % 64 == 0 and buffer.data is None
        array = weights[tensor.name.decode()]
        stored = data[buffer.offset : buffer.offset + buffer.size]
        assert stored == array.tobytes()
    (tmp_path / "lora.tflite").write_bytes(data)
    read, rank = read_lora_file(str(tmp_path / "lora.tflite"))
    assert rank == 16 and read.keys() == weights.keys()
    for name, array in weights.items():
        np.testing.assert_array_equal(read[name], array)


def test_runs_the_lora_file_cannot_carry_are_refused(lora_run, tmp_path, capsys):
    """A run without adapters, feed-forward adapters (LiteRT-LM has no
    input for them), and --decode-batch with --lora file: exit 2 naming
    --lora, nothing written."""
    source, tuned = lora_run
    out = tmp_path / "out"
    argv = ["--format", "tflite", "--lora", "file", "--out", str(out)]
    assert export_main(["--checkpoint", source, *argv]) == 2
    assert "--lora file ships a LoRA run's adapters" in capsys.readouterr().err
    assert export_main(["--checkpoint", tuned, *argv, "--decode-batch", "2"]) == 2
    assert "--lora file adds LoRA inputs" in capsys.readouterr().err
    # The run's adapters and one of its first feed-forward layer's.
    import shutil

    import tfformer

    ffn = tmp_path / "ffn"
    shutil.copytree(tuned, ffn)
    model = tfformer.load(str(ffn)).model
    intermediate = model.backbone.decoder_blocks[0].ffn.intermediate_dense.kernel
    n_in, n_out = intermediate.shape
    with np.load(ffn / "adapters.npz") as f:
        arrays = {k: f[k] for k in f.files}
    key = "decoder_blocks/0/ffn/ffn_intermediate"
    arrays[f"{key}/a"] = np.ones((n_in, 2), np.float32)
    arrays[f"{key}/b"] = np.ones((2, n_out), np.float32)
    arrays[f"{key}/scale"] = np.float32(1)
    arrays[f"{key}/merged_row"] = np.asarray(intermediate)[0]
    np.savez(ffn / "adapters.npz", **arrays)
    assert export_main(["--checkpoint", str(ffn), *argv]) == 2
    err = capsys.readouterr().err
    assert "--lora" in err and "ffn" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    # A model.keras that is not the adapters merged into the weights (as
    # best.keras of an earlier epoch would be): unmerging would give a
    # wrong starting model.
    other = tmp_path / "other"
    shutil.copytree(tuned, other)
    model = tfformer.load(str(other)).model
    kernel = model.backbone.decoder_blocks[0].self_attention.query_dense.kernel
    kernel.assign(kernel + 1e-3)
    model.save(other / "model.keras")
    assert export_main(["--checkpoint", str(other), *argv]) == 2
    assert "are not" in capsys.readouterr().err
    # A SavedModel merges the adapters.
    saved = ["--checkpoint", tuned, "--format", "saved_model", "--lora", "file"]
    assert export_main([*saved, "--out", str(out)]) == 2
    assert "--lora file applies to --format tflite" in capsys.readouterr().err
    assert not out.exists()


def test_a_merged_export_removes_an_earlier_exports_lora_files(lora_run, tmp_path):
    _, tuned = lora_run
    out = tmp_path / "out"
    argv = ["--checkpoint", tuned, "--format", "tflite", "--out", str(out)]
    assert export_main([*argv, "--lora", "file"]) == 0
    assert (out / "lora.tflite").is_file()
    assert export_main(argv) == 0
    assert not (out / "lora.tflite").exists()
    assert not (out / "lora_none.tflite").exists()
    assert "lora" not in (out / "SHA256SUMS").read_text()
