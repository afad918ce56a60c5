"""`tfformer-convert` on small random Llama-style decoders in the Hugging
Face layout (`LlamaForCausalLM`'s tensor names and shapes), checked against
keras-hub's `Llama3Backbone` reading the same directory; the converted run
generates token ids, and refuses what it does not reproduce."""

import json
import os

import numpy as np
import pytest

import tfformer
from tests.training.convert.huggingface.testing import (
    assert_predict_continues_ids,
    assert_refused,
    backbone_logits,
    changed,
    quiet,
    reference_greedy,
    served_greedy,
)
from tests.training.tiny import NO_XLA
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.training.commands import predict as predict_cli
from tfformer.training.config import load_config
from tfformer.training.convert import convert
from tfformer.training.tasks import get_task
from tfformer.training.trainer import train

safetensors_numpy = pytest.importorskip("safetensors.numpy")

SIZES = {"vocab": 40, "hidden": 16, "heads": 4, "kv": 2, "layers": 2, "inner": 24}


# Llama 3.1's rotary scaling on heads of 8 features: of the 4 frequencies
# (wavelengths 6.3, 30, 140 and 660 at rope_theta 500), the first is kept,
# the second blended and the last two divided by the factor.
SCALED_SIZES = {**SIZES, "hidden": 32}
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 100,
}


def llama_tensors(rng, *, tie=False, sizes=SIZES):
    s = sizes
    d, inner, v = s["hidden"], s["inner"], s["vocab"]
    kv = s["kv"] * d // s["heads"]

    def normal(*shape, scale=0.3):
        return (scale * rng.normal(size=shape)).astype("float32")

    t = {
        "model.embed_tokens.weight": normal(v, d),
        "model.norm.weight": 1 + normal(d, scale=0.1),
    }
    for i in range(s["layers"]):
        layer = f"model.layers.{i}"
        t[f"{layer}.self_attn.q_proj.weight"] = normal(d, d)
        t[f"{layer}.self_attn.k_proj.weight"] = normal(kv, d)
        t[f"{layer}.self_attn.v_proj.weight"] = normal(kv, d)
        t[f"{layer}.self_attn.o_proj.weight"] = normal(d, d)
        t[f"{layer}.mlp.gate_proj.weight"] = normal(inner, d)
        t[f"{layer}.mlp.up_proj.weight"] = normal(inner, d)
        t[f"{layer}.mlp.down_proj.weight"] = normal(d, inner)
        t[f"{layer}.input_layernorm.weight"] = 1 + normal(d, scale=0.1)
        t[f"{layer}.post_attention_layernorm.weight"] = 1 + normal(d, scale=0.1)
    if not tie:
        t["lm_head.weight"] = normal(v, d)
    return t


def overlay_config(source, family, config=None, drop=()):
    """Rewrites `source`'s config.json (a Llama one, from `write_checkpoint`)
    as another family's: `family`'s keys, then `config`'s, less `drop`."""
    path = source / "config.json"
    settings = {**json.loads(path.read_text()), **family, **(config or {})}
    for key in drop:
        settings.pop(key, None)
    path.write_text(json.dumps(settings))
    return source


def own_head_tensors(rng, head_dim, sizes=SIZES):
    """Llama's tensors (tied) with query, key, value and output projections
    for heads of `head_dim` features (not width / heads: Qwen3, Gemma)."""
    tensors = llama_tensors(rng, tie=True, sizes=sizes)
    d, heads, kv = SIZES["hidden"], SIZES["heads"], SIZES["kv"]
    for i in range(SIZES["layers"]):
        layer = f"model.layers.{i}.self_attn"
        for part, rows in (("q", heads), ("k", kv), ("v", kv)):
            shape = (rows * head_dim, d)
            tensors[f"{layer}.{part}_proj.weight"] = 0.3 * rng.normal(size=shape)
        tensors[f"{layer}.o_proj.weight"] = 0.3 * rng.normal(size=(d, heads * head_dim))
    return tensors


