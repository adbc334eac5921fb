"""Turns a folder of images into TFRecord shards in TFM's format: image classification (one
sub-folder per class) or, with `--mask_dir`, semantic segmentation (an image folder and a
mask folder).

    python -m lite_launcher.vision.data.make_tfrecords --image_dir DIR --output_prefix OUT \
        [--num_shards N] [--keep_format] [--seed S]
    python -m lite_launcher.vision.data.make_tfrecords --image_dir IMAGES --mask_dir MASKS \
        --num_classes C --output_prefix OUT [--num_shards N] [--keep_format] [--seed S]

Class sub-folders are sorted by name and numbered from 0 (`image/class/label`); the names are
written, one a line, to `OUT-labels.txt`. Each `tf.train.Example` holds `image/encoded`,
`image/format`, `image/height`, `image/width`, `image/channels`, `image/class/label`,
`image/class/text` and `image/filename`. Images that are not JPEG are re-encoded as JPEG
(quality 95) unless `--keep_format`, since TFM's parser decodes JPEG only by default. Files are
shuffled (seeded) and dealt round-robin into `OUT-00000-of-0000N`. Bad input is one line on
stderr and exit code 2, and then no shard is written: every file is read and checked before
the first one, and the shards are renamed into place together.

Segmentation: each image `IMAGES/<stem>.<ext>` needs the mask `MASKS/<stem>.png`, a 1-channel
PNG of class ids 0..C-1 (255 = ignore) of the image's size. Records hold TFM's segmentation
features: `image/encoded`, `image/format`, `image/height`, `image/width`, `image/channels`,
`image/filename`, `image/segmentation/class/encoded` (the mask as PNG) and
`image/segmentation/class/format`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
from typing import List, Sequence, Tuple

from lite_launcher.common import atomic_write

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
USER_ERROR_EXIT_CODE = 2
IGNORE_LABEL = 255
MASK_KEY = "image/segmentation/class/encoded"


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


def _bytes(value):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def _decode(path: str, what: str, channels: int):
    """(file bytes, decoded uint8 array [h, w, c]); InputError naming `path` if unreadable."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data, tf.io.decode_image(data, channels=channels, expand_animations=False)
    except (tf.errors.InvalidArgumentError, ValueError) as e:
        raise InputError(f"{path!r} is not a readable {what}: "
                         f"{' '.join(str(e).split())[:120]}") from e


def _image_features(path: str, keep_format: bool):
    """The `image/*` features of one image file, and its decoded pixels."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    data, image = _decode(path, "image", channels=3)
    is_jpeg = data[:3] == b"\xff\xd8\xff"
    image_format = "jpeg" if is_jpeg else os.path.splitext(path)[1].lstrip(".").lower()
    if not is_jpeg and not keep_format:
        data = tf.io.encode_jpeg(image, quality=95).numpy()
        image_format = "jpeg"
    return {
        "image/encoded": _bytes(data),
        "image/format": _bytes(image_format.encode()),
        "image/height": _int(int(image.shape[0])),
        "image/width": _int(int(image.shape[1])),
        "image/channels": _int(3),
        "image/filename": _bytes(os.path.basename(path).encode()),
    }, image


def _example(features):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.train.Example(features=tf.train.Features(feature=features))


def _classification_example(path: str, label: int, class_name: str, keep_format: bool):
    features, _ = _image_features(path, keep_format)
    features["image/class/label"] = _int(label)
    features["image/class/text"] = _bytes(class_name.encode())
    return _example(features)


def list_image_mask_pairs(image_dir: str, mask_dir: str) -> List[Tuple[str, str]]:
    """[(image path, mask path)] of `image_dir`, sorted: each image's mask is
    `mask_dir/<image stem>.png`."""
    for flag, folder in (("--image_dir", image_dir), ("--mask_dir", mask_dir)):
        if not os.path.isdir(folder):
            raise InputError(f"{flag} {folder!r} is not a directory.")
    images = sorted(f for f in os.listdir(image_dir) if f.lower().endswith(IMAGE_EXTENSIONS))
    if not images:
        raise InputError(f"--image_dir {image_dir!r} holds no images "
                         f"({', '.join(IMAGE_EXTENSIONS)}).")
    stems = {}
    for name in images:
        stem = os.path.splitext(name)[0]
        if stem in stems:
            raise InputError(f"images {stems[stem]!r} and {name!r} in {image_dir!r} share the "
                             f"name {stem!r}, so they would share one mask; rename one.")
        stems[stem] = name
    pairs = []
    for name in images:
        mask = os.path.join(mask_dir, os.path.splitext(name)[0] + ".png")
        if not os.path.isfile(mask):
            raise InputError(f"image {os.path.join(image_dir, name)!r} has no mask: expected "
                             f"{mask!r} (a 1-channel PNG of class ids).")
        pairs.append((os.path.join(image_dir, name), mask))
    return pairs


def _segmentation_example(image_path: str, mask_path: str, num_classes: int,
                          keep_format: bool):
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    features, image = _image_features(image_path, keep_format)
    data, mask = _decode(mask_path, "mask", channels=0)
    if data[:4] != b"\x89PNG":
        raise InputError(f"mask {mask_path!r} is not a PNG; masks must be lossless 1-channel "
                         f"PNGs of class ids.")
    if mask.shape[-1] != 1:
        raise InputError(f"mask {mask_path!r} has {mask.shape[-1]} channels; masks must be "
                         f"1-channel PNGs of class ids (a paletted or colour PNG decodes as "
                         f"colours: save the class-id index image instead).")
    if mask.shape[:2] != image.shape[:2]:
        raise InputError(f"mask {mask_path!r} is {mask.shape[0]}x{mask.shape[1]} but its image "
                         f"{image_path!r} is {image.shape[0]}x{image.shape[1]}; a mask must "
                         f"have its image's size.")
    ids = np.unique(mask.numpy())
    bad = ids[(ids >= num_classes) & (ids != IGNORE_LABEL)]
    if bad.size:
        raise InputError(f"mask {mask_path!r} holds class id {int(bad[0])}, but --num_classes "
                         f"is {num_classes} (ids 0..{num_classes - 1}, {IGNORE_LABEL} = "
                         f"ignore); fix the mask or raise --num_classes.")
    features[MASK_KEY] = _bytes(tf.io.encode_png(tf.cast(mask, tf.uint8)).numpy())
    features["image/segmentation/class/format"] = _bytes(b"png")
    return _example(features)


def _check_output(output_prefix: str, num_shards: int, num_items: int, what: str):
    """--num_shards (already >= 1) fits the items, and the output directory exists."""
    if num_shards > num_items:
        raise InputError(f"--num_shards ({num_shards}) is more than the {num_items} {what}.")
    parent = os.path.dirname(os.path.abspath(output_prefix))
    if not os.path.isdir(parent):
        raise InputError(f"--output_prefix {output_prefix!r}: directory {parent!r} does not "
                         f"exist.")


def _write_shards(output_prefix: str, num_shards: int, examples) -> List[str]:
    """Deals `examples` round-robin into the shards; all shards appear, or none."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    paths = [f"{output_prefix}-{k:05d}-of-{num_shards:05d}" for k in range(num_shards)]
    with contextlib.ExitStack() as stack:
        # Every shard is renamed into place only after all were written.
        temporaries = [stack.enter_context(atomic_write.atomic_path(p)) for p in paths]
        for k, temporary in enumerate(temporaries):
            with tf.io.TFRecordWriter(temporary) as writer:
                for example in examples[k::num_shards]:
                    writer.write(example.SerializeToString())
    return paths


