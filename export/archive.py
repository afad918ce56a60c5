"""The SavedModel writer every exporter uses: `keras.export.ExportArchive`'s
interface (`track`, `add_endpoint`, `write_out`), with each endpoint traced
once instead of twice.

`ExportArchive.write_out` traces every endpoint to find the variables it
uses, then hands the `tf.function`s to `tf.saved_model.save`, which traces
them again: TensorFlow keys a function's traces by, among other things, the
variable policy of the save under way, so a trace made outside the save is
not reused inside it. Our endpoints are whole decoding loops and tokenizer
graphs, and that second trace was a third of an export's time. This writer
traces each endpoint once, takes the variables its trace captured (as
ExportArchive does), and saves the traced (concrete) functions as the
signatures and as attributes, which the save does not trace again.

As with ExportArchive, the first endpoint is also `serving_default` unless
one is named so, and lookup tables of tracked modules (the tokenizers) are
saved with the model. Signatures (what TF Serving, `saved_model_cli` and
`loaded.signatures[...]` see) are the same as ExportArchive's. Unlike it:
only variables an endpoint uses are saved, the loaded object has no
`variables` lists, its endpoint attributes take the signature's input names
as keywords, and a tracked Keras layer is not searched for lookup tables (no
tfformer layer holds one; a table an endpoint uses but nothing tracks makes
the save fail, naming it).
"""

import keras
import tensorflow as tf


def traced_once(fn, *input_signature):
    """`fn` as a `tf.function` of `input_signature` (`tf.TensorSpec`s), for a
    piece several endpoints call (a tokenizer, a decoding loop): traced once
    and called from each endpoint's graph, instead of traced into each.

    Keep it off tracked modules (a `tf.function` attribute of a saved
    module would be saved as one more function of the SavedModel).
    """
    return tf.function(fn, input_signature=list(input_signature), autograph=False)


class SignatureArchive:
    """Endpoints over tracked models and modules, written as one SavedModel."""

    def __init__(self):
        self._resources = []
        self._endpoints = {}

    def track(self, obj):
        """A built Keras layer or model (its variables are found in the
        endpoints' traces) or a `tf.Module` whose lookup tables and other
        resources the endpoints use (a tokenizer)."""
        if isinstance(obj, keras.Layer):
            if not obj.built:
                raise ValueError(  # a fault, not input
                    f"track() needs a built layer. Received: {obj!r}"
                )
        elif isinstance(obj, tf.Module):
            self._resources.extend(
                child
                for child in tf.train.TrackableView(obj).descendants()
                if isinstance(child, tf.saved_model.experimental.TrackableResource)
            )
        else:
            raise TypeError(  # a fault, not input
                f"track() takes a Keras layer or a tf.Module. Received: {obj!r}"
            )

    def add_endpoint(self, name, fn, input_signature):
        """`fn` called with tensors of `input_signature` (a list of
        `tf.TensorSpec`), returning a dict of tensors."""
        if name in self._endpoints:
            raise ValueError(  # a fault, not input
                f"Endpoint {name!r} is already added."
            )
        self._endpoints[name] = tf.function(
            fn, input_signature=input_signature, autograph=False
        )
        return self._endpoints[name]

    def write_out(self, path):
        """Writes the SavedModel at `path` (no atomicity: the callers stage)."""
        if not self._endpoints:
            raise ValueError(  # a fault, not input
                "No endpoints to write: call add_endpoint() first."
            )
        traced = {
            name: function.get_concrete_function()
            for name, function in self._endpoints.items()
        }
        variables = {}
        for function in traced.values():
            variables.update((id(v), v) for v in function.variables)
        root = tf.Module()
        # Lists of trackables on a tf.Module are saved with it.
        root.captured_variables = list(variables.values())
        root.tracked_resources = list({id(r): r for r in self._resources}.values())
        for name, function in traced.items():
            setattr(root, name, function)
        signatures = dict(traced)
        signatures.setdefault("serving_default", next(iter(traced.values())))
        tf.saved_model.save(root, path, signatures=signatures)