def write_checkpoint(path, rng, *, tie=False, tensors=None, config=None, sizes=SIZES):
    """A LlamaForCausalLM checkpoint as `save_pretrained` writes it (its
    tokenizer files are not read)."""
    os.makedirs(path, exist_ok=True)
    s = sizes
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": s["vocab"],
        "hidden_size": s["hidden"],
        "intermediate_size": s["inner"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv"],
        "hidden_act": "silu",
        "max_position_embeddings": 32,
        # keras-hub's Llama has a fixed 1e-6.
        "rms_norm_eps": 1e-6,
        "rope_theta": 500.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tie,
        "bos_token_id": 1,
        "eos_token_id": 2,
        **(config or {}),
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    safetensors_numpy.save_file(
        tensors if tensors is not None else llama_tensors(rng, tie=tie, sizes=s),
        os.path.join(path, "model.safetensors"),
        metadata={"format": "pt"},
    )
    return path


def ragged_batch(rng):
    """Three sequences of 7, 5 and 3 of the checkpoint's ids, id 0 among
    them (a real token: the model's ids are one higher), and their padding
    mask."""
    ids = rng.integers(0, SIZES["vocab"], (3, 7)).astype("int32")
    ids[:, 1] = 0
    mask = np.arange(7)[None] < np.array([[7], [5], [3]])
    return ids, mask


@pytest.mark.parametrize("tie", [False, True], ids=["lm_head", "tied"])
def test_logits_equal_keras_hub_on_a_ragged_batch(tmp_path, tie):
    keras_hub = pytest.importorskip("keras_hub")
    rng = np.random.default_rng(0)
    source = write_checkpoint(tmp_path / "hf", rng, tie=tie)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run).model
    reference = keras_hub.models.Llama3Backbone.from_preset(str(source))
    ids, mask = ragged_batch(rng)
    hidden = reference({"token_ids": ids, "padding_mask": mask})
    expected = np.asarray(reference.token_embedding(hidden, reverse=True))
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-5)
    np.testing.assert_array_equal(ours[..., 0], -1e4)  # padding
    # Grouped-query attention: 2 key/value heads for 4 query heads.
    assert type(model.backbone).__name__ == "LlamaBackbone"
    attention = model.backbone.decoder_blocks[0].self_attention
    assert tuple(attention.key_dense.kernel.shape) == (16, 8)


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"rope_scaling": LLAMA3_SCALING}, id="rope_scaling"),
        # transformers 5 writes the scaling and rope_theta in rope_parameters
        # (read before a top-level rope_theta, here another one): the same
        # model from another key, in the integration tier.
        pytest.param(
            {
                "rope_scaling": None,
                "rope_theta": 10000.0,
                "rope_parameters": {**LLAMA3_SCALING, "rope_theta": 500},
            },
            id="rope_parameters",
            marks=pytest.mark.integration,
        ),
    ],
)
def test_llama3_rope_scaling_equals_keras_hub(tmp_path, capsys, config):
    """Logits at 24 positions and greedy continuations equal keras-hub's
    `Llama3Backbone` (its converter reads rope_scaling), and differ from the
    same weights without the scaling."""
    keras_hub = pytest.importorskip("keras_hub")
    rng = np.random.default_rng(11)
    tensors = llama_tensors(rng, sizes=SCALED_SIZES)
    common = {"max_position_embeddings": 32}
    source = write_checkpoint(
        tmp_path / "hf",
        rng,
        tensors=tensors,
        sizes=SCALED_SIZES,
        config={**common, **config},
    )
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("Llama 3.1 rotary scaling (factor 8)" in line for line in said)
    model = tfformer.load(run).model
    assert model.backbone.rope_scaling == {
        **LLAMA3_SCALING,
        "factor": 8.0,
        "original_max_position_embeddings": 100.0,
    }
    # keras-hub's converter reads transformers 4's rope_scaling only.
    as_keras_hub_reads_it = write_checkpoint(
        tmp_path / "keras_hub",
        rng,
        tensors=tensors,
        sizes=SCALED_SIZES,
        config={**common, "rope_scaling": LLAMA3_SCALING},
    )
    reference = keras_hub.models.Llama3Backbone.from_preset(str(as_keras_hub_reads_it))
    ids = rng.integers(0, SIZES["vocab"], (2, 24)).astype("int32")
    mask = np.arange(24)[None] < np.array([[24], [17]])
    expected = backbone_logits(reference, ids, mask)
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-4)
    plain = write_checkpoint(
        tmp_path / "plain", rng, tensors=tensors, sizes=SCALED_SIZES, config=common
    )
    unscaled = tfformer.load(convert(str(plain), str(tmp_path / "p"), progress=quiet))
    other = np.asarray(unscaled.model({"token_ids": np.where(mask, ids + 1, 0)}))
    assert np.abs(other[mask][:, 1:] - expected[mask]).max() > 1e-2
    # Greedy decoding with the cache (the offsets of cached positions go
    # through the scaled frequencies too) picks keras-hub's argmax.
    prompt = [int(i) for i in ids[0, :5]]
    continued = reference_greedy(reference, prompt, 8, end=2)
    argv = ["--checkpoint", run, "--max-new-tokens", "8", " ".join(map(str, prompt))]
    assert predict_cli.main(argv) == 0
    printed = capsys.readouterr().out.split("\n")[0].split()
    assert [int(i) for i in printed] == continued


def test_the_run_keeps_the_checkpoints_settings(tmp_path):
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(1),
        config={
            "rms_norm_eps": 1e-5,
            "eos_token_id": [2, 7],
            "rope_scaling": {"rope_type": "default"},
        },
    )
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    loaded = tfformer.load(run)
    assert loaded.model.backbone.final_norm.epsilon == 1e-5
    assert loaded.model.backbone.rope_max_wavelength == 500.0
    block = loaded.model.backbone.decoder_blocks[1]
    assert block.rotary_max_wavelength == 500.0 and block.normalization == "rms"
    assert block.activation_dropout == 0.0  # Llama's MLP has no dropout
    assert loaded.config.model.activation_dropout == 0.0
    tokenizer = loaded.tokenizers["text"]
    # The model's ids: the checkpoint's plus one.
    assert (tokenizer.start_id, tokenizer.end_id, tokenizer.pad_id) == (2, 3, 0)
    assert any("eos_token_id lists [2, 7]" in line for line in said)
    assert loaded.directory.manifest.max_length == 32


def test_greedy_generation_equals_keras_hubs_argmax(tmp_path, capsys):
    """`tfformer-predict` (KV-cached greedy decoding) continues a prompt of
    ids with the tokens a full keras-hub forward pass picks one at a time."""
    keras_hub = pytest.importorskip("keras_hub")
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    reference = keras_hub.models.Llama3Backbone.from_preset(str(source))
    assert_predict_continues_ids(run, reference, capsys)
    # A long prompt of ids keeps the bos first, before its last 25 ids, as
    # a Llama 3 text prompt keeps <|begin_of_text|>.
    assert_predict_continues_ids(run, reference, capsys, LONG_IDS, kept=LONG_IDS_KEPT)


PROMPT = [1, 5, 0, 12]
# Past the 26 ids a context of 32 leaves for 6 new tokens; the bos first.
LONG_IDS = [1, *np.random.default_rng(4).integers(3, 40, 35).tolist()]
# What a cut keeps of it: the bos, then the last 25 ids.
LONG_IDS_KEPT = [1, *LONG_IDS[-25:]]


