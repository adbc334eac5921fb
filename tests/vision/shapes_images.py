"""A synthetic segmentation data set drawn with numpy: squares (class 1) and discs (class 2)
on a noise background (class 0), written as images/ + masks/ PNG folders and turned into
TFM's segmentation TFRecords by `make_tfrecords --mask_dir`."""

import os

import numpy as np
import tensorflow as tf

from lite_launcher.vision import make_tfrecords


def draw(rng, size=64):
    """(uint8 image [size, size, 3], uint8 mask [size, size]): one square and one disc, of
    random colours, sizes and places (the disc drawn last, over the square where they meet)."""
    image = rng.integers(0, 256, (size, size, 3)).astype(np.float32) * 0.5
    mask = np.zeros((size, size), np.uint8)
    rows, cols = np.mgrid[:size, :size]
    side = rng.integers(size // 4, size // 2)
    top, left = rng.integers(0, size - side, 2)
    square = (rows >= top) & (rows < top + side) & (cols >= left) & (cols < left + side)
    radius = rng.integers(size // 8, size // 4)
    cy, cx = rng.integers(radius, size - radius, 2)
    disc = (rows - cy) ** 2 + (cols - cx) ** 2 <= radius ** 2
    # Squares reddish, discs bluish, each of a random shade: the classes differ in colour as
    # well as in shape, so a small model learns them in a few hundred steps.
    for region, label, channel in ((square, 1, 0), (disc, 2, 2)):
        colour = rng.integers(0, 96, 3)
        colour[channel] = rng.integers(192, 256)
        image[region] = colour
        mask[region] = label
    return image.astype(np.uint8), mask


def write_folders(root, count, seed, size=64):
    """images/ and masks/ under `root` with `count` drawn pairs; returns the two folders."""
    rng = np.random.default_rng(seed)
    image_dir, mask_dir = os.path.join(root, "images"), os.path.join(root, "masks")
    os.makedirs(image_dir)
    os.makedirs(mask_dir)
    for i in range(count):
        image, mask = draw(rng, size)
        tf.io.write_file(os.path.join(image_dir, f"s{i:04d}.png"), tf.io.encode_png(image))
        tf.io.write_file(os.path.join(mask_dir, f"s{i:04d}.png"),
                         tf.io.encode_png(mask[..., None]))
    return image_dir, mask_dir


def shapes_tfrecords(root, train_count=192, eval_count=32, size=64):
    """(train glob, validation glob) of shapes TFRecords made by make_tfrecords' mask mode."""
    globs = []
    for split, count, seed in (("train", train_count, 0), ("validation", eval_count, 1)):
        image_dir, mask_dir = write_folders(os.path.join(root, split), count, seed, size)
        prefix = os.path.join(root, f"{split}.tfrecord")
        code = make_tfrecords.main(["--image_dir", image_dir, "--mask_dir", mask_dir,
                                    "--num_classes", "3", "--output_prefix", prefix,
                                    "--num_shards", "2", "--keep_format"])
        assert code == 0
        globs.append(prefix + "-?????-of-?????")
    return tuple(globs)
