"""Helpers the detection parsers share (TFM's official/vision/dataloaders/utils.py)."""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from lite_launcher.vision.ops.preprocess_ops import clip_or_pad_to_fixed_size

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