def run_ending_at_two_ids(tmp_path, keras_hub):
    """A random Llama checkpoint whose config.json lists two eos ids: 2 and
    the first token of keras-hub's greedy continuation of `PROMPT` (up to
    id 2) that is new to it, after at least one token. Returns (the run,
    the continuation up to that token, left out, and the token)."""
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    reference = keras_hub.models.Llama3Backbone.from_preset(str(source))
    free = reference_greedy(reference, PROMPT, 8, end=2)[len(PROMPT) :]
    cut = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    with open(source / "config.json") as f:
        config = json.load(f)
    config["eos_token_id"] = [2, free[cut]]
    with open(source / "config.json", "w") as f:
        json.dump(config, f)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert reference_greedy(reference, PROMPT, 8, end=(2, free[cut]))[4:] == free[:cut]
    return run, free[:cut], free[cut]


def test_generation_ends_at_any_of_the_checkpoints_eos_ids(tmp_path, capsys):
    """Llama 3.1 Instruct's config.json lists three eos ids, and
    transformers stops at any: so do the run's generator, `tfformer-predict`
    and `tfformer.load(RUN).generate` (the id is left out, as the end is)."""
    keras_hub = pytest.importorskip("keras_hub")
    run, kept, end = run_ending_at_two_ids(tmp_path, keras_hub)
    loaded = tfformer.load(run)
    assert loaded.directory.manifest.end_ids == (3, end + 1)  # model ids: +1
    text = " ".join(map(str, PROMPT))
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "8", text]) == 0
    assert capsys.readouterr().out.split() == [str(i) for i in PROMPT + kept]
    (generated,) = loaded.generate([text], max_new_tokens=8)
    assert generated.split() == [str(i) for i in PROMPT + kept]


@pytest.mark.integration
def test_exports_end_at_any_of_the_checkpoints_eos_ids(tmp_path, capsys):
    """The SavedModel's `generate`, the device runtime and the TFLite loop
    model stop where `tfformer-predict` does on a run with two end ids."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from tests.training.convert.huggingface.test_gpt2 import shipped_runtime
    from tfformer.export.cli import main as export_main
    from tfformer.export.saved_model import export_saved_model

    keras_hub = pytest.importorskip("keras_hub")
    run, kept, end = run_ending_at_two_ids(tmp_path, keras_hub)
    text = " ".join(map(str, PROMPT))
    served = tf.saved_model.load(
        export_saved_model(run, str(tmp_path / "serving"), progress=quiet)
    )
    out = served_greedy(served, [text], [8])
    assert out["text"].numpy()[0].decode().split() == [str(i) for i in kept]
    out = tmp_path / "device"
    argv = ["--checkpoint", run, "--format", "tflite", "--out", str(out)]
    assert export_main(argv) == 0
    capsys.readouterr()
    runtime = shipped_runtime(str(out), str(out / "model.tflite"))
    assert runtime.generate_text(text, 8, greedy=True).split() == [str(i) for i in kept]
    tokens = np.zeros((1, runtime.context), np.int32)
    tokens[0, :4] = [i + 1 for i in PROMPT]
    loop = Interpreter(model_path=str(out / "model_loop.tflite"))
    got = loop.get_signature_runner()(
        token_ids=tokens, max_new_tokens=np.array([8], np.int32)
    )["token_ids"][0]
    # The loop model writes the end id, then padding.
    assert got[4 : 4 + len(kept) + 2].tolist() == [i + 1 for i in kept] + [end + 1, 0]


def test_generation_config_eos_ids_end_generation_too(tmp_path):
    """transformers' `generate` reads generation_config.json, where some
    checkpoints list their end-of-turn ids: they join config.json's."""
    from tfformer.training.convert.huggingface import decoders

    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [2, 9]}')
    assert decoders.end_ids(str(tmp_path), {"eos_token_id": 2}, 2, 40) == [3, 10]
    assert decoders.end_ids(str(tmp_path), {"eos_token_id": [2, 9]}, 2, 40) == [3, 10]
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": 2}')
    assert decoders.end_ids(str(tmp_path), {}, 2, 40) is None
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [2, 40]}')
    with pytest.raises(ValueError, match=r"generation_config.json: eos_token_id"):
        decoders.end_ids(str(tmp_path), {}, 2, 40)


def test_a_checkpoint_whose_special_ids_are_zero(tmp_path, capsys):
    """SmolLM's bos and eos are id 0: the run keeps them (as model id 1)
    and generation stops there. The final norm's zero scale makes every
    logit 0 but padding's, so the first id, the end, is always next."""
    rng = np.random.default_rng(5)
    tensors = llama_tensors(rng)
    tensors["model.norm.weight"][:] = 0
    source = write_checkpoint(
        tmp_path / "hf",
        rng,
        tensors=tensors,
        config={"bos_token_id": 0, "eos_token_id": 0},
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    tokenizer = tfformer.load(run).tokenizers["text"]
    assert (tokenizer.start_id, tokenizer.end_id, tokenizer.id_offset) == (1, 1, 1)
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "3", "0 5"]) == 0
    assert capsys.readouterr().out == "0 5\n"


@pytest.mark.integration
def test_the_saved_model_generates_the_ids_predict_does(tmp_path, capsys):
    import tensorflow as tf

    from tfformer.export.saved_model import export_saved_model

    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(7))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    argv = ["--checkpoint", run, "--max-new-tokens", "5", "1 0 9"]
    assert predict_cli.main(argv) == 0
    printed = capsys.readouterr().out.strip()
    served = tf.saved_model.load(
        export_saved_model(run, str(tmp_path / "serving"), progress=quiet)
    )
    out = served_greedy(served, ["1 0 9"], [5])
    new = out["text"].numpy()[0].decode().split()
    assert ["1", "0", "9", *new] == printed.split()
    # A long prompt of ids keeps the bos first, as predict does.
    long = " ".join(map(str, LONG_IDS))
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", long]) == 0
    printed = capsys.readouterr().out.strip()
    out = served_greedy(served, [long], [6])
    assert out["prompt_tokens"].numpy().tolist() == [26]
    kept = [str(i) for i in LONG_IDS_KEPT]
    assert [*kept, *out["text"].numpy()[0].decode().split()] == printed.split()
    # An id the checkpoint does not have fails the call, naming the range.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"in \[0, 40\)"):
        served.signatures["tokenize"](text=tf.constant(["1 40"]))


