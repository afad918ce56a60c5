"""tf.data pipelines of decoded images, with the augmentation ViTs need on
small data.

Images are decoded once (`sources.image_folders`) and held in memory as
uint8 pixels; each batch is assembled, augmented and converted to float32 on
the CPU side of the pipeline, in parallel with the model's step (prefetch).
Batches are `(pixels, one-hot labels, sample weights)`: float32 pixel values
0 to 255 (the model normalizes), float32 label distributions (mixup and
cutmix mix them), and weight 0 on the padding rows of a last evaluation
batch.

As `pipeline.training_stream`, the training stream is a pure function of the
seed: epoch `e` is shuffled with (seed, e), and every random draw (crop,
flip, mixup, cutmix) uses a stateless seed of (epoch, example visit) or
(epoch, batch), so a resumed run sees exactly the batches the interrupted
one would have.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.training.pipeline import Examples, epoch_stream, shard_indices

AUTOTUNE = tf.data.AUTOTUNE


@dataclasses.dataclass
class Augmentation:
    """Training-time augmentation (none of it runs in evaluation)."""

    # Zero padding on each side before a random crop back to the image size
    # (the CIFAR recipe: 4); 0: no crop.
    crop_padding: int = 0
    horizontal_flip: bool = False
    # Beta(alpha, alpha) mixing weights of mixup (Zhang et al. 2018) and
    # cutmix (Yun et al. 2019); 0: off. With both on, each batch uses one
    # of them, chosen with probability 1/2 (DeiT's recipe).
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0


@dataclasses.dataclass
class ImageExamples(Examples):
    """`Examples` of images: `features["images"]` holds uint8 pixels
    `(n, size, size, 3)`, `labels` int32 class ids `(n,)`; every example
    has length 1 (one bucket)."""

    num_classes: int = 0
    augmentation: Augmentation = dataclasses.field(default_factory=Augmentation)

    @classmethod
    def of(cls, pixels, labels, num_classes, augmentation=None):
        pixels = np.asarray(pixels)
        labels = np.asarray(labels, np.int32)
        if pixels.ndim != 4 or pixels.shape[-1] != 3 or pixels.dtype != np.uint8:
            raise InputError(
                "pixels must be uint8 (n, height, width, 3). Received: "
                f"{pixels.dtype} {pixels.shape}"
            )
        if labels.shape != (len(pixels),):
            raise InputError(
                f"labels must be one class id per image ({len(pixels)}). "
                f"Received: shape {labels.shape}"
            )
        if len(labels) and not 0 <= labels.min() <= labels.max() < num_classes:
            raise InputError(
                f"labels must be class ids in [0, {num_classes}). Received: "
                f"{labels.min()} to {labels.max()}"
            )
        return cls(
            {"images": pixels},
            labels,
            np.ones(len(pixels), np.int64),
            num_classes=num_classes,
            augmentation=augmentation or Augmentation(),
        )


def augment_image(image, seed, augmentation):
    """One uint8 `(S, S, 3)` image randomly cropped (after zero padding)
    and flipped with the stateless `seed`."""
    size = image.shape[0]
    seeds = tf.random.experimental.stateless_split(seed, 2)
    pad = augmentation.crop_padding
    if pad:
        padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
        image = tf.image.stateless_random_crop(padded, [size, size, 3], seeds[0])
    if augmentation.horizontal_flip:
        image = tf.image.stateless_random_flip_left_right(image, seeds[1])
    return image


def beta_sample(alpha, seed):
    """One draw of Beta(alpha, alpha), as G1 / (G1 + G2) of two gammas."""
    g = tf.random.stateless_gamma([2], seed, alpha=alpha)
    return g[0] / (g[0] + g[1])


def mixup(images, labels, lam):
    """lam * x + (1 - lam) * x', the partner x' being the batch reversed."""
    return (
        lam * images + (1.0 - lam) * tf.reverse(images, [0]),
        lam * labels + (1.0 - lam) * tf.reverse(labels, [0]),
    )


def cutmix_box(size, lam, seed):
    """(top, left, bottom, right) of cutmix's box: sides size * sqrt(1 - lam),
    centred uniformly in the image and clipped to it."""
    cut = tf.cast(tf.round(size * tf.sqrt(1.0 - lam)), tf.int32)
    centre = tf.random.stateless_uniform([2], seed, 0, size, dtype=tf.int32)
    low = tf.clip_by_value(centre - cut // 2, 0, size)
    high = tf.clip_by_value(centre - cut // 2 + cut, 0, size)
    return low[0], low[1], high[0], high[1]


def cutmix(images, labels, lam, seed):
    """Pastes the same box of the reversed batch into every image; labels mix
    by the pasted area's true share (after clipping)."""
    size = images.shape[1]
    top, left, bottom, right = cutmix_box(size, lam, seed)
    rows = tf.range(size)
    inside = ((rows >= top) & (rows < bottom))[:, None] & (
        (rows >= left) & (rows < right)
    )[None, :]
    inside = tf.cast(inside, images.dtype)[None, :, :, None]
    mixed = images * (1.0 - inside) + tf.reverse(images, [0]) * inside
    kept = 1.0 - tf.cast((bottom - top) * (right - left), tf.float32) / (size * size)
    return mixed, kept * labels + (1.0 - kept) * tf.reverse(labels, [0])


