"""keras-hub's models at tfformer's sizes: the contenders the benchmarks
build, one builder each.

The encoder-decoder (`KerasHubSeq2Seq`) is built the way the keras.io
keras-hub translation example builds it:
`keras_hub.layers.TokenAndPositionEmbedding` + `TransformerEncoder` /
`TransformerDecoder` blocks + a `Dense` output layer. `training_model()` is
the functional model `model.fit` trains (same input names as tfformer's
`transformer_seq2seq`: `encoder_token_ids`, `decoder_token_ids`; id 0 is
padding); `decoder()` is keras-hub's best cached greedy loop: the
self-attention and cross-attention caches of `TransformerDecoder`, the cross
cache computed at step 0 and reused, all in one `tf.while_loop`;
`beam_decoder()` runs `keras_hub.samplers.BeamSampler` over the same caches.
`seq2seq_for_config` and `seq2seq_for_sizes` build it from a training
config or from a dict of sizes.

GPT and BERT: `keras_hub.models.GPT2Backbone` with its tied output
projection (`gpt2_language_model`) and `BertBackbone` with its pooled
output, dropout and a Dense layer (`bert_text_classifier`), at the sizes of
tfformer's `model_sizes` (`backbone_arguments`).
"""

import keras
import keras_hub
import numpy as np
import tensorflow as tf

START, END = 2, 3


def fixed_length(examples, length):
    """keras.io style: every sequence padded (and cut) to `length`."""
    features = {
        name: ids[:, :length].to_tensor(shape=[None, length])
        for name, ids in examples.features.items()
    }
    labels = examples.labels[:, :length].to_tensor(shape=[None, length])
    return features, labels


def padded_dataset(examples, length, batch_size, *, shuffle, seed=0):
    features, labels = fixed_length(examples, length)
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    if shuffle:
        ds = ds.shuffle(len(labels), seed=seed, reshuffle_each_iteration=True)
    return ds.batch(batch_size, drop_remainder=shuffle).prefetch(tf.data.AUTOTUNE)


def cut_after_end(ids):
    """Zeroes every token after the first end token (kept)."""
    ended = np.cumsum(ids == END, axis=1) - (ids == END)
    return np.where(ended > 0, 0, ids)