def test_token_id_tokenizer():
    tokenizer = TokenIdTokenizer(50, start_id=1, end_id=2)
    ids = tokenizer.tokenize(["1 17  4\t9", ""])
    assert ids.to_list() == [[1, 17, 4, 9], []]
    assert tokenizer.detokenize([[1, 17, 0, 0]]).numpy().tolist() == [b"1 17"]
    for text in ("one two", "1 -3", "1 50", "1.5"):
        with pytest.raises(ValueError, match=r"reads token ids: .* below 50"):
            tokenizer.tokenize([text])
    with pytest.raises(ValueError, match=r"end_id must be an id below 50"):
        TokenIdTokenizer(50, start_id=1, end_id=50)


def test_the_tflite_model_generates_the_ids_predict_does(tmp_path, capsys):
    """TFLite of a Llama run (rotary positions, RMSNorm, SwiGLU, grouped
    queries in the prefill/decode signatures): the shipped runtime reads and
    writes checkpoint ids, as `tfformer-predict` does, and greedy decoding
    gives predict's ids; the loop model too."""
    from ai_edge_litert.interpreter import Interpreter

    from tests.training.convert.huggingface.test_gpt2 import shipped_runtime
    from tfformer.export.cli import main as export_main

    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(7))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    out = tmp_path / "device"
    argv = ["--checkpoint", run, "--format", "tflite", "--out", str(out)]
    assert export_main(argv) == 0
    capsys.readouterr()
    runtime = shipped_runtime(str(out), str(out / "model.tflite"))
    assert runtime.tokenizer.ids("1 0 9") == [2, 1, 10]
    argv = ["--checkpoint", run, "--max-new-tokens", "5", "1 0 9"]
    assert predict_cli.main(argv) == 0
    printed = capsys.readouterr().out.strip()
    text = runtime.generate_text("1 0 9", 5, greedy=True)
    assert f"1 0 9 {text}".strip() == printed
    # A long prompt of ids keeps the bos first, as predict does.
    long = " ".join(map(str, LONG_IDS))
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", long]) == 0
    kept = " ".join(map(str, LONG_IDS_KEPT))
    text = runtime.generate_text(long, 6, greedy=True)
    assert f"{kept} {text}".strip() == capsys.readouterr().out.strip()
    new, _ = runtime.generate([2, 1, 10], 5, greedy=True)
    context = runtime.context
    tokens = np.zeros((1, context), np.int32)
    tokens[0, :3] = [2, 1, 10]
    loop = Interpreter(model_path=str(out / "model_loop.tflite"))
    got = loop.get_signature_runner()(
        token_ids=tokens, max_new_tokens=np.array([5], np.int32)
    )["token_ids"][0]
    assert got[3 : 3 + len(new)].tolist() == new
    with pytest.raises(ValueError, match="whitespace-separated integers below 40"):
        runtime.tokenizer.ids("1 40")


def test_text_prompts_and_a_text_file_are_refused(tmp_path, capsys):
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(3))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "2", "hi"]) == 2
    assert "reads token ids" in capsys.readouterr().err
    (tmp_path / "words.txt").write_text("not token ids\n" * 50)
    config = load_config(
        overrides=[
            "task=causal_lm",
            "data.tokenizer=ids",
            f"data.text_path={tmp_path / 'words.txt'}",
            "data.max_length=16",
            f"model.init_from={run}",
            f"train.output_dir={tmp_path / 'trained'}",
        ]
    )
    with pytest.raises(ValueError, match=r"data.text_path=.*words.txt.*integers below"):
        train(config, progress=quiet)
    # Without init_from, ids are no tokenizer tfformer learns.
    config = load_config(
        overrides=[
            "task=causal_lm",
            "data.tokenizer=ids",
            f"data.text_path={tmp_path / 'words.txt'}",
            f"train.output_dir={tmp_path / 'trained'}",
        ]
    )
    with pytest.raises(ValueError, match=r"data.tokenizer='ids' is the tokenizer of"):
        train(config, progress=quiet)
    # The converted run's config has no text: training it again needs one.
    config = load_config(
        overrides=["task=causal_lm", f"train.output_dir={tmp_path / 'again'}"]
    )
    with pytest.raises(ValueError, match=r"task 'causal_lm' needs data.text_path"):
        train(config, progress=quiet)
    assert not (tmp_path / "trained").exists() and not (tmp_path / "again").exists()


