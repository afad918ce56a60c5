"""The base class of tfformer's backbones."""

import keras

from tfformer.errors import InputError


@keras.saving.register_keras_serializable(package="tfformer")
class Backbone(keras.Model):
    """A network without its task head: a functional `keras.Model` whose
    constructor builds the graph and keeps typed handles to its parts.

    In the spirit of keras-hub's `Backbone`: code that needs a part of the
    network (a converter filling weights, `CachedDecoder` running the
    decoder one step at a time, attention rollout, a task copying an
    encoder) reads an attribute (`token_embedding`, `encoder_blocks`,
    `decoder_blocks`, `final_norm`, ...) instead of looking a layer up by
    name. A task model (`tfformer.models.TaskModel`) puts a head on it.

    `get_config()` is the constructor's arguments, so `from_config` builds
    the same network again (`.keras` files store that config and the
    weights). `dtype` is the dtype policy of every layer: None takes the
    global policy when the backbone is built (what `train.precision` sets),
    and the config records the policy, so a float32 checkpoint stays
    float32 when it is loaded inside a mixed-precision run.

    Subclasses list their named sizes in `presets` ({name: constructor
    keyword arguments}); `from_preset(name, ...)` builds one.
    """

    presets = {}

    def __init__(self, *args, dtype=None, **kwargs):
        super().__init__(*args, **kwargs)
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)

    @staticmethod
    def resolve_dtype(dtype):
        """The dtype policy every layer of a backbone is built with: `dtype`,
        or the global policy when it is None."""
        return keras.dtype_policies.get(dtype or keras.config.dtype_policy())

    @property
    def token_embedding(self):
        """The layer that embeds token ids (and, with `reverse=True`,
        projects hidden states back to vocabulary logits); None for image
        backbones."""
        return getattr(self, "_token_embedding", None)

    @token_embedding.setter
    def token_embedding(self, value):
        self._token_embedding = value

    def get_config(self):
        # Not Functional.get_config: that describes the graph, which the
        # constructor builds from the arguments a subclass adds here.
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)

    @classmethod
    def from_preset(cls, preset, *args, **kwargs):
        """This backbone at the named size; `kwargs` override its values.

        Raises:
            ValueError: `preset` is not one of `cls.presets`.
        """
        if preset not in cls.presets:
            raise InputError(
                f"{cls.__name__} has no preset {preset!r}. Choose one of "
                f"{sorted(cls.presets)}. Received: preset={preset!r}"
            )
        return cls(*args, **{**cls.presets[preset], **kwargs})