class KerasHubSeq2Seq:
    """keras-hub encoder-decoder layers at given sizes."""

    def __init__(
        self,
        source_vocabulary,
        target_vocabulary,
        *,
        layers,
        hidden_dim,
        heads,
        intermediate_dim,
        max_length,
        dropout=0.0,
        layer_norm_epsilon=1e-5,
        embedding_dropout=0.0,
    ):
        self.heads, self.hidden_dim = heads, hidden_dim
        # keras-hub's blocks have no dropout on the embeddings; a keras-hub
        # user adds a Dropout layer (0 = none, as in the keras.io example).
        self.embedding_dropout = keras.layers.Dropout(embedding_dropout)
        self.source_embedding = keras_hub.layers.TokenAndPositionEmbedding(
            source_vocabulary, max_length, hidden_dim
        )
        self.target_embedding = keras_hub.layers.TokenAndPositionEmbedding(
            target_vocabulary, max_length, hidden_dim
        )
        self.encoders = [
            keras_hub.layers.TransformerEncoder(
                intermediate_dim,
                heads,
                dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon,
            )
            for _ in range(layers)
        ]
        self.decoders = [
            keras_hub.layers.TransformerDecoder(
                intermediate_dim,
                heads,
                dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon,
            )
            for _ in range(layers)
        ]
        self.output_dense = keras.layers.Dense(target_vocabulary)
        source = np.ones((1, 4), "int32")
        self.decode_full(source, source)  # builds every layer

    def encode(self, source, training=None):
        x = self.embedding_dropout(self.source_embedding(source), training=training)
        for block in self.encoders:
            x = block(x, padding_mask=source != 0, training=training)
        return x

    def decode_full(self, source, target, training=None):
        """Teacher-forced logits `(batch, target_length, vocabulary)`."""
        encoded = self.encode(source, training)
        y = self.embedding_dropout(self.target_embedding(target), training=training)
        for block in self.decoders:
            y = block(
                y,
                encoded,
                decoder_padding_mask=target != 0,
                encoder_padding_mask=source != 0,
                training=training,
            )
        return self.output_dense(y)

    def training_model(self):
        source = keras.Input((None,), dtype="int32", name="encoder_token_ids")
        target = keras.Input((None,), dtype="int32", name="decoder_token_ids")
        logits = self.decode_full(source, target)
        return keras.Model(
            {"encoder_token_ids": source, "decoder_token_ids": target}, logits
        )

    def decoder_step(
        self,
        position,
        token,
        encoded,
        source_mask,
        caches,
        cross,
        cross_index,
        last_only=True,
    ):
        """One cached `TransformerDecoder` step: last-position logits (every
        position with `last_only=False`) and the
        updated self- and cross-attention caches (`cross_index` 0 computes
        the cross caches, None reuses them)."""
        x = self.target_embedding(token, start_index=position)
        new_caches, new_cross = [], []
        for block, cache, cross_cache in zip(self.decoders, caches, cross, strict=True):
            x, cache, cross_cache = block(
                x,
                encoded,
                encoder_padding_mask=source_mask,
                self_attention_cache=cache,
                self_attention_cache_update_index=position,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=cross_index,
            )
            new_caches.append(cache)
            new_cross.append(cross_cache)
        logits = self.output_dense(x)
        return (logits[:, -1] if last_only else logits), new_caches, new_cross

    def _initial_state(self, source, length, start_id):
        """The start tokens `(batch, length)` (start id, then zeros) and zero
        self- and cross-attention caches, one per decoder layer."""
        batch, source_length = tf.shape(source)[0], tf.shape(source)[1]
        head_dim = self.hidden_dim // self.heads
        tokens = tf.concat(
            [tf.fill([batch, 1], start_id), tf.zeros([batch, length - 1], tf.int32)],
            1,
        )
        caches = [
            tf.zeros([batch, 2, length, self.heads, head_dim]) for _ in self.decoders
        ]
        cross = [
            tf.zeros([batch, 2, source_length, self.heads, head_dim])
            for _ in self.decoders
        ]
        return tokens, caches, cross

    def decoder(self, length, jit_compile, start_id=START, mask_source=True):
        """A `tf.function`: source ids `(batch, S)` -> greedy ids `(batch, length)`
        (start token first). It always runs `length - 1` steps; greedy tokens
        before an end token do not depend on what follows it. `mask_source`
        keeps cross-attention off source padding (the sources of
        bench/decoding_speed/decode.py have none and leave it out)."""

        def decode(source):
            encoded = self.encode(source)
            source_mask = source != 0 if mask_source else None
            tokens, caches, cross = self._initial_state(source, length, start_id)

            def step(i, token, caches, cross, cross_index):
                logits, caches, cross = self.decoder_step(
                    i, token, encoded, source_mask, caches, cross, cross_index
                )
                return tf.argmax(logits, -1, output_type=tf.int32), caches, cross

            # Step 0 computes the cross-attention caches; later steps reuse them.
            next_ids, caches, cross = step(0, tokens[:, :1], caches, cross, 0)
            hot = tf.cast(tf.range(length)[None, :] == 1, tf.int32)
            tokens = tokens + hot * next_ids[:, None]

            def body(i, tokens, caches):
                next_ids, caches, _ = step(i, tokens[:, i : i + 1], caches, cross, None)
                hot = tf.cast(tf.range(length)[None, :] == i + 1, tf.int32)
                return i + 1, tokens + hot * next_ids[:, None], caches

            _, tokens, _ = tf.while_loop(
                lambda i, t, c: i < length - 1, body, (tf.constant(1), tokens, caches)
            )
            return tokens

        return tf.function(decode, jit_compile=jit_compile, autograph=False)

    def beam_decoder(self, length, num_beams, end_id, start_id=START):
        """A `tf.function`: source ids `(batch, S)` -> ids `(batch, length)`
        from `keras_hub.samplers.BeamSampler(num_beams)`, as keras-hub offers
        it: beams ranked by their summed log-probability (no length
        penalty), a beam that has ended keeps being extended (and scored)
        until every beam of the batch has an end token. The encoder output,
        its mask and the cross-attention caches ride in the sampler's cache
        so that it tiles and reorders them with the beams."""
        sampler = keras_hub.samplers.BeamSampler(num_beams=num_beams)

        def layer_step(position, token, cache, cross_index):
            logits, new_self, new_cross = self.decoder_step(
                position,
                token,
                cache["encoded"],
                cache["source_mask"],
                cache["self"],
                cache["cross"],
                cross_index,
            )
            return logits, dict(cache, self=new_self, cross=new_cross)

        def decode(source):
            batch = tf.shape(source)[0]
            tokens, caches, cross = self._initial_state(source, length, start_id)
            cache = dict(
                encoded=self.encode(source),
                source_mask=source != 0,
                self=caches,
                cross=cross,
            )
            # Fills the cross-attention caches (and position 0 of the self
            # caches, which the sampler's first step rewrites unchanged).
            _, cache = layer_step(0, tokens[:, :1], cache, 0)

            def next_fn(prompt, cache, index):
                token = prompt[:, index - 1 : index]
                logits, cache = layer_step(index - 1, token, cache, None)
                return logits, None, cache

            mask = tf.range(length)[None, :] < 1
            mask = tf.broadcast_to(mask, [batch, length])
            return sampler(
                next_fn,
                tokens,
                cache=cache,
                index=1,
                mask=mask,
                stop_token_ids=[end_id],
            )

        return tf.function(decode, jit_compile=False, autograph=False)