@pytest.mark.integration
def test_a_converted_llama_fine_tunes_on_a_file_of_token_ids(tmp_path, capsys):
    """`model.init_from` of a converted Llama reads a file of the
    checkpoint's ids: the splits cut between ids, the copy computes the
    source's logits, training lowers the loss on the file, and the new run
    keeps the ids tokenizer and the checkpoint's end ids, and continues the
    file's pattern."""
    from tfformer.training.commands import evaluate as evaluate_cli

    source = write_checkpoint(
        tmp_path / "hf", np.random.default_rng(8), config={"eos_token_id": [2, 9]}
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    pattern = [5, 17, 0, 23, 8, 31, 12, 39, 4, 26]  # 0 and 39: real tokens
    line = " ".join(str(i) for i in pattern * 3)
    (tmp_path / "ids.txt").write_text((line + "\n") * 20)
    overrides = [
        "task=causal_lm",
        "data.tokenizer=ids",
        f"data.text_path={tmp_path / 'ids.txt'}",
        "data.max_length=16",
        "data.holdout_fraction=0.15",
        f"model.init_from={run}",
        "train.batch_size=4",
        "train.steps_per_epoch=80",
        "train.epochs=1",
        "train.warmup_steps=2",
        "train.schedule=cosine",
        "train.learning_rate=1e-2",
        "train.label_smoothing=0",
        "train.verbose=0",
        NO_XLA,
        f"train.output_dir={tmp_path / 'tuned'}",
    ]
    config = load_config(overrides=overrides)
    task = get_task("causal_lm")
    raw = task.raw_splits(config.data)
    # A character cut would fall inside an id for this holdout; the splits
    # hold whole ids, in order.
    words = [w for s in ("train", "validation", "test") for w in raw[s].split()]
    assert words == (tmp_path / "ids.txt").read_text().split()
    text = (tmp_path / "ids.txt").read_text()
    cut = int(len(text) * 0.85)
    middle = cut + (len(text) - cut) // 2  # validation | test: inside "31"
    assert text[middle - 1 : middle + 1] == "31"
    data = task.prepare(config, raw, None, quiet)
    model = task.build_model(config, data)
    x = data.examples["train"].features["token_ids"].to_tensor().numpy()[:4]
    np.testing.assert_allclose(
        np.asarray(model({"token_ids": x})),
        np.asarray(tfformer.load(run).model({"token_ids": x})),
        atol=1e-6,
    )
    scored = ["--text", str(tmp_path / "ids.txt"), "--window", "16"]
    assert evaluate_cli.main(["--checkpoint", run, *scored]) == 0
    before = json.loads(capsys.readouterr().out)["nats_per_token"]
    train(config, progress=quiet)
    tuned = str(tmp_path / "tuned")
    assert tfformer.load(tuned).directory.manifest.end_ids == (3, 10)
    assert evaluate_cli.main(["--checkpoint", tuned, *scored]) == 0
    after = json.loads(capsys.readouterr().out)["nats_per_token"]
    assert after < 0.1 * before, (before, after)
    assert (tmp_path / "tuned" / "text_tokenizer.json").read_bytes() == (
        (tmp_path / "run" / "text_tokenizer.json").read_bytes()
    )
    prompt = " ".join(str(i) for i in pattern[:4])
    argv = ["--checkpoint", tuned, "--max-new-tokens", "6", prompt]
    assert predict_cli.main(argv) == 0
    continued = [int(w) for w in capsys.readouterr().out.split()]
    assert continued == (pattern * 2)[:10], (continued, before, after)


# -- bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"drop": "model.layers.1.mlp.up_proj.weight"},
            "no tensor 'model.layers.1.mlp.up_proj.weight'",
        ),
        (
            {"drop": "lm_head.weight"},
            "no tensor 'lm_head.weight'",
        ),
        (
            {"config": {"num_key_value_heads": 4}},
            r"'model.layers.0.self_attn.k_proj.weight' has shape \[8, 16\]; "
            r"the config implies \[16, 16\]",
        ),
        (
            {
                "config": {
                    "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
                }
            },
            r"rope_scaling of rope_type llama3 takes exactly .*missing "
            r"\['low_freq_factor', 'high_freq_factor', 'original_max",
        ),
        (
            {"config": {"rope_scaling": {"type": "linear", "factor": 2.0}}},
            r"rope_scaling must be null, default or of rope_type 'llama3'.*linear",
        ),
        (
            {"config": {"rope_scaling": {**LLAMA3_SCALING, "high_freq_factor": 1}}},
            "high_freq_factor must exceed low_freq_factor",
        ),
        ({"config": {"attention_bias": True}}, "attention_bias must be false"),
        # Python's json reads NaN, which passed a "<= 0" check.
        (
            {"config": {"rope_theta": float("nan")}},
            "rope_theta must be positive and finite. Received: nan",
        ),
        # An integer past float's range was an OverflowError.
        (
            {"config": {"rope_theta": 10**400}},
            "rope_theta must be positive and finite",
        ),
        (
            {"config": {"rms_norm_eps": 10**400}},
            "'rms_norm_eps' must be finite",
        ),
        (
            {"config": {"rope_parameters": [500.0]}},
            r"rope_parameters must be an object\. Received: \[500\.0\]",
        ),
        ({"config": {"hidden_act": "gelu"}}, r"hidden_act must be one of \['silu'\]"),
        ({"config": {"head_dim": 8}}, "head_dim must be hidden_size / num_attention"),
        (
            {"config": {"num_key_value_heads": 3}},
            r"multiple of num_key_value_heads \(3\)",
        ),
        (
            {"config": {"eos_token_id": 40}},
            r"eos_token_id must be a token id below vocab_size \(40\)",
        ),
        (
            {"extra": "model.layers.0.self_attn.q_norm.weight"},
            "does not use .*q_norm",
        ),
    ],
)
def test_bad_checkpoints_are_refused_naming_the_key(tmp_path, change, message):
    rng = np.random.default_rng(4)
    tensors = changed(llama_tensors(rng), change, np.ones((4,), "float32"))
    source = write_checkpoint(
        tmp_path / "hf", rng, tensors=tensors, config=change.get("config")
    )
    assert_refused(tmp_path, source, message)


# -- Llama 3's tokenizer ---------------------------------------------------------

BEGIN, END_OF_TEXT = "<|begin_of_text|>", "<|end_of_text|>"


