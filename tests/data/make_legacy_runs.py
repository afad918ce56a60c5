"""Writes `tests/data/legacy_runs/`: run directories and models saved by
tfformer before its models became backbones and tasks (commit ada60da,
where every model was a plain functional `keras.Model` whose parts were
found by layer name).

The files are committed; `tests/tfformer/models/test_legacy_models.py`,
`tests/tfformer/test_api.py` and `tests/training/test_predictors.py` check
that today's code still loads them and gives the outputs recorded here.
Run from the repository root at that commit (the builders it calls no
longer exist in this form):

    git worktree add /tmp/old ada60da && cd /tmp/old && \
        python tests/data/make_legacy_runs.py /path/to/tests/data/legacy_runs

Each model is tiny (widths of 8 to 16) so the whole folder stays small.
"""

import json
import os
import shutil
import sys

import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data/legacy_runs"


def quiet(*_):
    pass


def bare_models(out):
    """Models built by the old builders with every structural option that
    changes the layer names a loader must map: tied and separate seq2seq
    embeddings, pre-norm stacks, learned positions, grouped-query rotary
    decoders, a padding logit, BERT heads and a ViT with and without pixel
    statistics. Writes `<name>.keras` and `<name>.npz` (inputs, outputs)."""
    import keras

    from tfformer.models import (
        bert_classifier,
        bert_embedder,
        bert_encoder,
        bert_masked_lm,
        gpt_decoder,
        transformer_seq2seq,
        vit,
    )

    rng = np.random.default_rng(0)
    size = dict(hidden_dim=16, num_heads=2, intermediate_dim=24)
    ids = rng.integers(1, 30, size=(2, 7)).astype("int32")
    ids[1, 5:] = 0
    target = rng.integers(1, 30, size=(2, 6)).astype("int32")
    target[0, 4:] = 0
    segments = np.zeros_like(ids)
    segments[:, 3:] = 1
    models = {
        "seq2seq_post_norm_tied_decoder": (
            transformer_seq2seq(
                30, 31, num_encoder_layers=2, num_decoder_layers=1, **size
            ),
            {"encoder_token_ids": ids, "decoder_token_ids": target},
        ),
        "seq2seq_pre_norm_learned_tied_all": (
            transformer_seq2seq(
                30,
                30,
                num_encoder_layers=1,
                num_decoder_layers=2,
                normalize_first=True,
                position="learned",
                max_sequence_length=16,
                tie_embeddings="all",
                num_key_value_heads=1,
                **size,
            ),
            {"encoder_token_ids": ids, "decoder_token_ids": target},
        ),
        "seq2seq_untied_fused_gelu": (
            transformer_seq2seq(
                30,
                32,
                num_encoder_layers=1,
                num_decoder_layers=1,
                tie_embeddings="none",
                fused_qkv=True,
                activation="gelu",
                scale_embeddings=False,
                activation_dropout=0.0,
                **size,
            ),
            {"encoder_token_ids": ids, "decoder_token_ids": target},
        ),
        "gpt2_style": (
            gpt_decoder(30, num_layers=2, max_sequence_length=16, **size),
            {"token_ids": ids},
        ),
        "llama_style": (
            gpt_decoder(
                30,
                num_layers=2,
                max_sequence_length=16,
                position="rotary",
                normalization="rms",
                gated_ffn=True,
                activation="silu",
                use_bias=False,
                num_key_value_heads=1,
                tie_embeddings=False,
                rotary_max_wavelength=500,
                padding_logit=-1e4,
                layer_norm_epsilon=1e-6,
                dropout=0.0,
                activation_dropout=0.0,
                **size,
            ),
            {"token_ids": ids},
        ),
        "gpt_post_norm_sinusoidal": (
            gpt_decoder(
                30,
                num_layers=1,
                position="sinusoidal",
                normalize_first=False,
                max_sequence_length=16,
                **size,
            ),
            {"token_ids": ids},
        ),
    }
    encoder = bert_encoder(30, num_layers=2, max_sequence_length=16, **size)
    bert_inputs = {"token_ids": ids, "segment_ids": segments}
    models["bert_encoder"] = (encoder, bert_inputs)
    models["bert_classifier"] = (bert_classifier(encoder, 3), bert_inputs)
    positions = np.array([[1, 2], [0, 4]], "int32")
    models["bert_masked_lm"] = (
        bert_masked_lm(encoder),
        {**bert_inputs, "mask_positions": positions},
    )
    models["bert_pretraining"] = (
        bert_masked_lm(encoder, next_sentence_prediction=True, name="bert_pretraining"),
        {**bert_inputs, "mask_positions": positions},
    )
    models["bert_embedder"] = (bert_embedder(encoder), bert_inputs)
    images = rng.uniform(0, 255, size=(2, 8, 8, 3)).astype("float32")
    models["vit_with_pixel_statistics"] = (
        vit(
            8,
            4,
            patch_size=4,
            num_layers=2,
            pixel_mean=[120.0, 110.0, 100.0],
            pixel_std=[60.0, 50.0, 40.0],
            **size,
        ),
        images,
    )
    models["vit_plain"] = (
        vit(8, 3, patch_size=2, num_layers=1, **size),
        images / 255.0,
    )
    os.makedirs(out, exist_ok=True)
    for name, (model, inputs) in models.items():
        # Weights off their initial values, so a wrong mapping shows.
        for weight in model.weights:
            noise = rng.normal(scale=0.05, size=weight.shape).astype("float32")
            weight.assign(weight.numpy() + noise)
        outputs = model(inputs, training=False)
        outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
        model.save(os.path.join(out, f"{name}.keras"))
        inputs = inputs if isinstance(inputs, dict) else {"images": inputs}
        np.savez(
            os.path.join(out, f"{name}.npz"),
            **{f"input/{k}": np.asarray(v) for k, v in inputs.items()},
            **{
                f"output/{k}": keras.ops.convert_to_numpy(v) for k, v in outputs.items()
            },
        )


