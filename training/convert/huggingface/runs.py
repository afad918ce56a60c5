"""Writing a converted model's run: the files every architecture writes
(model, manifest, tokenizer) and the training config's model section."""

from tfformer.runs.directory import RunDirectory, tokenizer_file

# Hugging Face's BERT, ViT, Llama and GPT-2 drop no feed-forward hidden
# activations (tfformer's blocks drop them at `dropout` unless told). A
# converted model records this rate, and `model.init_from` fine-tuning keeps
# it unless the config sets `model.activation_dropout`.
HIDDEN_DROPOUT = 0.0


def write_run(staging, manifest, model, tokenizer=None, kind=None):
    """Writes `model`, `manifest` and (when given) the `kind` tokenizer of
    the "text" role into the run directory `staging`."""
    run = RunDirectory(staging)
    if tokenizer is not None:
        tokenizer.save(run.file(tokenizer_file(kind, "text")))
    model.save(run.file("model.keras"))
    run.write_manifest(manifest)


def model_section(sizes, **extra):
    """The training config's `model` section of a converted model of
    `sizes` (its backbone's keyword arguments), `extra` keys after."""
    return {
        "num_layers": sizes["num_layers"],
        "hidden_dim": sizes["hidden_dim"],
        "num_heads": sizes["num_heads"],
        "intermediate_dim": sizes["intermediate_dim"],
        "dropout": 0.0,
        "activation_dropout": HIDDEN_DROPOUT,
        **extra,
    }