class KerasHubCachedDecoder:
    """tfformer's `CachedDecoder` interface over a `KerasHubSeq2Seq`'s layers,
    so that `tfformer.decoding.Generator` (greedy with early exit, beam search
    with the GNMT length penalty) drives keras-hub's own self- and
    cross-attention caches: both libraries' models then decode with one
    search, line for line.

    `step` computes the cross-attention caches when `cross_caches` is None
    (keras-hub's `cross_attention_cache_update_index=0`) and reuses them
    after (`None`), as `decoder()` does.
    """

    is_seq2seq = True

    def __init__(self, hub):
        self.hub = hub
        self.head_dim = hub.hidden_dim // hub.heads

    def encode(self, encoder_token_ids):
        return self.hub.encode(encoder_token_ids), encoder_token_ids != 0

    def _zeros(self, batch, length):
        return tf.zeros([batch, 2, length, self.hub.heads, self.head_dim])

    def init_cache(self, batch_size, max_length):
        return tuple(self._zeros(batch_size, max_length) for _ in self.hub.decoders)

    def step(self, token_ids, cache, index, encoded=None, cross_caches=None):
        encoder_output, encoder_mask = encoded
        if cross_caches is None:
            shape = tf.shape(encoder_output)
            cross_caches = tuple(
                self._zeros(shape[0], shape[1]) for _ in self.hub.decoders
            )
            cross_index = 0
        else:
            cross_index = None
        logits, caches, cross = self.hub.decoder_step(
            index,
            token_ids,
            encoder_output,
            encoder_mask,
            cache,
            cross_caches,
            cross_index,
            last_only=False,
        )
        return tf.cast(logits, tf.float32), tuple(caches), tuple(cross)


def seq2seq_for_config(config, data, dropout=None, **options):
    """The encoder-decoder at a tfformer training config's sizes, with its
    data's vocabularies and `data.max_length` positions; `dropout` defaults
    to the config's."""
    # Imported here: the decoding benchmarks, which build from sizes, load
    # nothing of the training program (cost_curves.py records their memory).
    from tfformer.training.tasks import get_task

    sizes = get_task(config.task).model_sizes(config.model)
    return KerasHubSeq2Seq(
        data.tokenizers["source"].vocabulary_size,
        data.tokenizers["target"].vocabulary_size,
        layers=sizes["num_encoder_layers"],
        hidden_dim=sizes["hidden_dim"],
        heads=sizes["num_heads"],
        intermediate_dim=sizes["intermediate_dim"],
        max_length=config.data.max_length,
        dropout=sizes.get("dropout", 0.1) if dropout is None else dropout,
        **options,
    )


