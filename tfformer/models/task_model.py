"""The base class of the models that put a head on a backbone."""

import keras

from tfformer.errors import InputTypeError
from tfformer.models.backbone import Backbone


def float32_logits(x, name="logits"):
    """Logits in float32 whatever the dtype policy, for a stable softmax/loss."""
    return keras.layers.Activation("linear", dtype="float32", name=name)(x)


@keras.saving.register_keras_serializable(package="tfformer")
class TaskModel(keras.Model):
    """A backbone with a task head: the model a task trains, evaluates and
    exports (keras-hub's `Task` without its preprocessor).

    The backbone is one layer of the functional graph, reachable as
    `.backbone`; the head's layers sit beside it. `get_config()` holds the
    serialized backbone and the head's own arguments, so a `.keras` file
    rebuilds the same classes.

    Subclasses build their graph from `backbone.input` (or extra inputs of
    their own) and call `super().__init__(backbone, inputs, outputs, ...)`.
    """

    def __init__(self, backbone, inputs, outputs, **kwargs):
        if not isinstance(backbone, Backbone):
            raise InputTypeError(
                f"{type(self).__name__} needs a tfformer backbone "
                f"(tfformer.models.Backbone). Received: backbone={backbone!r}"
            )
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone = backbone

    def get_config(self):
        # Not Functional.get_config: the constructor rebuilds the graph.
        return {
            "backbone": keras.layers.serialize(self.backbone),
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("backbone"), dict):
            config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)
