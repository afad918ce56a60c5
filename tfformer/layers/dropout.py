"""Dropout whose random numbers are cheaper under XLA on CPU."""

import keras
from keras import ops

# `tf.random.Algorithm` values.
PHILOX, THREEFRY = 1, 2


def in_xla_compilation():
    """Whether TensorFlow is tracing a function for XLA (`jit_compile=True`).
    `tf.__internal__.get_enclosing_xla_context` is TensorFlow's internal API
    (tested with TensorFlow 2.21): its absence fails loudly, naming the
    version, rather than silently changing which generator runs."""
    import tensorflow as tf

    enclosing = getattr(tf.__internal__, "get_enclosing_xla_context", None)
    if enclosing is None:
        raise RuntimeError(
            "tfformer needs tf.__internal__.get_enclosing_xla_context (its "
            "Dropout and sampling filters choose their algorithm by it; "
            f"TensorFlow 2.21 has it); TensorFlow {tf.__version__} does not."
        )
    return enclosing() is not None


@keras.saving.register_keras_serializable(package="tfformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, config and masks' law: each
    value kept with probability 1 - rate and scaled by 1 / (1 - rate)),
    drawing its uniform numbers with the Threefry algorithm when TensorFlow
    compiles the step with XLA.

    `keras.layers.Dropout` on TensorFlow draws with Philox. In the
    `translate_de_en` model's XLA training step (batch 64, 24 source and
    target tokens, 2-core Xeon) dropout cost about 160 ms of a 560 ms step
    with Keras's dropout and about 90 ms with Threefry (no dropout: 400 ms).
    TensorFlow's kernels outside XLA do not run Threefry, so eager calls and
    graphs without XLA keep Philox. Other backends use Keras's dropout
    unchanged (JAX's generator is Threefry already). The masks differ from
    `keras.layers.Dropout`'s for the same seed (another generator), and
    between XLA and non-XLA execution.

    Unlike `keras.layers.Dropout`, the layer saves its seed generator's state
    with its weights (`save_weights`, `.keras`): a run resumed from a backup
    goes on drawing the masks an uninterrupted run would, instead of the
    masks of its first steps again. Weights saved without that state (by
    `keras.layers.Dropout`, or by tfformer before it kept it) load too, and
    leave the state as it is; the other way, `keras.layers.Dropout` refuses
    the extra entry (`load_weights(skip_mismatch=True)` skips it).
    """

    SEED_STATE = "seed_generator_state"

    def save_own_variables(self, store):
        super().save_own_variables(store)
        if getattr(self, "seed_generator", None) is not None:
            store[self.SEED_STATE] = self.seed_generator.state

    def load_own_variables(self, store):
        # Keras's own check counts the stored entries against the layer's
        # variables, which do not include the generator's state; it runs
        # first, so a refused entry leaves the layer as it was.
        rest = {k: store[k] for k in store.keys() if k != self.SEED_STATE}
        super().load_own_variables(rest)
        generator = getattr(self, "seed_generator", None)
        if self.SEED_STATE in store and generator is not None:
            generator.state.assign(store[self.SEED_STATE])

    def call(self, inputs, training=False):
        if not training or self.rate <= 0:
            return inputs
        if keras.backend.backend() != "tensorflow" or self.noise_shape is not None:
            return super().call(inputs, training=training)
        import tensorflow as tf

        seed = self.seed_generator.next()
        # tf.random's stateless ops want an int32 seed under XLA (as
        # Keras's own TensorFlow random functions cast it).
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        # tf.random.stateless_uniform(shape, seed, alg) in raw ops: its
        # Python builds the key and counter from about 45 ops per call (a
        # tenth of a transformer block's graph); these are the same numbers
        # from a few (`test_dropout` compares them with stateless_uniform).
        if in_xla_compilation():
            # Threefry's key: the seed's two 32-bit halves as one uint64.
            key = tf.reshape(tf.bitcast(tf.cast(seed, tf.uint32), tf.uint64), [1])
            counter = tf.zeros([1], tf.uint64)
            algorithm = THREEFRY
        else:
            # Philox's key and counter, scrambled from the seed by the kernel
            # (Philox on CPU and GPU, TensorFlow's own non-XLA devices).
            key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
            algorithm = PHILOX
        uniform = tf.raw_ops.StatelessRandomUniformV2(
            shape=tf.shape(inputs), key=key, counter=counter, alg=algorithm
        )
        keep = uniform >= self.rate
        scaled = inputs / ops.cast(1.0 - self.rate, inputs.dtype)
        return tf.where(keep, scaled, tf.zeros_like(inputs))