def llama3_tokenizer():
    """A tokenizer.json in Llama 3's form (Split on its pattern, ByteLevel
    without a regex, ignore_merges, a template that starts every text with
    <|begin_of_text|>), trained here by Hugging Face's tokenizers."""
    from tokenizers import processors

    from tests.tfformer.preprocessing.test_bpe_tokenizer import llama3_style_hf

    hf = llama3_style_hf(vocab_size=300)
    hf.add_special_tokens([BEGIN, END_OF_TEXT])
    hf.post_processor = processors.TemplateProcessing(
        single=f"{BEGIN} $A", special_tokens=[(BEGIN, hf.token_to_id(BEGIN))]
    )
    return hf


def write_llama3_checkpoint(path, hf, rng):
    sizes = {**SIZES, "vocab": hf.get_vocab_size()}
    source = write_checkpoint(
        path,
        rng,
        sizes=sizes,
        tensors=llama_tensors(rng, sizes=sizes),
        config={
            "vocab_size": sizes["vocab"],
            "bos_token_id": hf.token_to_id(BEGIN),
            "eos_token_id": [hf.token_to_id(END_OF_TEXT), 7],
        },
    )
    hf.save(str(source / "tokenizer.json"))
    return source


def converted_llama3_text(tmp_path):
    """A random Llama 3 checkpoint with its tokenizer.json, converted:
    (the Hugging Face tokenizer, the checkpoint, the run, what convert said)."""
    hf = llama3_tokenizer()
    source = write_llama3_checkpoint(tmp_path / "hf", hf, np.random.default_rng(8))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    return hf, source, run, said


def test_llama3_text_in_and_out_equals_keras_hub_and_the_tokenizer(tmp_path, capsys):
    """With Llama 3's tokenizer.json, the run takes and gives text: its ids
    are Hugging Face's (the template's <|begin_of_text|> first), and
    `tfformer-predict` continues a prompt with keras-hub's greedy tokens,
    decoded as Hugging Face decodes them."""
    keras_hub = pytest.importorskip("keras_hub")
    hf, source, run, said = converted_llama3_text(tmp_path)
    assert any(
        "BPE (llama3 pieces, ignore_merges, <|begin_of_text|> first) from tokenizer"
        in line
        for line in said
    )
    assert any("text in and out" in line for line in said)
    loaded = tfformer.load(run)
    tokenizer = loaded.tokenizers["text"]
    texts = ["the cat", "don't\n\n  2024 naïve!!", " \tx", "日本\r\n"]
    ours = [[i - 1 for i in row] for row in tokenizer.tokenize(texts).to_list()]
    assert ours == [hf.encode(t).ids for t in texts]
    reference = keras_hub.models.Llama3Backbone.from_preset(str(source))
    prompt = "the cat"
    ids = reference_greedy(
        reference, hf.encode(prompt).ids, 6, end=hf.token_to_id(END_OF_TEXT)
    )
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed == hf.decode(ids) + "\n"
    # A prompt longer than the context leaves is cut from the left, as a
    # transformers user truncates: <|begin_of_text|> stays first.
    cut = long_prompt_cut(hf)
    ids = reference_greedy(reference, cut, 6, end=hf.token_to_id(END_OF_TEXT))
    argv = ["--checkpoint", run, "--max-new-tokens", "6", LONG_PROMPT]
    assert predict_cli.main(argv) == 0
    printed = capsys.readouterr()
    assert printed.out == hf.decode(ids) + "\n"  # the kept prompt, continued
    assert "kept its start token and last 25 (the context is 32" in printed.err


# Over the 26 tokens a context of 32 leaves for 6 new ones.
LONG_PROMPT = "the cat sat on the mat, and the dog sat on the log. " * 3


def long_prompt_cut(hf):
    """LONG_PROMPT's Hugging Face ids cut to 26 from the left, keeping
    <|begin_of_text|> first."""
    ids = hf.encode(LONG_PROMPT).ids
    assert ids[0] == hf.token_to_id(BEGIN) and len(ids) > 26 + 5
    return ids[:1] + ids[len(ids) - 25 :]


@pytest.mark.integration
def test_llama3_text_in_a_saved_model_as_predict_and_the_tokenizer(tmp_path, capsys):
    """The SavedModel's in-graph tokenizer starts the text as the run does:
    its greedy continuation is `tfformer-predict`'s, its ids Hugging Face's."""
    import tensorflow as tf

    from tfformer.export.saved_model import export_saved_model

    hf, _, run, _ = converted_llama3_text(tmp_path)
    prompt = "the cat"
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    printed = capsys.readouterr().out
    texts = ["the cat", "don't\n\n  2024 naïve!!", " \tx", "日本\r\n"]
    path = export_saved_model(run, str(tmp_path / "serving"), progress=quiet)
    served = tf.saved_model.load(path)
    out = served_greedy(served, [prompt, LONG_PROMPT], [6, 6])
    text = out["text"].numpy()[0].decode("utf-8", "replace")
    assert prompt + text == printed[:-1]
    # A long prompt keeps <|begin_of_text|> first, as predict does.
    argv = ["--checkpoint", run, "--max-new-tokens", "6", LONG_PROMPT]
    assert predict_cli.main(argv) == 0
    text = out["text"].numpy()[1].decode("utf-8", "replace")
    assert hf.decode(long_prompt_cut(hf)) + text + "\n" == capsys.readouterr().out
    kept = [len(hf.encode(prompt).ids), 32 - 6]
    assert out["prompt_tokens"].numpy().tolist() == kept
    tokens = served.signatures["tokenize"](text=tf.constant(texts))["token_ids"]
    got = [[i - 1 for i in row if i] for row in tokens.numpy().tolist()]
    assert got == [hf.encode(t).ids for t in texts]


