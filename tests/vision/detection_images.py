"""A synthetic detection data set drawn with NumPy: reddish squares (category 1) and bluish
discs (category 2) on noise, written as PNGs with a COCO instances JSON and turned into TFM's
detection TFRecords by `create_coco_tf_record` (with `masks`: each object's segmentation as a
COCO polygon, converted `--include_masks`)."""

import json
import os

import numpy as np
import tensorflow as tf
import yaml

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


def polygon(category, bbox, vertices=24):
    """The COCO polygon of a drawn shape: a square's corners, or `vertices` points on a disc's
    circle (inside its box)."""
    left, top, side, _ = bbox
    if category == 1:
        return [left, top, left + side, top, left + side, top + side, left, top + side]
    r = side / 2
    angles = np.arange(vertices) * 2 * np.pi / vertices
    points = np.stack([left + r + r * np.cos(angles), top + r + r * np.sin(angles)], axis=1)
    return [round(float(v), 2) for v in points.reshape(-1)]


def write_coco(root, count, seed, size, masks=False):
    """images/ PNGs and annotations.json (COCO instances; with `masks` each object's
    `segmentation` polygon) under `root`; returns both paths."""
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
            if masks:
                annotations[-1]["segmentation"] = [polygon(category, bbox)]
    annotation_file = os.path.join(root, "annotations.json")
    with open(annotation_file, "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": CATEGORIES}, f)
    return image_dir, annotation_file


def detection_tfrecords(root, train_count=32, eval_count=8, size=64, masks=False):
    """{'train': glob, 'validation': glob, 'validation_json': path}: TFRecords written by
    create_coco_tf_record from drawn images and their COCO JSON (with `masks`: polygons in
    the JSON, PNG masks in the records)."""
    paths = {}
    for split, count, seed in (("train", train_count, 0), ("validation", eval_count, 1)):
        image_dir, annotation_file = write_coco(os.path.join(root, split), count, seed, size,
                                                masks)
        prefix = os.path.join(root, split)
        code = create_coco_tf_record.main([
            "--image_dir", image_dir, "--object_annotations_file", annotation_file,
            "--output_file_prefix", prefix, "--num_shards", "2"]
            + (["--include_masks"] if masks else []))
        assert code == 0
        paths[split] = prefix + "-*-of-00002.tfrecord"
        paths[split + "_json"] = annotation_file
    return paths


def write_override(base, data, root, **changes):
    """`root`/override.yaml: the nested dict `base` with the records and JSON of `data` (from
    `detection_tfrecords`) as task.train_data / validation_data / annotation_file, and each
    `dotted.key=value` of `changes` set; returns its path (for --params_override)."""
    override = json.loads(json.dumps(base))
    task = override.setdefault("task", {})
    task.setdefault("train_data", {})["input_path"] = data["train"]
    task.setdefault("validation_data", {})["input_path"] = data["validation"]
    task["annotation_file"] = data["validation_json"]
    for dotted, value in changes.items():
        node = override
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = os.path.join(root, "override.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(override, f)
    return path


def assert_batch_served_as_alone(serve, batch, inputs, expected_counts):
    """`serve(inputs=batch)` of two images, each image's outputs as `serve(inputs=inputs[i])`
    (a batch of one) gives them, and the two images' detections differ (so serving one
    image's detections for both would fail). `expected_counts`: num_detections of the two."""
    batched = serve(inputs=batch)
    alone = [serve(inputs=single) for single in inputs]
    np.testing.assert_array_equal(batched["num_detections"].numpy(), expected_counts)
    assert not np.allclose(alone[0]["detection_boxes"], alone[1]["detection_boxes"], atol=1e-2)
    for i, single in enumerate(alone):
        for key, value in single.items():
            np.testing.assert_allclose(batched[key][i].numpy(), value[0].numpy(), atol=1e-4,
                                       err_msg=f"{key} of image {i}")
