"""`tfformer-convert` on small random GPT-2 checkpoints in the Hugging Face
layout (`GPT2LMHeadModel`'s and `GPT2Model`'s tensor names and shapes,
Conv1D weights stored (in, out)), checked against keras-hub's `GPT2Backbone`
reading the same directory. GPT-2's id 0 is a real token ("!"): the
converted model shifts every id by one so that id 0 stays padding, which
these tests feed on purpose."""

import json
import os
import re

import numpy as np
import pytest

import tfformer
from tests.testing import END_OF_TEXT, train_byte_level_bpe, transformer_blocks
from tests.training.convert.huggingface.testing import (
    assert_refused,
    changed,
    quiet,
    reference_greedy,
    served_greedy,
)
from tests.training.tiny import NO_XLA
from tfformer.preprocessing.token_id_tokenizer import TokenIdTokenizer
from tfformer.training.commands import evaluate as evaluate_cli
from tfformer.training.commands import predict as predict_cli
from tfformer.training.convert import convert
from tfformer.training.tasks import get_task

safetensors_numpy = pytest.importorskip("safetensors.numpy")

SIZES = {"vocab": 40, "hidden": 16, "heads": 4, "layers": 2, "positions": 24}


def gpt2_tensors(rng, *, prefix="transformer.", tie=True, buffers=False, vocab=None):
    s = SIZES
    d, v = s["hidden"], vocab or s["vocab"]

    def normal(*shape, scale=0.3):
        return (scale * rng.normal(size=shape)).astype("float32")

    t = {
        f"{prefix}wte.weight": normal(v, d),
        f"{prefix}wpe.weight": normal(s["positions"], d),
        f"{prefix}ln_f.weight": 1 + normal(d, scale=0.1),
        f"{prefix}ln_f.bias": normal(d, scale=0.1),
    }
    for i in range(s["layers"]):
        layer = f"{prefix}h.{i}"
        for norm in ("ln_1", "ln_2"):
            t[f"{layer}.{norm}.weight"] = 1 + normal(d, scale=0.1)
            t[f"{layer}.{norm}.bias"] = normal(d, scale=0.1)
        for name, shape in (
            ("attn.c_attn", (d, 3 * d)),
            ("attn.c_proj", (d, d)),
            ("mlp.c_fc", (d, 4 * d)),
            ("mlp.c_proj", (4 * d, d)),
        ):
            t[f"{layer}.{name}.weight"] = normal(*shape)
            t[f"{layer}.{name}.bias"] = normal(shape[1], scale=0.1)
        if buffers:  # what older checkpoints keep
            n = s["positions"]
            t[f"{layer}.attn.bias"] = np.tril(np.ones((1, 1, n, n), "float32"))
            t[f"{layer}.attn.masked_bias"] = np.array(-1e4, "float32")
    if not tie:
        t["lm_head.weight"] = normal(v, d)
    return t


def write_checkpoint(path, rng, *, tensors=None, config=None, **kwargs):
    """A GPT-2 checkpoint as `save_pretrained` writes it (its tokenizer
    files are not read)."""
    os.makedirs(path, exist_ok=True)
    s = SIZES
    cfg = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": s["vocab"],
        "n_embd": s["hidden"],
        "n_head": s["heads"],
        "n_layer": s["layers"],
        "n_positions": s["positions"],
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.1,
        "scale_attn_weights": True,
        "bos_token_id": s["vocab"] - 1,
        "eos_token_id": s["vocab"] - 1,
        **(config or {}),
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    safetensors_numpy.save_file(
        tensors if tensors is not None else gpt2_tensors(rng, **kwargs),
        os.path.join(path, "model.safetensors"),
        metadata={"format": "pt"},
    )
    return path


def ragged_batch(rng):
    """Three sequences of 7, 5 and 3 of the checkpoint's ids, id 0 ("!")
    among them, and their padding mask."""
    ids = rng.integers(0, SIZES["vocab"], (3, 7)).astype("int32")
    ids[:, 1] = 0
    mask = np.arange(7)[None] < np.array([[7], [5], [3]])
    return ids, mask