def mix_batch(images, labels, seed, augmentation):
    """Mixup or cutmix of a float batch, by `augmentation`, with `seed`."""
    a = augmentation
    if not (a.mixup_alpha or a.cutmix_alpha):
        return images, labels
    seeds = tf.random.experimental.stateless_split(seed, 3)
    if a.mixup_alpha and a.cutmix_alpha:
        use_cutmix = tf.random.stateless_uniform([], seeds[0]) < 0.5
        return tf.cond(
            use_cutmix,
            lambda: cutmix(
                images, labels, beta_sample(a.cutmix_alpha, seeds[1]), seeds[2]
            ),
            lambda: mixup(images, labels, beta_sample(a.mixup_alpha, seeds[1])),
        )
    if a.cutmix_alpha:
        return cutmix(images, labels, beta_sample(a.cutmix_alpha, seeds[1]), seeds[2])
    return mixup(images, labels, beta_sample(a.mixup_alpha, seeds[1]))


def _one_hot(examples):
    def encode(images, label):
        return tf.cast(images, tf.float32), tf.one_hot(label, examples.num_classes)

    return encode


def training_stream(
    examples,
    *,
    batch_size,
    steps_per_epoch,
    seed,
    first_epoch=0,
    skip_steps=0,
    num_shards=1,
    shard_index=0,
    bucket_lengths=None,
):
    """The endless training stream of augmented `(pixels, labels, weights)`
    batches (the keywords of `pipeline.training_stream`; `bucket_lengths`
    is ignored: images have one shape)."""
    del bucket_lengths
    n = len(examples)
    indices = shard_indices(n, batch_size, steps_per_epoch, num_shards, shard_index)
    pixels = tf.constant(examples.features["images"])
    labels = tf.constant(examples.labels)
    augmentation = examples.augmentation
    encode = _one_hot(examples)
    forever = np.iinfo(np.int64).max

    def epoch(e):
        epoch_seed = tf.constant(seed, tf.int64) * 65537 + e
        # Each purpose draws from its own seeds: the shuffle (epoch_seed, pass)
        # with a non-negative first part, the crops and flips (odd negative,
        # per visit) and mixup / cutmix (even negative, per batch).
        crop_seed = -2 * epoch_seed - 1
        mix_seed = -2 * epoch_seed - 2

        def one_pass(r):
            order = tf.random.experimental.stateless_shuffle(
                indices, seed=tf.stack([epoch_seed, r])
            )
            return tf.data.Dataset.from_tensor_slices(order + r * n)

        def load(visit):
            i = visit % n
            image = augment_image(
                tf.gather(pixels, i), tf.stack([crop_seed, visit]), augmentation
            )
            return encode(image, tf.gather(labels, i))

        def mix(step, batch):
            images, onehot = mix_batch(*batch, tf.stack([mix_seed, step]), augmentation)
            return images, onehot, tf.ones([batch_size])

        batches = (
            tf.data.Dataset.range(forever)
            .flat_map(one_pass)
            .map(load, num_parallel_calls=AUTOTUNE)
            .batch(batch_size, drop_remainder=True)
            .take(steps_per_epoch)
            .enumerate()
            .map(mix, num_parallel_calls=AUTOTUNE)
        )
        return batches

    return epoch_stream(epoch, first_epoch, skip_steps)


def evaluation_dataset(examples, *, batch_size, repeat=False, bucket_lengths=None):
    """Every image once, in order, unaugmented; the last batch is padded with
    zero-weight rows to `batch_size` (static shapes). With `repeat`, the
    same pass again endlessly (Keras's validation iterator)."""
    del bucket_lengths
    n = len(examples)
    pad = -n % batch_size
    pixels = examples.features["images"]
    labels = examples.labels
    weights = np.ones(n + pad, np.float32)
    if pad:
        pixels = np.concatenate([pixels, np.zeros((pad, *pixels.shape[1:]), np.uint8)])
        labels = np.concatenate([labels, np.zeros(pad, np.int32)])
        weights[n:] = 0.0
    encode = _one_hot(examples)

    def with_weight(images, label, weight):
        return (*encode(images, label), weight)

    dataset = (
        tf.data.Dataset.from_tensor_slices((pixels, labels, weights))
        .batch(batch_size, drop_remainder=True)  # padded to whole batches
        .map(with_weight, num_parallel_calls=AUTOTUNE)
    )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA
    )
    dataset = dataset.with_options(options)
    if repeat:
        dataset = dataset.repeat()
    return dataset.prefetch(AUTOTUNE)