def seq2seq_for_sizes(sizes, dropout=0.0):
    """The encoder-decoder at `sizes` (`layers`, `hidden_dim`, `heads`,
    `intermediate_dim`, `vocabulary` for both sides, `max_length`), its
    own weights."""
    return KerasHubSeq2Seq(
        sizes["vocabulary"],
        sizes["vocabulary"],
        layers=sizes["layers"],
        hidden_dim=sizes["hidden_dim"],
        heads=sizes["heads"],
        intermediate_dim=sizes["intermediate_dim"],
        max_length=sizes["max_length"],
        dropout=dropout,
    )


def backbone_arguments(sizes, vocabulary, length):
    """keras-hub backbone keywords for tfformer's sizes."""
    names = ("num_layers", "num_heads", "hidden_dim", "intermediate_dim", "dropout")
    return dict(
        vocabulary_size=vocabulary,
        max_sequence_length=length,
        **{name: sizes[name] for name in names},
    )


def gpt2_language_model(sizes, vocabulary, length):
    """`GPT2Backbone` with its tied output projection
    (`token_embedding(..., reverse=True)`, as `GPT2CausalLM`): token ids ->
    logits; the padding mask is `token_ids != 0`."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    backbone = keras_hub.models.GPT2Backbone(
        **backbone_arguments(sizes, vocabulary, length)
    )
    hidden = backbone(
        {"token_ids": token_ids, "padding_mask": keras.ops.not_equal(token_ids, 0)}
    )
    logits = backbone.token_embedding(hidden, reverse=True)
    return keras.Model({"token_ids": token_ids}, logits)


def bert_text_classifier(sizes, vocabulary, length, num_classes):
    """`BertBackbone`'s pooled output, dropout and a Dense layer (as
    `BertTextClassifier`); the padding mask is `token_ids != 0`."""
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    backbone = keras_hub.models.BertBackbone(
        **backbone_arguments(sizes, vocabulary, length)
    )
    outputs = backbone(
        {
            "token_ids": token_ids,
            "segment_ids": segment_ids,
            "padding_mask": keras.ops.not_equal(token_ids, 0),
        }
    )
    pooled = keras.layers.Dropout(sizes["dropout"])(outputs["pooled_output"])
    logits = keras.layers.Dense(num_classes)(pooled)
    return keras.Model({"token_ids": token_ids, "segment_ids": segment_ids}, logits)


def gpt2_greedy_generate(
    sizes, vocabulary, length, jit_compile="auto", max_sequence_length=None
):
    """keras-hub's `GPT2CausalLM` of tfformer's `sizes` (random weights,
    positions up to `max_sequence_length`, default `length`),
    greedy through its own cached `make_generate_function()` (what
    `generate` runs), compiled with `jit_compile` ("auto", Keras's default,
    is no XLA on a CPU-only machine). Returns `(run, parameters)`: `run`
    takes `(batch, prompt)` int32 prompts and gives `(batch, length)` ids,
    with no stop token."""
    backbone = keras_hub.models.GPT2Backbone(
        **backbone_arguments(
            dict(sizes, dropout=0.0), vocabulary, max_sequence_length or length
        )
    )
    causal_lm = keras_hub.models.GPT2CausalLM(backbone=backbone, preprocessor=None)
    causal_lm.compile(sampler="greedy", jit_compile=jit_compile)
    generate = causal_lm.make_generate_function()

    def run(prompts):
        batch, start = prompts.shape
        ids = np.zeros((batch, length), np.int32)
        ids[:, :start] = prompts
        mask = np.zeros((batch, length), bool)
        mask[:, :start] = True
        out = generate(
            {"token_ids": tf.constant(ids), "padding_mask": tf.constant(mask)},
            stop_token_ids=None,
        )
        return out["token_ids"].numpy()

    return run, causal_lm.count_params()