def keras_hub_logits(keras_hub, source, ids, mask, lm_head=None):
    reference = keras_hub.models.GPT2Backbone.from_preset(str(source))
    hidden = reference({"token_ids": ids, "padding_mask": mask})
    if lm_head is not None:  # keras-hub's GPT-2 always ties
        return np.asarray(hidden) @ lm_head.T
    return np.asarray(reference.token_embedding(hidden, reverse=True))


@pytest.mark.parametrize(
    "prefix, tie, buffers",
    [("transformer.", True, True), ("", True, False), ("transformer.", False, False)],
    ids=["lm_head_model", "gpt2_model", "untied"],
)
def test_logits_equal_keras_hub_on_a_ragged_batch(tmp_path, prefix, tie, buffers):
    keras_hub = pytest.importorskip("keras_hub")
    rng = np.random.default_rng(0)
    tensors = gpt2_tensors(rng, prefix=prefix, tie=tie, buffers=buffers)
    source = write_checkpoint(
        tmp_path / "hf", rng, tensors=tensors, config={"tie_word_embeddings": tie}
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    model = tfformer.load(run).model
    ids, mask = ragged_batch(rng)
    expected = keras_hub_logits(
        keras_hub, source, ids, mask, None if tie else tensors["lm_head.weight"]
    )
    # The model's ids are the checkpoint's plus one; 0 is padding.
    ours = np.asarray(model({"token_ids": np.where(mask, ids + 1, 0)}))
    assert ours.shape == (3, 7, SIZES["vocab"] + 1)
    np.testing.assert_allclose(ours[mask][:, 1:], expected[mask], atol=1e-5)
    np.testing.assert_array_equal(ours[..., 0], -1e4)


def test_the_run_keeps_the_checkpoints_settings(tmp_path):
    source = write_checkpoint(
        tmp_path / "hf",
        np.random.default_rng(1),
        config={"layer_norm_epsilon": 1e-6, "activation_function": "gelu"},
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    loaded = tfformer.load(run)
    assert loaded.model.backbone.final_norm.epsilon == 1e-6
    block = loaded.model.backbone.decoder_blocks[0]
    assert block.ffn.activation.__name__ == "gelu"  # exact, as configured
    # GPT-2 has no dropout on the MLP's hidden activations: recorded, so
    # that fine-tuning keeps it (in the model and in the run's config).
    assert block.activation_dropout == 0.0
    assert loaded.config.model.activation_dropout == 0.0
    tokenizer = loaded.tokenizers["text"]
    last = SIZES["vocab"] - 1
    assert (tokenizer.start_id, tokenizer.end_id, tokenizer.pad_id) == (
        last + 1,
        last + 1,
        0,
    )
    assert loaded.directory.manifest.max_length == SIZES["positions"]


def test_greedy_generation_equals_keras_hubs_argmax(tmp_path, capsys):
    """`tfformer-predict` (KV-cached greedy decoding) continues a prompt of
    the checkpoint's ids, "!" (id 0) and the end id included, with the
    tokens a full keras-hub forward pass picks one at a time."""
    keras_hub = pytest.importorskip("keras_hub")
    source = write_checkpoint(tmp_path / "hf", np.random.default_rng(2))
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    reference = keras_hub.models.GPT2Backbone.from_preset(str(source))
    end = SIZES["vocab"] - 1
    ids = [end, 5, 0, 12]  # GPT-2's prompts often start with <|endoftext|>
    for _ in range(6):
        x = np.array([ids], "int32")
        hidden = reference({"token_ids": x, "padding_mask": np.ones_like(x, bool)})
        logits = np.asarray(reference.token_embedding(hidden, reverse=True))[0, -1]
        ids.append(int(logits.argmax()))
        if ids[-1] == end:  # the end id stops tfformer's decoding
            break
    prompt = " ".join(str(i) for i in ids[:4])
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    # The prompt's end id stays; generation stops at the next one.
    expected = " ".join(str(i) for i in ids[:4] + [i for i in ids[4:] if i != end])
    assert capsys.readouterr().out.split("\n")[0].strip() == expected


def test_token_id_tokenizer_with_an_offset():
    tokenizer = TokenIdTokenizer(51, start_id=50, end_id=50, id_offset=1)
    ids = tokenizer.tokenize(["49 0  4", ""])
    assert ids.to_list() == [[50, 1, 5], []]
    assert tokenizer.detokenize([[50, 1, 5, 0, 0]]).numpy().tolist() == [b"49 0 4"]
    with pytest.raises(ValueError, match=r"reads token ids: .* below 50"):
        tokenizer.tokenize(["50"])
    with pytest.raises(ValueError, match=r"id_offset must be an int in \[0, 51\)"):
        TokenIdTokenizer(51, start_id=1, end_id=2, id_offset=-1)


# -- with the checkpoint's tokenizer ----------------------------------------------


@pytest.fixture(scope="module")
def bpe():
    pytest.importorskip("tokenizers")
    return train_byte_level_bpe(vocab_size=300)


def with_tokenizer(path, bpe, files="tokenizer.json", config=None):
    """A GPT-2 checkpoint sized for `bpe` (whose `<|endoftext|>` is id 0,
    GPT-2's bos and eos) with its tokenizer files."""
    n = bpe.get_vocab_size()
    source = write_checkpoint(
        path,
        np.random.default_rng(6),
        vocab=n,
        config={
            "vocab_size": n,
            "bos_token_id": 0,
            "eos_token_id": 0,
            **(config or {}),
        },
    )
    if files == "tokenizer.json":
        bpe.save(str(source / "tokenizer.json"))
    else:  # GPT-2's older files
        bpe.model.save(str(source))
    return source


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.json"])
def test_the_tokenizer_is_converted_into_graph_ops(tmp_path, bpe, files):
    source = with_tokenizer(tmp_path / "hf", bpe, files)
    said = []
    run = convert(str(source), str(tmp_path / "run"), progress=said.append)
    loaded = tfformer.load(run)
    assert loaded.directory.tokenizer("text").kind == "bpe"
    assert any(f"byte-level BPE (gpt2 pieces) from {files}" in line for line in said)
    tokenizer = loaded.tokenizers["text"]
    texts = ["the cat don't  stop", f"{END_OF_TEXT}naïve 日本語 😀\n", ""]
    got = [[i - 1 for i in row] for row in tokenizer.tokenize(texts).to_list()]
    assert got == [bpe.encode(t).ids for t in texts]
    assert (tokenizer.start_id, tokenizer.end_id) == (1, 1)


def test_text_in_and_out_equals_keras_hub_and_the_tokenizer(tmp_path, bpe, capsys):
    """`tfformer-predict` with a text prompt: the checkpoint's tokenizer's
    ids, keras-hub's greedy argmax token by token, the tokenizer's text."""
    keras_hub = pytest.importorskip("keras_hub")
    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    reference = keras_hub.models.GPT2Backbone.from_preset(str(source))
    prompt = "the cat sat on"
    # <|endoftext|> (id 0) stops tfformer's decoding.
    ids = reference_greedy(reference, bpe.encode(prompt).ids, 6, end=0)
    code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
    assert code == 0
    assert capsys.readouterr().out == bpe.decode(ids) + "\n"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"normalizer": {"type": "NFKC"}}, "normalizer must be null or NFC"),
        ({"model.byte_fallback": True}, "model.byte_fallback must be False"),
        ({"model.dropout": 0.1}, "model.dropout must be None"),
        ({"pre_tokenizer": {"type": "Whitespace"}}, "pre_tokenizer must be GPT-2's"),
        (
            {"pre_tokenizer": {"type": "Sequence", "pretokenizers": ["Split", "x"]}},
            "pre_tokenizer must be GPT-2's",
        ),
        (
            {"post_processor": {"type": "Sequence", "processors": ["Template"]}},
            "post_processor.type must be null",
        ),
        ({"post_processor": {"type": "TemplateProcessing"}}, "post_processor.type"),
        # Not objects: AttributeErrors before.
        ({"decoder": "ByteLevel"}, "decoder must be an object. Received: 'ByteLevel'"),
        ({"pre_tokenizer": ["ByteLevel"]}, "pre_tokenizer must be an object"),
        ({"post_processor": 1}, "post_processor must be an object. Received: 1"),
        ({"config": {"vocab_size": 200}}, "300 tokens, more than config.json's"),
    ],
)
def test_bad_tokenizer_files_are_refused(tmp_path, bpe, change, message):
    source = with_tokenizer(tmp_path / "hf", bpe, config=change.get("config"))
    path = source / "tokenizer.json"
    spec = json.loads(path.read_text())
    for key, value in change.items():
        if key == "config":
            continue
        node, *rest = key.split(".")
        if rest:
            spec[node][rest[0]] = value
        else:
            spec[node] = value
    path.write_text(json.dumps(spec))
    assert_refused(tmp_path, source, message)