@pytest.mark.integration
def test_llama3_text_on_device_as_predict_and_the_tokenizer(tmp_path, capsys):
    """The TFLite export's plain-Python `tokenizer.py` reads the Llama 3
    tokenizer file: its ids are Hugging Face's, and the shipped runtime
    continues a text prompt with `tfformer-predict`'s text."""
    from tests.training.convert.huggingface.test_gpt2 import shipped_runtime
    from tfformer.export.cli import main as export_main

    hf, _, run, _ = converted_llama3_text(tmp_path)
    prompt = "the cat"
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    printed = capsys.readouterr().out
    out = tmp_path / "device"
    argv = ["--checkpoint", run, "--format", "tflite", "--out", str(out)]
    assert export_main(argv) == 0
    capsys.readouterr()
    runtime = shipped_runtime(str(out), str(out / "model.tflite"))
    for text in ["the cat", "don't\n\n  2024 naïve!!", " \tx", "日本\r\n"]:
        assert runtime.tokenizer.ids(text) == [i + 1 for i in hf.encode(text).ids]
    assert prompt + runtime.generate_text(prompt, 6, greedy=True) == printed[:-1]
    # A long prompt keeps <|begin_of_text|> first, as predict does.
    argv = ["--checkpoint", run, "--max-new-tokens", "6", LONG_PROMPT]
    assert predict_cli.main(argv) == 0
    continued = runtime.generate_text(LONG_PROMPT, 6, greedy=True)
    kept = hf.decode(long_prompt_cut(hf))
    assert kept + continued + "\n" == capsys.readouterr().out


@pytest.mark.integration
def test_a_llama3_text_run_evaluates_and_fine_tunes_on_text(tmp_path, capsys):
    """`tfformer-evaluate --text`: nats per token of keras-hub's logits over
    the same windows of Hugging Face's ids (<|begin_of_text|> once, first).
    `model.init_from` with `data.tokenizer=bpe` fine-tunes the run on the
    file: its loss falls, its tokenizer file is the run's, and it continues
    text."""
    keras_hub = pytest.importorskip("keras_hub")
    from tests.training.convert.huggingface.test_gpt2 import STORY

    hf, source, run, _ = converted_llama3_text(tmp_path)
    ids = hf.encode(STORY).ids
    assert ids[0] == hf.token_to_id(BEGIN)
    reference = keras_hub.models.Llama3Backbone.from_preset(str(source))
    assert_evaluates_as_keras_hub_and_fine_tunes(
        tmp_path, capsys, run, reference, ids, "data.tokenizer=bpe"
    )


def assert_evaluates_as_keras_hub_and_fine_tunes(
    tmp_path, capsys, run, reference, ids, *overrides
):
    """`tfformer-evaluate --text` of the story (`ids`: the reference
    tokenizer's) gives the nats per token of `reference`'s logits over the
    same windows of 8; fine-tuning with `overrides` lowers the loss
    (`assert_fine_tuning_lowers_the_loss`), and the new run continues text."""
    from tests.training.convert.huggingface.test_gpt2 import (
        STORY,
        assert_fine_tuning_lowers_the_loss,
    )
    from tfformer.training.commands import evaluate as evaluate_cli

    (tmp_path / "story.txt").write_text(STORY, encoding="utf-8")
    text = ["--text", str(tmp_path / "story.txt"), "--window", "8"]
    assert evaluate_cli.main(["--checkpoint", run, *text]) == 0
    got = json.loads(capsys.readouterr().out)
    count = (len(ids) - 1) // 8
    windows = np.array([ids[8 * k : 8 * k + 9] for k in range(count)], "int32")
    logits = backbone_logits(reference, windows[:, :-1]).astype("float64")
    logits -= logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    labels = windows[:, 1:]
    nats = -np.take_along_axis(log_p, labels[..., None], -1).sum()
    assert got["tokens"] == labels.size
    assert got["nats_per_token"] == pytest.approx(nats / labels.size, abs=1e-4)

    tuned = assert_fine_tuning_lowers_the_loss(tmp_path, run, capsys, *overrides)
    argv = ["--checkpoint", tuned, "--max-new-tokens", "5", "the"]
    assert predict_cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("the") and len(printed) > len("the\n"), printed


# -- Llama 2's SentencePiece tokenizer ----------------------------------------------


def converted_llama2_text(tmp_path):
    """A random Llama checkpoint with a SentencePiece BPE `tokenizer.model`
    in Llama 2's settings (trained here by `sentencepiece`), converted:
    (the sentencepiece processor, the checkpoint, the run, what convert
    said)."""
    spm = pytest.importorskip("sentencepiece")
    from tests.tfformer.preprocessing.test_sentencepiece_tokenizer import (
        SETTINGS,
        train,
    )

    data = train(SETTINGS["llama2"])
    processor = spm.SentencePieceProcessor(model_proto=data)
    sizes = {**SIZES, "vocab": processor.get_piece_size()}
    rng = np.random.default_rng(12)
    source = write_checkpoint(
        tmp_path / "hf",
        rng,
        sizes=sizes,
        tensors=llama_tensors(rng, sizes=sizes),
        config={"vocab_size": sizes["vocab"], "bos_token_id": 1, "eos_token_id": 2},
    )
    (source / "tokenizer.model").write_bytes(data)
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    return processor, source, run, said


