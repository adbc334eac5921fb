"""Writes the shipped digits as a folder of 32x32 RGB JPEG images per class (test helper)."""

import os

import numpy as np
import tensorflow as tf

from lite_launcher.experiments import digits

SIZE = 32


def write_digit_folders(root: str, split: str, limit: int = None) -> int:
    """root/<label>/<index>.jpg for the digits `split`; returns the number of images."""
    images, labels = digits.load_digits_split(split)
    if limit:
        images, labels = images[:limit], labels[:limit]
    # 8x8 in [0, 1] -> 32x32 RGB uint8, white digit on black.
    pixels = tf.image.resize(images[..., None], [SIZE, SIZE], method="bilinear")
    pixels = tf.cast(tf.round(tf.clip_by_value(pixels, 0.0, 1.0) * 255.0), tf.uint8)
    pixels = tf.tile(pixels, [1, 1, 1, 3])
    for label in range(digits.NUM_CLASSES):
        os.makedirs(os.path.join(root, str(label)), exist_ok=True)
    for i, (image, label) in enumerate(zip(pixels, labels)):
        with open(os.path.join(root, str(int(label)), f"{i:04d}.jpg"), "wb") as f:
            f.write(tf.io.encode_jpeg(image, quality=95).numpy())
    return len(labels)


def digits_tfrecords(tmp_dir: str, num_shards: int = 2, limits=(None, None)):
    """Writes train / validation folders and shards with the CLI; returns the two globs.
    `limits`: the first N digits of (train, validation) only (None: all of the split)."""
    from lite_launcher.vision import make_tfrecords  # pylint: disable=import-outside-toplevel
    globs = []
    for split, limit in zip(("train", "validation"), limits):
        folder = os.path.join(tmp_dir, f"{split}_images")
        write_digit_folders(folder, split, limit=limit)
        prefix = os.path.join(tmp_dir, split)
        assert make_tfrecords.main(["--image_dir", folder, "--output_prefix", prefix,
                                    "--num_shards", str(num_shards)]) == 0
        globs.append(prefix + "-*-of-*")
    return globs


def mean_pixel_check(path: str) -> float:
    """Mean of one written image (sanity helper)."""
    return float(np.mean(tf.io.decode_jpeg(tf.io.read_file(path)).numpy()))