def test_added_tokens_and_tokenizer_config(tmp_path, bpe):
    """An added token past model.vocab's end (a fine-tune's [PAD]) is one
    token; tokenizer_config.json's add_prefix_space wins, as transformers'
    GPT2TokenizerFast makes it; an added token with a wrong id is refused."""
    source = with_tokenizer(tmp_path / "hf", bpe, config={"vocab_size": 301})
    path = source / "tokenizer.json"
    spec = json.loads(path.read_text())
    spec["added_tokens"].append(
        {"id": 300, "content": "[PAD]", "special": True, "normalized": False}
    )
    path.write_text(json.dumps(spec))
    (source / "tokenizer_config.json").write_text('{"add_prefix_space": true}')
    # The checkpoint's tensors are sized for 301 tokens.
    write_checkpoint(
        source,
        np.random.default_rng(6),
        vocab=301,
        config={"vocab_size": 301, "bos_token_id": 0, "eos_token_id": 0},
    )
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    tokenizer = tfformer.load(run).tokenizers["text"]
    got = [i - 1 for i in tokenizer.tokenize(["cat[PAD]"])[0].numpy()]
    # add_prefix_space: "cat" is tokenized as " cat".
    assert got == [*bpe.encode(" cat").ids, 300]
    spec["added_tokens"][-1]["id"] = 5
    path.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"tokenizer.json: added token '\[PAD\]' "):
        convert(str(source), str(tmp_path / "again"), progress=quiet)
    assert not (tmp_path / "again").exists()


