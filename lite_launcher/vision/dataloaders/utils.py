"""Helpers the detection parsers share (TFM's official/vision/dataloaders/utils.py)."""

from __future__ import annotations

from typing import Dict, Optional

import tensorflow as tf

from lite_launcher.common.errors import BAD_RECORD_MARKER
from lite_launcher.vision.ops.preprocess_ops import (
    clip_or_pad_to_fixed_size, resize_and_crop_boxes, resize_and_crop_image)

# The value each ground-truth field is padded with up to `max_num_instances` (TFM's).
GROUNDTRUTH_PADDING = {"boxes": -1, "is_crowds": 0, "areas": -1, "classes": -1}


def process_source_id(source_id):
    """A record's `source_id` as an int64 scalar: a decimal string is parsed, an empty one
    becomes -1 (TFM's convention, so COCO image ids stay integers)."""
    if source_id.dtype == tf.string:
        # An empty string would not parse: give it the -1 it ends up as.
        source_id = tf.strings.to_number(
            tf.where(tf.strings.length(source_id) > 0, source_id, "-1"), tf.int64)
    return tf.cast(source_id, tf.int64)


def pad_groundtruths_to_fixed_size(groundtruths: Dict[str, tf.Tensor],
                                   size: int) -> Dict[str, tf.Tensor]:
    """`groundtruths` with `boxes`, `is_crowds`, `areas`, `classes` (and each of
    `attributes`) cut or padded to `size` instances (see `GROUNDTRUTH_PADDING`; attributes
    with -1), so that images with different counts batch together."""
    padded = dict(groundtruths)
    for key, value in GROUNDTRUTH_PADDING.items():
        padded[key] = clip_or_pad_to_fixed_size(groundtruths[key], size, value)
    if "attributes" in groundtruths:
        padded["attributes"] = {name: clip_or_pad_to_fixed_size(value, size, -1)
                                for name, value in groundtruths["attributes"].items()}
    return padded


def eval_groundtruths(data, classes, boxes, size: int, **fields) -> Dict[str, tf.Tensor]:
    """The COCO evaluator's ground truths of a decoded record, padded to `size` instances:
    `source_id` (int64), `height`, `width`, `num_detections` (the count, a scalar),
    `boxes` (original-image pixels), `classes`, `areas`, `is_crowds`; `fields` are added or
    override these."""
    groundtruths = {
        "source_id": process_source_id(data["source_id"]),
        "height": data["height"],
        "width": data["width"],
        "num_detections": tf.shape(classes)[0],
        "boxes": boxes,
        "classes": classes,
        "areas": data["groundtruth_area"],
        "is_crowds": tf.cast(data["groundtruth_is_crowd"], tf.int32),
    }
    groundtruths.update(fields)
    return pad_groundtruths_to_fixed_size(groundtruths, size)


def record_assert(condition, data, summarize: Optional[int] = None):
    """A check of one input record: the `Assert` op itself, failing with `data` printed (as
    `tf.debugging.Assert`, e.g. `errors.BAD_RECORD_MARKER` first) where `condition` is false.

    `tf.debugging.Assert` wraps the op in a `tf.cond` (two branch functions) unless its data
    are all strings and int32s; in a tf.data map every such function is graph-optimised again
    at each iterator creation, i.e. at every evaluation. The data are computed either way."""
    return tf.raw_ops.Assert(condition=condition, data=data, summarize=summarize or 3)


def checked_classes(data, num_classes: Optional[int]):
    """`data['groundtruth_classes']`; with `num_classes`, the record's pipeline fails (one line
    naming its source_id, `BAD_RECORD_MARKER`) when a class id lies outside [0, num_classes)."""
    classes = data["groundtruth_classes"]
    if num_classes is None:
        return classes
    bad = (classes < 0) | (classes >= num_classes)
    check = record_assert(
        tf.logical_not(tf.reduce_any(bad)),
        [BAD_RECORD_MARKER, "record", data["source_id"], "has class ids",
         tf.boolean_mask(classes, bad), "in image/object/class/label, outside 0 ..",
         num_classes - 1, "(task.model.num_classes", num_classes,
         "): raise num_classes or fix the labels."],
        summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(classes)


def resize_image_and_boxes(image, boxes, output_size, padded_size, aug_scale_min=1.0,
                           aug_scale_max=1.0, keep_aspect_ratio=True):
    """(image resized, cropped and padded to `padded_size` (static shape set), pixel `boxes`
    following it, image_info): `resize_and_crop_image` and `resize_and_crop_boxes` together."""
    image, image_info = resize_and_crop_image(
        image, output_size, padded_size, aug_scale_min=aug_scale_min,
        aug_scale_max=aug_scale_max, keep_aspect_ratio=keep_aspect_ratio)
    image = tf.ensure_shape(image, list(padded_size) + [3])
    boxes = resize_and_crop_boxes(boxes, image_info[2, :], image_info[1, :], image_info[3, :])
    return image, boxes, image_info


def build_augmenter(aug_type, for_detection: bool = False):
    """The `augment.RandAugment` / `AutoAugment` an `aug_type` config names (None when unset).

    `for_detection`: RandAugment's geometric ops are TFM's box-aware ones
    (`RandAugment.build_for_detection`, as TFM's RetinaNet parser builds it), for
    `distort_with_boxes`; AutoAugment is the same either way (its policy names its ops).
    """
    if aug_type is None or aug_type.type is None:
        return None
    from lite_launcher.vision.ops import augment  # pylint: disable=import-outside-toplevel
    if aug_type.type == "randaug":
        c = aug_type.randaug
        build = augment.RandAugment.build_for_detection if for_detection else augment.RandAugment
        return build(
            num_layers=c.num_layers, magnitude=c.magnitude, cutout_const=c.cutout_const,
            translate_const=c.translate_const, magnitude_std=c.magnitude_std,
            prob_to_apply=c.prob_to_apply, exclude_ops=c.exclude_ops)
    if aug_type.type == "autoaug":
        c = aug_type.autoaug
        return augment.AutoAugment(augmentation_name=c.augmentation_name,
                                   cutout_const=c.cutout_const,
                                   translate_const=c.translate_const)
    raise ValueError(f"Augmentation {aug_type.type!r} is not 'randaug' or 'autoaug'.")
