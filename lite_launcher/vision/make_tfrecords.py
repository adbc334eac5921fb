"""Turns a folder of images (one sub-folder per class) into TFRecord shards in TFM's format.

    python -m lite_launcher.vision.make_tfrecords --image_dir DIR --output_prefix OUT \
        [--num_shards N] [--keep_format] [--seed S]

Class sub-folders are sorted by name and numbered from 0 (`image/class/label`); the names are
written, one a line, to `OUT-labels.txt`. Each `tf.train.Example` holds `image/encoded`,
`image/format`, `image/height`, `image/width`, `image/channels`, `image/class/label`,
`image/class/text` and `image/filename`. Images that are not JPEG are re-encoded as JPEG
(quality 95) unless `--keep_format`, since TFM's parser decodes JPEG only by default. Files are
shuffled (seeded) and dealt round-robin into `OUT-00000-of-0000N`. Bad input is one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import List, Sequence, Tuple

from lite_launcher import atomic_write

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
USER_ERROR_EXIT_CODE = 2


class InputError(ValueError):
    """Bad command-line input (reported as one line, exit code 2)."""


def list_images(image_dir: str) -> Tuple[List[str], List[Tuple[str, int]]]:
    """(sorted class names, [(image path, label)]) of `image_dir`."""
    if not os.path.isdir(image_dir):
        raise InputError(f"--image_dir {image_dir!r} is not a directory.")
    classes = sorted(d for d in os.listdir(image_dir)
                     if os.path.isdir(os.path.join(image_dir, d)) and not d.startswith("."))
    if not classes:
        raise InputError(f"--image_dir {image_dir!r} has no class sub-folders; put each "
                         f"class's images in a sub-folder named after the class.")
    items = []
    for label, name in enumerate(classes):
        folder = os.path.join(image_dir, name)
        files = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_EXTENSIONS))
        if not files:
            raise InputError(f"class folder {folder!r} holds no images "
                             f"({', '.join(IMAGE_EXTENSIONS)}).")
        items += [(os.path.join(folder, f), label) for f in files]
    return classes, items


def _example(path: str, label: int, class_name: str, keep_format: bool):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with open(path, "rb") as f:
        data = f.read()
    try:
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
    except (tf.errors.InvalidArgumentError, ValueError) as e:
        raise InputError(f"{path!r} is not a readable image: "
                         f"{' '.join(str(e).split())[:120]}") from e
    is_jpeg = data[:3] == b"\xff\xd8\xff"
    image_format = "jpeg" if is_jpeg else os.path.splitext(path)[1].lstrip(".").lower()
    if not is_jpeg and not keep_format:
        data = tf.io.encode_jpeg(image, quality=95).numpy()
        image_format = "jpeg"
    height, width = int(image.shape[0]), int(image.shape[1])

    def b(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def i(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": b(data),
        "image/format": b(image_format.encode()),
        "image/height": i(height),
        "image/width": i(width),
        "image/channels": i(3),
        "image/class/label": i(label),
        "image/class/text": b(class_name.encode()),
        "image/filename": b(os.path.basename(path).encode()),
    }))


def make_tfrecords(image_dir: str, output_prefix: str, num_shards: int = 1,
                   keep_format: bool = False, seed: int = 0) -> List[str]:
    """Writes the shards (and `output_prefix-labels.txt`); returns the shard paths."""
    if num_shards < 1:
        raise InputError(f"--num_shards ({num_shards}) must be >= 1.")
    classes, items = list_images(image_dir)
    if num_shards > len(items):
        raise InputError(f"--num_shards ({num_shards}) is more than the {len(items)} images.")
    parent = os.path.dirname(os.path.abspath(output_prefix))
    if not os.path.isdir(parent):
        raise InputError(f"--output_prefix {output_prefix!r}: directory {parent!r} does not "
                         f"exist.")
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    random.Random(seed).shuffle(items)
    examples = [_example(path, label, classes[label], keep_format) for path, label in items]
    paths = [f"{output_prefix}-{k:05d}-of-{num_shards:05d}" for k in range(num_shards)]
    for k, path in enumerate(paths):
        with atomic_write.atomic_path(path) as tmp, tf.io.TFRecordWriter(tmp) as writer:
            for example in examples[k::num_shards]:
                writer.write(example.SerializeToString())
    with open(f"{output_prefix}-labels.txt", "w") as f:
        f.write("".join(f"{name}\n" for name in classes))
    return paths


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lite_launcher.vision.make_tfrecords",
        description="Folder of images (one sub-folder per class) -> TFRecord shards in "
                    "TFM's image classification format.")
    parser.add_argument("--image_dir", required=True, help="One sub-folder of images per class.")
    parser.add_argument("--output_prefix", required=True,
                        help="Shards are written as PREFIX-00000-of-0000N.")
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--keep_format", action="store_true",
                        help="Store PNG/BMP/GIF bytes as they are (default: re-encode as JPEG).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the file shuffle.")
    args = parser.parse_args(argv)
    try:
        paths = make_tfrecords(args.image_dir, args.output_prefix, args.num_shards,
                               args.keep_format, args.seed)
    except InputError as e:
        sys.stderr.write(f"make_tfrecords: error: {e}\n")
        return USER_ERROR_EXIT_CODE
    print(f"Wrote {len(paths)} shard(s): {paths[0]}" + (" ..." if len(paths) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