def make_tfrecords(image_dir: str, output_prefix: str, num_shards: int = 1,
                   keep_format: bool = False, seed: int = 0) -> List[str]:
    """Writes classification shards (and `output_prefix-labels.txt`); returns the shard paths."""
    if num_shards < 1:
        raise InputError(f"--num_shards ({num_shards}) must be >= 1.")
    classes, items = list_images(image_dir)
    _check_output(output_prefix, num_shards, len(items), "images")
    random.Random(seed).shuffle(items)
    examples = [_classification_example(path, label, classes[label], keep_format)
                for path, label in items]
    paths = _write_shards(output_prefix, num_shards, examples)
    atomic_write.write_text(f"{output_prefix}-labels.txt",
                            "".join(f"{name}\n" for name in classes))
    return paths


def make_segmentation_tfrecords(image_dir: str, mask_dir: str, num_classes: int,
                                output_prefix: str, num_shards: int = 1,
                                keep_format: bool = False, seed: int = 0) -> List[str]:
    """Writes segmentation shards of `image_dir`'s images and `mask_dir`'s masks; returns the
    shard paths."""
    if num_classes is None or num_classes < 1:
        raise InputError(f"--num_classes ({num_classes}) must be >= 1 with --mask_dir: mask "
                         f"ids are checked against it.")
    if num_classes > IGNORE_LABEL:
        raise InputError(f"--num_classes ({num_classes}) must be at most {IGNORE_LABEL}: id "
                         f"{IGNORE_LABEL} marks ignored pixels.")
    if num_shards < 1:
        raise InputError(f"--num_shards ({num_shards}) must be >= 1.")
    pairs = list_image_mask_pairs(image_dir, mask_dir)
    _check_output(output_prefix, num_shards, len(pairs), "images")
    random.Random(seed).shuffle(pairs)
    examples = [_segmentation_example(image, mask, num_classes, keep_format)
                for image, mask in pairs]
    return _write_shards(output_prefix, num_shards, examples)


def main(argv: Sequence[str] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lite_launcher.vision.data.make_tfrecords",
        description="Folder of images (one sub-folder per class) -> TFRecord shards in "
                    "TFM's image classification format; with --mask_dir, images + masks -> "
                    "shards in TFM's semantic segmentation format.")
    parser.add_argument("--image_dir", required=True,
                        help="One sub-folder of images per class; with --mask_dir, the images.")
    parser.add_argument("--mask_dir", default=None,
                        help="Segmentation: MASK_DIR/<image stem>.png per image, a 1-channel "
                             "PNG of class ids (255 = ignore).")
    parser.add_argument("--num_classes", type=int, default=None,
                        help="With --mask_dir: mask ids must be < NUM_CLASSES (or 255).")
    parser.add_argument("--output_prefix", required=True,
                        help="Shards are written as PREFIX-00000-of-0000N.")
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--keep_format", action="store_true",
                        help="Store PNG/BMP/GIF bytes as they are (default: re-encode as JPEG).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the file shuffle.")
    args = parser.parse_args(argv)
    try:
        if args.mask_dir is not None:
            paths = make_segmentation_tfrecords(
                args.image_dir, args.mask_dir, args.num_classes, args.output_prefix,
                args.num_shards, args.keep_format, args.seed)
        elif args.num_classes is not None:
            raise InputError("--num_classes is for segmentation (--mask_dir); classification "
                             "counts the class sub-folders.")
        else:
            paths = make_tfrecords(args.image_dir, args.output_prefix, args.num_shards,
                                   args.keep_format, args.seed)
    except InputError as e:
        sys.stderr.write(f"make_tfrecords: error: {e}\n")
        return USER_ERROR_EXIT_CODE
    print(f"Wrote {len(paths)} shard(s): {paths[0]}" + (" ..." if len(paths) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