def test_vocab_json_without_merges_is_refused(tmp_path, bpe):
    source = with_tokenizer(tmp_path / "hf", bpe, files="vocab.json")
    (source / "merges.txt").unlink()
    assert_refused(tmp_path, source, r"has vocab\.json but no merges\.txt")


@pytest.mark.integration
def test_the_saved_model_generates_what_predict_does(tmp_path, bpe, capsys):
    """SavedModel `generate` (greedy: top_k 1) continues a prompt with the
    text `tfformer-predict` prints, through the in-graph BPE tokenizer;
    `tokenize` gives the checkpoint tokenizer's ids (plus one)."""
    import tensorflow as tf

    from tfformer.export.saved_model import export_saved_model

    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    prompt = "the cat sat on"
    assert predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt]) == 0
    printed = capsys.readouterr().out[:-1]
    path = export_saved_model(run, str(tmp_path / "serving"), progress=quiet)
    served = tf.saved_model.load(path)
    out = served_greedy(served, [prompt, f"{END_OF_TEXT}the"], [6, 3])
    assert prompt + out["text"].numpy()[0].decode() == printed
    assert END_OF_TEXT not in out["text"].numpy()[1].decode()
    ids = served.signatures["tokenize"](text=tf.constant([prompt]))["token_ids"]
    assert [i - 1 for i in ids.numpy()[0]] == bpe.encode(prompt).ids
    # Out-of-range ids to `logits` fail (no [UNK] to map them to).
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be in \[0, 301\)"):
        served.signatures["logits"](token_ids=tf.constant([[5, 301]]))