def trained_runs(out):
    """Run directories written by tfformer-train (one per trainable task)."""
    from tfformer.training.config import load_config
    from tfformer.training.fit.trainer import train

    tiny = [
        "model.num_layers=1",
        "model.hidden_dim=16",
        "model.num_heads=2",
        "model.intermediate_dim=24",
        "train.epochs=1",
        "train.steps_per_epoch=2",
        "train.verbose=0",
        "train.final_evaluation=false",
        "train.warmup_steps=2",
        "train.checkpoint_every_steps=1000",
    ]
    text = out + "_text.txt"
    with open(text, "w") as f:
        f.write(
            "\n".join(
                f"line {i}: the quick brown fox jumps over {i % 7} lazy dogs."
                for i in range(400)
            )
        )
    pos, neg = out + "_pos.txt", out + "_neg.txt"
    with open(pos, "w") as f:
        f.write("\n".join(f"a good fine film number {i}" for i in range(60)))
    with open(neg, "w") as f:
        f.write("\n".join(f"a bad dull film number {i}" for i in range(60)))
    configs = {
        "translation": [
            "data.vocabulary_size=120",
            "data.vocabulary_sample_size=200",
            "data.max_length=16",
            "data.train_size=200",
            "data.validation_size=16",
            "data.test_size=16",
            "train.batch_size=8",
        ],
        "causal_lm": [
            "task=causal_lm",
            f"data.text_path={text}",
            "data.tokenizer=byte",
            "data.max_length=16",
            "model.preset=gpt_tiny",
            "train.batch_size=8",
        ],
        "text_classification": [
            "task=text_classification",
            f"data.class_paths=[{json.dumps(neg)},{json.dumps(pos)}]",
            "data.vocabulary_size=80",
            "data.max_length=12",
            "train.batch_size=8",
        ],
        "masked_lm": [
            "task=masked_lm",
            f"data.text_paths=[{json.dumps(text)}]",
            "data.vocabulary_size=80",
            "data.max_length=16",
            "train.batch_size=8",
        ],
    }
    for name, overrides in configs.items():
        run = os.path.join(out, f"{name}_run")
        config = load_config(overrides=[*tiny, *overrides, f"train.output_dir={run}"])
        train(config, progress=quiet)
    for path in (text, pos, neg):
        os.remove(path)


def converted_runs(out):
    """Run directories written by tfformer-convert from tiny random Hugging
    Face checkpoints (the helpers of the conversion tests)."""
    import tempfile

    sys.path.insert(0, os.getcwd())
    from tests.training import (
        test_convert,
        test_convert_gpt2,
        test_convert_llama,
        test_convert_vit,
    )
    from tfformer.training.convert.huggingface import convert

    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        bert = test_convert.write_checkpoint(
            os.path.join(tmp, "bert"), rng, vocab_txt=True
        )
        convert(bert, os.path.join(out, "sentence_embedding_converted"), progress=quiet)
        llama = test_convert_llama.write_checkpoint(os.path.join(tmp, "llama"), rng)
        convert(llama, os.path.join(out, "llama_converted"), progress=quiet)
        gpt2 = test_convert_gpt2.write_checkpoint(os.path.join(tmp, "gpt2"), rng)
        convert(gpt2, os.path.join(out, "gpt2_converted"), progress=quiet)
        vit = test_convert_vit.write_checkpoint(os.path.join(tmp, "vit"), rng)
        convert(vit, os.path.join(out, "vit_converted"), progress=quiet)


def run_outputs(out):
    """`outputs.npz` in each run: its model's outputs on fixed inputs."""
    import keras

    from tfformer.rundir.run import RunDirectory

    rng = np.random.default_rng(2)
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if not os.path.isfile(os.path.join(path, "run.json")):
            continue
        run = RunDirectory(path)
        model = run.load_model()
        ids = rng.integers(4, 20, size=(2, 8)).astype("int32")
        ids[1, 6:] = 0
        if run.task == "translation":
            inputs = {"encoder_token_ids": ids, "decoder_token_ids": ids[:, :6]}
        elif run.task == "causal_lm":
            inputs = {"token_ids": ids}
        elif run.task == "masked_lm":
            inputs = {
                "token_ids": ids,
                "segment_ids": np.zeros_like(ids),
                "mask_positions": np.array([[1, 2], [3, 0]], "int32"),
            }
        elif run.task == "image_classification":
            size = run.setting("image_size")
            inputs = rng.uniform(0, 255, size=(2, size, size, 3)).astype("float32")
        else:
            inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids)}
        outputs = model(inputs, training=False)
        outputs = outputs if isinstance(outputs, dict) else {"output": outputs}
        inputs = inputs if isinstance(inputs, dict) else {"images": inputs}
        np.savez(
            os.path.join(path, "outputs.npz"),
            **{f"input/{k}": np.asarray(v) for k, v in inputs.items()},
            **{
                f"output/{k}": keras.ops.convert_to_numpy(v) for k, v in outputs.items()
            },
        )


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    bare_models(os.path.join(OUT, "models"))
    trained_runs(OUT)
    converted_runs(OUT)
    run_outputs(OUT)
    for root, dirs, files in os.walk(OUT):
        for name in list(dirs):
            if name in ("logs", "backup"):
                shutil.rmtree(os.path.join(root, name))
                dirs.remove(name)
        for name in files:
            if name in ("best.keras", "training_curves.png"):
                os.remove(os.path.join(root, name))


if __name__ == "__main__":
    main()
