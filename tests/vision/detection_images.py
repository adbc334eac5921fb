"""A synthetic detection data set drawn with NumPy: reddish squares (category 1) and bluish
discs (category 2) on noise, written as PNGs with a COCO instances JSON and turned into TFM's
detection TFRecords by `create_coco_tf_record`."""

import json
import os

import numpy as np
import tensorflow as tf

from lite_launcher.vision.data import create_coco_tf_record

CATEGORIES = [{"id": 1, "name": "square"}, {"id": 2, "name": "disc"}]


def draw(rng, size):
    """(uint8 image [size, size, 3], [(category, [x, y, w, h]), ...]): one or two shapes of
    random colour shade, size and place (not overlapping: a square left, a disc right)."""
    image = (rng.integers(0, 256, (size, size, 3)) * 0.4).astype(np.uint8)
    rows, cols = np.mgrid[:size, :size]
    objects = []
    half = size // 2
    for category, x0, channel in ((1, 0, 0), (2, half, 2)):
        if objects and rng.random() < 0.3:
            continue  # some images hold one shape only
        side = int(rng.integers(size // 5, half - 2))
        top = int(rng.integers(0, size - side))
        left = x0 + int(rng.integers(0, half - side))
        box = (rows >= top) & (rows < top + side) & (cols >= left) & (cols < left + side)
        if category == 2:
            r = side / 2
            box &= (rows + 0.5 - top - r) ** 2 + (cols + 0.5 - left - r) ** 2 <= r * r
        colour = rng.integers(0, 80, 3)
        colour[channel] = rng.integers(200, 256)
        image[box] = colour
        objects.append((category, [float(left), float(top), float(side), float(side)]))
    return image, objects


def write_coco(root, count, seed, size):
    """images/ PNGs and annotations.json (COCO instances) under `root`; returns both paths."""
    rng = np.random.default_rng(seed)
    image_dir = os.path.join(root, "images")
    os.makedirs(image_dir)
    images, annotations = [], []
    for i in range(count):
        image, objects = draw(rng, size)
        name = f"img{i:04d}.png"
        tf.io.write_file(os.path.join(image_dir, name), tf.io.encode_png(image))
        images.append({"id": i + 1, "file_name": name, "height": size, "width": size})
        for category, bbox in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": category, "bbox": bbox,
                                "area": bbox[2] * bbox[3], "iscrowd": 0})
    annotation_file = os.path.join(root, "annotations.json")
    with open(annotation_file, "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": CATEGORIES}, f)
    return image_dir, annotation_file


def detection_tfrecords(root, train_count=32, eval_count=8, size=64):
    """{'train': glob, 'validation': glob, 'validation_json': path}: TFRecords written by
    create_coco_tf_record from drawn images and their COCO JSON."""
    paths = {}
    for split, count, seed in (("train", train_count, 0), ("validation", eval_count, 1)):
        image_dir, annotation_file = write_coco(os.path.join(root, split), count, seed, size)
        prefix = os.path.join(root, split)
        code = create_coco_tf_record.main([
            "--image_dir", image_dir, "--object_annotations_file", annotation_file,
            "--output_file_prefix", prefix, "--num_shards", "2"])
        assert code == 0
        paths[split] = prefix + "-*-of-00002.tfrecord"
        paths[split + "_json"] = annotation_file
    return paths