def test_llama2_text_in_and_out_equals_keras_hub_and_sentencepiece(tmp_path, capsys):
    """With Llama 2's tokenizer.model, the run takes and gives text: its ids
    are sentencepiece's (<s> first, as Llama's tokenizer adds it; the
    model's ids one higher), and `tfformer-predict` continues a prompt with
    keras-hub's greedy tokens, decoded as sentencepiece decodes them."""
    keras_hub = pytest.importorskip("keras_hub")
    processor, source, run, said = converted_llama2_text(tmp_path)
    assert any(
        "SentencePiece BPE from tokenizer.model" in line and "<s> first" in line
        for line in said
    ), said
    assert any("text in and out" in line for line in said)
    tokenizer = tfformer.load(run).tokenizers["text"]
    texts = ["the quick fox", "  naïve 2024\n東京 ☃", ""]
    ours = [[i - 1 for i in row] for row in tokenizer.tokenize(texts).to_list()]
    assert ours == [[1, *processor.encode(t)] for t in texts]
    reference = keras_hub.models.LlamaBackbone.from_preset(str(source))
    prompt = "the quick fox"
    ids = reference_greedy(reference, [1, *processor.encode(prompt)], 6, end=2)
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    assert capsys.readouterr().out == processor.decode(ids) + "\n"


LLAMA2_TEXTS = ["the quick fox", "  naïve 2024\n東京 ☃", " \tx", ""]


@pytest.mark.integration
def test_llama2_text_in_a_saved_model_and_on_device_as_predict_and_sentencepiece(
    tmp_path, capsys
):
    """A SentencePiece run's SavedModel (its in-graph tokenizer) and TFLite
    export (the shipped plain-Python `tokenizer.py`) give sentencepiece's
    ids (<s> first, one higher) and continue a prompt with
    `tfformer-predict`'s text."""
    import tensorflow as tf

    from tests.training.convert.huggingface.test_gpt2 import shipped_runtime
    from tfformer.export.cli import main as export_main
    from tfformer.export.saved_model import export_saved_model

    processor, _, run, _ = converted_llama2_text(tmp_path)
    want = [[1, *processor.encode(t)] for t in LLAMA2_TEXTS]
    prompt = "the quick fox"
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith(prompt)

    served = tf.saved_model.load(
        export_saved_model(run, str(tmp_path / "serving"), progress=quiet)
    )
    out = served_greedy(served, [prompt], [6])
    assert prompt + out["text"].numpy()[0].decode("utf-8", "replace") == printed[:-1]
    tokens = served.signatures["tokenize"](text=tf.constant(LLAMA2_TEXTS))
    got = [[i - 1 for i in row if i] for row in tokens["token_ids"].numpy().tolist()]
    assert got == want

    device = tmp_path / "device"
    argv = ["--checkpoint", run, "--format", "tflite", "--out", str(device)]
    assert export_main(argv) == 0
    capsys.readouterr()
    runtime = shipped_runtime(str(device), str(device / "model.tflite"))
    assert [runtime.tokenizer.ids(t) for t in LLAMA2_TEXTS] == [
        [i + 1 for i in row] for row in want
    ]
    assert prompt + runtime.generate_text(prompt, 6, greedy=True) == printed[:-1]


@pytest.mark.integration
def test_a_llama2_text_run_evaluates_and_fine_tunes_on_text(tmp_path, capsys):
    """`tfformer-evaluate --text` of a SentencePiece run: nats per token of
    keras-hub's logits over the same windows of sentencepiece's ids (<s>
    once, first). Fine-tuning with `data.tokenizer=sentencepiece` lowers
    the loss, keeps the run's tokenizer file and continues text."""
    keras_hub = pytest.importorskip("keras_hub")
    from tests.training.convert.huggingface.test_gpt2 import STORY

    processor, source, run, _ = converted_llama2_text(tmp_path)
    reference = keras_hub.models.LlamaBackbone.from_preset(str(source))
    assert_evaluates_as_keras_hub_and_fine_tunes(
        tmp_path,
        capsys,
        run,
        reference,
        [1, *processor.encode(STORY)],
        "data.tokenizer=sentencepiece",
    )


def test_a_sentencepiece_model_tfformer_does_not_reproduce_leaves_token_ids(
    tmp_path, capsys
):
    """A Unigram tokenizer.model (T5's kind): the conversion names it, and
    the run reads and writes ids."""
    spm = pytest.importorskip("sentencepiece")
    import io

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["the quick brown fox jumps"] * 50),
        model_writer=model,
        model_type="unigram",
        vocab_size=30,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    rng = np.random.default_rng(13)
    source = write_checkpoint(tmp_path / "hf", rng)
    (source / "tokenizer.model").write_bytes(model.getvalue())
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any(
        "model_type 'unigram'" in line and "The tokenizer is not converted." in line
        for line in said
    ), said
    assert tfformer.load(run).directory.tokenizer("text").kind == "ids"


def test_vocab_and_merges_files_alone_leave_token_ids(tmp_path):
    """vocab.json and merges.txt do not say how text is cut into pieces
    (GPT-2's? Qwen's?): in a Llama-style directory they are not read."""
    hf = llama3_tokenizer()
    source = write_llama3_checkpoint(tmp_path / "hf", hf, np.random.default_rng(9))
    (source / "tokenizer.json").unlink()
    hf.model.save(str(source))  # vocab.json, merges.txt
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any("has vocab.json but no tokenizer.json" in line for line in said)
    assert tfformer.load(run).directory.tokenizer("text").kind == "ids"


def test_a_tokenizer_tfformer_does_not_reproduce_leaves_token_ids(tmp_path, capsys):
    """An NFKC normalizer (or Llama 2's SentencePiece-style BPE): the
    conversion says which feature, and the run reads and writes ids."""
    hf = llama3_tokenizer()
    source = write_llama3_checkpoint(tmp_path / "hf", hf, np.random.default_rng(9))
    spec = json.loads((source / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "NFKC"}
    (source / "tokenizer.json").write_text(json.dumps(spec))
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    assert any(
        "tokenizer.json: normalizer must be null or NFC (Qwen2's). Received: "
        '{"type": "NFKC"}'
        in line
        and "The tokenizer is not converted." in line
        for line in said
    )
    assert any("token ids in and out" in line for line in said)
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "1", "hi"]) == 2
    assert "reads token ids" in capsys.readouterr().err