def shipped_runtime(directory, path):
    """`LiteRTGenerator` of the `generate.py` an export ships."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "shipped_generate", os.path.join(directory, "generate.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LiteRTGenerator(path)


@pytest.mark.integration
def test_the_tflite_model_generates_what_predict_does(tmp_path, bpe, capsys):
    """`tfformer-export --format tflite` of a converted GPT-2: the shipped
    plain-Python tokenizer gives the checkpoint tokenizer's ids (plus one);
    the shipped runtime's greedy text is `tfformer-predict`'s, stopping at
    <|endoftext|> and leaving it out; the loop model makes the same ids."""
    from ai_edge_litert.interpreter import Interpreter

    from tfformer.export.cli import main as export_main

    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    out = tmp_path / "device"
    argv = ["--checkpoint", run, "--format", "tflite", "--out", str(out)]
    assert export_main(argv) == 0
    capsys.readouterr()
    runtime = shipped_runtime(str(out), str(out / "model.tflite"))
    assert (runtime.start_id, runtime.end_id) == (1, 1)
    for prompt in ("the cat sat on", f"{END_OF_TEXT}we'll stop", "naïve 日本語"):
        ids = runtime.tokenizer.ids(prompt)
        assert ids == [i + 1 for i in bpe.encode(prompt).ids]
        code = predict_cli.main(["--checkpoint", run, "--max-new-tokens", "6", prompt])
        assert code == 0
        printed = capsys.readouterr().out[:-1]
        text = runtime.generate_text(prompt, 6, greedy=True)
        assert prompt.replace(END_OF_TEXT, "") + text == printed.replace(
            END_OF_TEXT, ""
        )
        assert END_OF_TEXT not in text
        new, _ = runtime.generate(ids, 6, greedy=True)
        tokens = np.zeros((1, SIZES["positions"]), np.int32)
        tokens[0, : len(ids)] = ids
        loop = Interpreter(model_path=str(out / "model_loop.tflite"))
        got = loop.get_signature_runner()(
            token_ids=tokens, max_new_tokens=np.array([6], np.int32)
        )["token_ids"][0]
        assert got[len(ids) : len(ids) + len(new)].tolist() == new


def end_token_run(tmp_path, bpe):
    """A converted checkpoint whose every next token is <|endoftext|> (the
    final norm outputs a constant aligned with its embedding)."""
    n = bpe.get_vocab_size()
    tensors = gpt2_tensors(np.random.default_rng(8), vocab=n)
    tensors["transformer.wte.weight"][0] *= 5  # the end token, id 0
    tensors["transformer.ln_f.weight"][:] = 0
    tensors["transformer.ln_f.bias"][:] = tensors["transformer.wte.weight"][0]
    source = write_checkpoint(
        tmp_path / "hf",
        None,
        tensors=tensors,
        config={"vocab_size": n, "bos_token_id": 0, "eos_token_id": 0},
    )
    bpe.save(str(source / "tokenizer.json"))
    return convert(str(source), str(tmp_path / "run"), progress=quiet)


def test_generation_stops_at_the_end_token_and_leaves_it_out(tmp_path, bpe, capsys):
    """Predict prints the prompt alone when the next token is the end."""
    run = end_token_run(tmp_path, bpe)
    assert (
        predict_cli.main(["--checkpoint", run, "--max-new-tokens", "4", "the cat"]) == 0
    )
    assert capsys.readouterr().out == "the cat\n"


@pytest.mark.slow  # 16 s: a SavedModel export of its own
def test_the_saved_model_stops_at_the_end_token(tmp_path, bpe):
    """The SavedModel generates one token, the end, and no text."""
    import tensorflow as tf

    from tfformer.export.saved_model import export_saved_model

    run = end_token_run(tmp_path, bpe)
    served = tf.saved_model.load(
        export_saved_model(run, str(tmp_path / "serving"), progress=quiet)
    )
    out = served_greedy(served, ["the cat"], [4])
    assert out["num_tokens"].numpy().tolist() == [1]
    assert out["token_ids"].numpy().tolist() == [[1]]  # the end token, shifted
    assert out["text"].numpy().tolist() == [b""]


# -- evaluated on a text file, fine-tuned -----------------------------------------

# Text the test BPE knows; ends with a newline, as read_text returns it.
STORY = "the cat sat on the mat\nwe'll stop, I'm naïve\nhello world 2024\n" * 4


def test_evaluate_scores_a_text_file_as_keras_hub_does(tmp_path, bpe, capsys):
    """`tfformer-evaluate --text FILE --window W`: nats per token of
    keras-hub's GPT-2 logits over the same non-overlapping windows (inputs
    w[:-1], labels w[1:]), and the bytes those labels decode to."""
    keras_hub = pytest.importorskip("keras_hub")
    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    (tmp_path / "story.txt").write_text(STORY, encoding="utf-8")
    out = tmp_path / "scores.json"
    argv = ["--checkpoint", run, "--text", str(tmp_path / "story.txt")]
    assert evaluate_cli.main([*argv, "--window", "8", "--output", str(out)]) == 0
    got = json.loads(out.read_text())

    reference = keras_hub.models.GPT2Backbone.from_preset(str(source))
    ids = bpe.encode(STORY).ids
    count = (len(ids) - 1) // 8
    windows = np.array([ids[8 * k : 8 * k + 9] for k in range(count)], "int32")
    x, y = windows[:, :-1], windows[:, 1:]
    hidden = reference({"token_ids": x, "padding_mask": np.ones_like(x, bool)})
    logits = np.asarray(reference.token_embedding(hidden, reverse=True), "float64")
    logits -= logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nats = -np.take_along_axis(log_p, y[..., None], -1).sum()
    covered = len(bpe.decode(y.reshape(-1).tolist()).encode("utf-8"))
    assert got["text"] == str(tmp_path / "story.txt")
    assert (got["window"], got["tokens"], got["bytes"]) == (8, y.size, covered)
    assert got["nats_per_token"] == pytest.approx(nats / y.size, abs=1e-4)
    assert got["bits_per_byte"] == pytest.approx(nats / np.log(2) / covered, abs=1e-4)
    capsys.readouterr()
    # A converted run has no held-out text; bad windows and files are named.
    for extra, message in (
        ([], "no held-out text"),
        (["--text", str(tmp_path / "story.txt"), "--window", "25"], "[1, 24]"),
        (["--text", str(tmp_path / "absent.txt")], "--text: File not found"),
    ):
        assert evaluate_cli.main(["--checkpoint", run, *extra]) == 2
        assert message in capsys.readouterr().err


def fine_tuning_config(tmp_path, run, *overrides):
    from tfformer.training.config import load_config

    (tmp_path / "story.txt").write_text(STORY * 8, encoding="utf-8")
    return load_config(
        overrides=[
            "task=causal_lm",
            f"data.text_path={tmp_path / 'story.txt'}",
            "data.tokenizer=bpe",
            "data.max_length=12",
            "data.holdout_fraction=0.2",
            f"model.init_from={run}",
            "train.batch_size=4",
            "train.steps_per_epoch=60",
            "train.epochs=1",
            "train.warmup_steps=2",
            "train.schedule=cosine",
            "train.learning_rate=3e-3",
            "train.label_smoothing=0",
            "train.verbose=0",
            NO_XLA,
            f"train.output_dir={tmp_path / 'tuned'}",
            *overrides,
        ]
    )


def assert_fine_tuning_lowers_the_loss(tmp_path, run, capsys, *overrides):
    """Fine-tunes the converted text run `run` on the story
    (`fine_tuning_config` with `overrides`): the story's nats per token in
    windows of 12 fall below 0.65 of the run's, and the new run keeps the
    run's tokenizer file. Returns the new run's path."""
    from tfformer.training.trainer import train

    # (It writes the text it trains on.)
    config = fine_tuning_config(tmp_path, run, *overrides)
    text = ["--text", str(tmp_path / "story.txt"), "--window", "12"]
    assert evaluate_cli.main(["--checkpoint", run, *text]) == 0
    before = json.loads(capsys.readouterr().out)["nats_per_token"]
    train(config, progress=quiet)
    tuned = str(tmp_path / "tuned")
    assert evaluate_cli.main(["--checkpoint", tuned, *text]) == 0
    after = json.loads(capsys.readouterr().out)["nats_per_token"]
    assert after < 0.65 * before, (before, after)
    with (
        open(os.path.join(tuned, "text_tokenizer.json"), "rb") as mine,
        open(os.path.join(run, "text_tokenizer.json"), "rb") as theirs,
    ):
        assert mine.read() == theirs.read()
    return tuned


@pytest.mark.integration
def test_a_converted_gpt2_fine_tunes_on_text(tmp_path, bpe, capsys):
    """`model.init_from` of a converted GPT-2: the copy computes the
    source's logits, takes the config's dropout but keeps GPT-2's
    placement (no dropout on the MLP's hidden activations) unless
    `model.activation_dropout` says otherwise, trains (its loss on the
    text falls), and the new run keeps the BPE and generates text."""

    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    task = get_task("causal_lm")
    config = fine_tuning_config(
        tmp_path, run, "model.dropout=0.5", "model.activation_dropout=0.25"
    )
    data = task.prepare(config, task.raw_splits(config.data), None, quiet)
    blocks = transformer_blocks(task.build_model(config, data))
    assert blocks and {block.ffn.dropout for block in blocks} == {0.25}
    config = fine_tuning_config(tmp_path, run, "model.dropout=0.5")
    data = task.prepare(config, task.raw_splits(config.data), None, quiet)
    model = task.build_model(config, data)
    original = tfformer.load(run).model
    ids = data.examples["train"].features["token_ids"].to_tensor().numpy()[:4]
    np.testing.assert_allclose(
        np.asarray(model({"token_ids": ids})),
        np.asarray(original({"token_ids": ids})),
        atol=1e-6,
    )
    rates = {
        layer.name: layer.get_config().get("rate", layer.get_config().get("dropout"))
        for layer in model.backbone.layers
        if "dropout" in layer.name or "block" in layer.name
    }
    assert len(rates) == 1 + model.backbone.num_layers
    assert set(rates.values()) == {0.5}, rates
    blocks = transformer_blocks(model)
    assert {block.ffn.dropout for block in blocks} == {0.0}
    noisy = np.asarray(model({"token_ids": ids}, training=True))
    assert np.abs(noisy - np.asarray(model({"token_ids": ids}))).max() > 1e-3

    tuned = assert_fine_tuning_lowers_the_loss(tmp_path, run, capsys)
    assert evaluate_cli.main(["--checkpoint", tuned]) == 0  # its held-out text
    assert json.loads(capsys.readouterr().out)["split"] == "test"
    code = predict_cli.main(["--checkpoint", tuned, "--max-new-tokens", "5", "the"])
    assert code == 0
    assert capsys.readouterr().out.startswith("the")


def test_fine_tuning_refuses_what_the_run_cannot_take(tmp_path, bpe):
    from tfformer.training.trainer import train

    source = with_tokenizer(tmp_path / "hf", bpe)
    run = convert(str(source), str(tmp_path / "run"), progress=quiet)
    ids_run = convert(
        str(write_checkpoint(tmp_path / "ids_hf", np.random.default_rng(1))),
        str(tmp_path / "ids_run"),
        progress=quiet,
    )
    cases = [
        (["model.num_layers=1"], "model.num_layers comes from that run"),
        (["model.activation=relu"], "model.activation comes from that run"),
        (["data.tokenizer=byte"], "set data.tokenizer=bpe"),
        (["data.max_length=30"], "data.max_length must be <= 24"),
        ([f"model.init_from={ids_run}"], "its tokenizer is ids"),
        ([f"model.init_from={tmp_path}"], "run.json is missing"),
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            train(fine_tuning_config(tmp_path, run, *overrides), progress=quiet)
        assert not (tmp_path / "tuned").exists()  # refused before writing
    with pytest.raises(ValueError, match=re.escape("model.init_from=RUN")):
        config = fine_tuning_config(tmp_path, run, "model.init_from=null")
        train(config, progress=quiet)
    assert not (tmp_path / "tuned").exists()


# -- bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"drop": "transformer.h.1.mlp.c_fc.bias"}, "no tensor 'transformer.h.1.mlp"),
        (
            {"config": {"tie_word_embeddings": False}},
            "no tensor 'lm_head.weight'",
        ),
        (
            {"config": {"n_inner": 32}},
            r"'transformer.h.0.mlp.c_fc.weight' has shape \[16, 64\]; "
            r"the config implies \[16, 32\]",
        ),
        ({"config": {"n_head": 3}}, r"n_embd \(16\) must be a multiple of n_head"),
        (
            {"config": {"activation_function": "swish"}},
            "activation_function must be one of",
        ),
        (
            {"config": {"scale_attn_by_inverse_layer_idx": True}},
            "scale_attn_by_inverse_layer_idx must be false",
        ),
        ({"config": {"add_cross_attention": True}}, "add_cross_attention must be"),
        ({"config": {"eos_token_id": 40}}, r"eos_token_id must be a token id below"),
        ({"extra": "transformer.h.0.attn.q_attn.weight"}, "does not use .*q_attn"),
    ],
)
def test_bad_checkpoints_are_refused_naming_the_key(tmp_path, change, message):
    rng = np.random.default_rng(4)
    tensors = changed(gpt2_tensors(rng), change, np.ones((4,), "float32"))
    source = write_checkpoint(
        tmp_path / "hf", rng, tensors=tensors, config=change.get("config")
    )
    assert_refused(tmp_path, source, message)
