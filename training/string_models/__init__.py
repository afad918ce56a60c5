"""Models that take strings: a tfformer task model with its preprocessor,
so `fit`, `evaluate` and `predict` read raw text like any Keras model, and
the task's own methods (`classify`, `generate`, `translate`) too.

    from tfformer.training.string_models import StringClassifier

    classifier = StringClassifier.from_run("runs/minilm", labels=["neg", "pos"])
    classifier.fit(x=texts, y=labels, batch_size=32, epochs=2)
    classifier.classify(["a gripping film"])
    classifier.save("polarity.keras")            # with its preprocessor
    classifier.save_run("runs/polarity_fit")     # a run tfformer-export reads

- `StringClassifier`: texts (or pairs) and labels; a classifier run, or a
  new head on the encoder of a masked-LM or sentence-embedding run.
- `StringCausalLM`: texts (next-token labels are made from them).
- `StringTranslator`: `(sources, targets)`.

The model inside is the run's `tfformer.models` task model (ids in); the
preprocessor (`tfformer.training.preprocessors`) maps over `tf.data`
batches of strings, as keras-hub's tasks do, and both save in one `.keras`
file. `from_run` builds the model in a `tf.distribute` strategy's scope and
under a precision as the trainer does (`strategy`, `precision`).
"""

from tfformer.training.string_models.base import StringModel
from tfformer.training.string_models.causal_lm import StringCausalLM
from tfformer.training.string_models.classifier import StringClassifier
from tfformer.training.string_models.translator import StringTranslator

__all__ = ["StringCausalLM", "StringClassifier", "StringModel", "StringTranslator"]
