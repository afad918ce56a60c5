"""Encoded image bytes to the pixels an image classifier sees, in core
TensorFlow ops only: training, `tfformer-predict`, the SavedModel and the
TFLite parity checks all call these functions, so a server decodes and
resizes exactly as training did.

A JPEG, PNG, GIF (first frame) or BMP decodes to three channels (grayscale
is repeated, an alpha channel is dropped) and is resized, without keeping
its aspect ratio, to `size` x `size` with `tf.image.resize`'s bilinear
filter with antialiasing, then rounded back to uint8. An image already at
that size is left untouched. Other formats (WebP among them) are refused,
and so is an image whose header declares more than `MAX_PIXELS` pixels,
before it is decoded: a few kilobytes can declare a picture whose decoding
would take gigabytes.
"""

import tensorflow as tf

# What the folder reader takes for images (lower case).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
# Largest declared width x height decoded (a 48-megapixel phone photo fits).
MAX_PIXELS = 50_000_000
# Leading bytes of the accepted formats.
SIGNATURES = {
    "jpeg": b"\xff\xd8\xff",
    "png": b"\x89PNG\r\n\x1a\n",
    "gif87": b"GIF87a",
    "gif89": b"GIF89a",
    "bmp": b"BM",
}
_HEADER = 32


def _header(encoded):
    """The first 32 bytes of each string (zero-padded) as uint8 `(..., 32)`."""
    padded = tf.strings.join([encoded, tf.fill(tf.shape(encoded), "\0" * _HEADER)])
    head = tf.strings.substr(padded, 0, _HEADER)
    return tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)


def _starts_with(encoded, signature):
    padded = tf.strings.join([encoded, tf.fill(tf.shape(encoded), "\0" * _HEADER)])
    return tf.strings.substr(padded, 0, len(signature)) == signature


def is_image(encoded):
    """Whether string tensors `encoded` start like a JPEG, PNG, GIF or BMP."""
    known = tf.zeros_like(encoded, tf.bool)
    for signature in SIGNATURES.values():
        known |= _starts_with(encoded, signature)
    return known


def declared_pixels(encoded):
    """Width x height that one encoded image's header declares (int64
    scalar); a JPEG's comes from its frame header, which may lie anywhere."""
    head = _header(encoded)

    def big_endian(start, count):
        value = tf.constant(0, tf.int64)
        for i in range(count):
            value = value * 256 + head[start + i]
        return value

    def little_endian(start, count):
        value = tf.constant(0, tf.int64)
        for i in reversed(range(count)):
            value = value * 256 + head[start + i]
        return value

    def signed32(value):  # a BMP's height is negative for top-down rows
        return tf.abs(tf.where(value >= 2**31, value - 2**32, value))

    def jpeg():
        shape = tf.image.extract_jpeg_shape(encoded, output_type=tf.int32)
        return tf.cast(shape[0], tf.int64) * tf.cast(shape[1], tf.int64)

    return tf.case(
        [
            (_starts_with(encoded, SIGNATURES["jpeg"]), jpeg),
            (
                _starts_with(encoded, SIGNATURES["png"]),
                lambda: big_endian(16, 4) * big_endian(20, 4),
            ),
            (
                _starts_with(encoded, SIGNATURES["bmp"]),
                lambda: signed32(little_endian(18, 4)) * signed32(little_endian(22, 4)),
            ),
        ],
        # GIF: the logical screen's width and height.
        default=lambda: little_endian(6, 2) * little_endian(8, 2),
    )


def resize_pixels(image, size):
    """`(height, width, 3)` uint8 pixels resized to `(size, size, 3)` uint8."""
    image = tf.convert_to_tensor(image)
    shape = tf.shape(image)

    def resized():
        pixels = tf.image.resize(
            tf.cast(image, tf.float32), [size, size], method="bilinear", antialias=True
        )
        return tf.cast(tf.clip_by_value(tf.round(pixels), 0.0, 255.0), tf.uint8)

    same = tf.logical_and(tf.equal(shape[0], size), tf.equal(shape[1], size))
    out = tf.cond(same, lambda: tf.cast(image, tf.uint8), resized)
    return tf.ensure_shape(out, [size, size, 3])


def decode_pixels(encoded, size):
    """One encoded image (a scalar string tensor) to `(size, size, 3)` uint8
    pixels. Another format, a header declaring more than `MAX_PIXELS`, or
    undecodable bytes raise TensorFlow's InvalidArgumentError."""
    encoded = tf.convert_to_tensor(encoded, tf.string)
    known = tf.debugging.Assert(is_image(encoded), ["not a JPEG, PNG, GIF or BMP file"])
    with tf.control_dependencies([known]):
        pixels = declared_pixels(encoded)
    small = tf.debugging.Assert(
        pixels <= MAX_PIXELS,
        [
            tf.strings.format(
                "the image declares {} pixels, more than the {} accepted",
                [pixels, MAX_PIXELS],
            )
        ],
    )
    with tf.control_dependencies([small]):
        image = tf.io.decode_image(
            encoded, channels=3, expand_animations=False, dtype=tf.uint8
        )
    return resize_pixels(image, size)
