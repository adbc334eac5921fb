"""Decodes TFM's object-detection `tf.train.Example` records (TFM's official/vision/dataloaders/
tf_example_decoder.TfExampleDecoder: same features, same output dict).

Features read: `image/encoded`, `image/height`, `image/width` (-1 when absent: then the
decoded image's), `image/source_id` (a hash of the image bytes when empty or with
`regenerate_source_id`), `image/object/bbox/{ymin,xmin,ymax,xmax}` (normalised to [0, 1]),
`image/object/class/label`, `image/object/is_crowd`, `image/object/area` (from the boxes
and image size when absent), `image/object/attribute/<name>`, and with `include_mask`
`image/object/mask` (one PNG per object).

Unlike TFM's, the decoder checks each record (unless `validate=False`): the box and label
counts agree, every box lies in [0, 1] with ymin <= ymax and xmin <= xmax, and with masks one
mask of the image's size per object. A bad record fails its input pipeline with an assertion
(`utils.record_assert`) whose message starts with `errors.BAD_RECORD_MARKER` and names the
record's source_id and the field; the driver reports it as one line (exit code 2).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import tensorflow as tf

from lite_launcher.common.errors import BAD_RECORD_MARKER
from lite_launcher.vision.dataloaders import decoder
from lite_launcher.vision.dataloaders.utils import record_assert

_BOX_KEYS = ("ymin", "xmin", "ymax", "xmax")


def _generate_source_id(image_bytes):
    # 22 bits, so that the id survives a float32 round trip (23-bit mantissa), as in TFM.
    return tf.strings.as_string(tf.strings.to_hash_bucket_fast(image_bytes, 2 ** 22 - 1))


class TfExampleDecoder(decoder.Decoder):
    """Parses one serialized detection `tf.train.Example` into TFM's dict of tensors.

    Args:
      include_mask: also decode `image/object/mask` PNGs.
      regenerate_source_id: ignore `image/source_id`; hash the encoded image instead.
      mask_binarize_threshold: if set, masks become 1.0 where above it, else 0.0.
      attribute_names: per-object int64 attributes `image/object/attribute/<name>`, returned
        as `groundtruth_attributes[name]` [N, 1].
      validate: check each record (see the module docstring); False decodes as TFM does.
    """

    def __init__(self, include_mask: bool = False, regenerate_source_id: bool = False,
                 mask_binarize_threshold: Optional[float] = None,
                 attribute_names: Optional[Sequence[str]] = None, validate: bool = True):
        self._include_mask = include_mask
        self._regenerate_source_id = regenerate_source_id
        self._mask_binarize_threshold = mask_binarize_threshold
        self._attribute_names = list(attribute_names or [])
        self._validate = validate
        floats = tf.io.VarLenFeature(tf.float32)
        integers = tf.io.VarLenFeature(tf.int64)
        self._keys_to_features = {
            "image/encoded": tf.io.FixedLenFeature((), tf.string),
            "image/height": tf.io.FixedLenFeature((), tf.int64, -1),
            "image/width": tf.io.FixedLenFeature((), tf.int64, -1),
            "image/object/class/label": integers,
            "image/object/area": floats,
            "image/object/is_crowd": integers,
        }
        self._keys_to_features.update({f"image/object/bbox/{k}": floats for k in _BOX_KEYS})
        self._keys_to_features.update({f"image/object/attribute/{name}": integers
                                       for name in self._attribute_names})
        if include_mask:
            self._keys_to_features["image/object/mask"] = tf.io.VarLenFeature(tf.string)
        if not regenerate_source_id:
            self._keys_to_features["image/source_id"] = tf.io.FixedLenFeature((), tf.string)

    def _decode_classes(self, parsed: Dict[str, tf.Tensor]) -> tf.Tensor:
        """The class ids [N] (subclasses read them from elsewhere, e.g. a label map)."""
        return parsed["image/object/class/label"]

    def _classes_field(self) -> str:
        return "image/object/class/label"

    def _decode_masks(self, parsed, height, width):
        def decode_png(data):
            mask = tf.squeeze(tf.io.decode_png(data, channels=1, dtype=tf.uint8), axis=-1)
            return tf.cast(mask, tf.float32)

        masks = parsed["image/object/mask"]
        return tf.cond(
            tf.size(masks) > 0,
            lambda: tf.map_fn(decode_png, masks, fn_output_signature=tf.TensorSpec(
                [None, None], tf.float32)),
            lambda: tf.zeros([0, height, width], tf.float32))

    def _checks(self, source_id, boxes, classes, parsed, masks, height, width):
        """The record's assertions (empty when not validating)."""
        if not self._validate:
            return []
        num_boxes = tf.shape(boxes)[0]
        coordinates = [parsed[f"image/object/bbox/{k}"] for k in _BOX_KEYS]
        outside = tf.reduce_any((boxes < 0.0) | (boxes > 1.0), axis=-1)
        inverted = (boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])
        checks = [
            record_assert(
                tf.reduce_all([tf.equal(tf.size(c), num_boxes) for c in coordinates]),
                [BAD_RECORD_MARKER, "record", source_id, "has", *[tf.size(c) for c in
                 coordinates], "values in image/object/bbox/ymin, xmin, ymax, xmax: give "
                 "each object all four."]),
            record_assert(
                tf.equal(tf.size(classes), num_boxes),
                [BAD_RECORD_MARKER, "record", source_id, "has", num_boxes, "boxes but",
                 tf.size(classes), "labels in", self._classes_field(),
                 ": give every box its class."]),
            record_assert(
                tf.logical_not(tf.reduce_any(outside)),
                [BAD_RECORD_MARKER, "record", source_id, "has boxes outside [0, 1] in "
                 "image/object/bbox/* (ymin, xmin, ymax, xmax):", tf.boolean_mask(
                     boxes, outside), ": boxes must be normalised by the image size."],
                summarize=8),
            record_assert(
                tf.logical_not(tf.reduce_any(inverted)),
                [BAD_RECORD_MARKER, "record", source_id, "has boxes with ymin > ymax or "
                 "xmin > xmax in image/object/bbox/* (ymin, xmin, ymax, xmax):",
                 tf.boolean_mask(boxes, inverted), ": each min must not exceed its max."],
                summarize=8),
        ]
        if masks is not None:
            checks += [
                record_assert(
                    tf.equal(tf.shape(masks)[0], num_boxes),
                    [BAD_RECORD_MARKER, "record", source_id, "has", num_boxes, "boxes but",
                     tf.shape(masks)[0], "masks in image/object/mask: give every object "
                     "its mask (create_coco_tf_record --include_masks), or train boxes only "
                     "(task.model.include_mask: false)."]),
                record_assert(
                    tf.reduce_all(tf.equal(tf.shape(masks, out_type=tf.int64)[1:],
                                           tf.stack([height, width]))),
                    [BAD_RECORD_MARKER, "record", source_id, "has masks of size",
                     tf.shape(masks)[1:], "in image/object/mask but its image is", height,
                     width]),
            ]
        return checks

    def decode(self, serialized_example) -> Dict[str, tf.Tensor]:
        """The decoded record: `source_id` (string), `image` (uint8 [h, w, 3]), `height`,
        `width` (int64), `groundtruth_classes` (int64 [N]), `groundtruth_is_crowd` (bool
        [N]), `groundtruth_area` (float32 [N]), `groundtruth_boxes` (float32 [N, 4], ymin,
        xmin, ymax, xmax), with masks `groundtruth_instance_masks` (float32 [N, h, w]) and
        `groundtruth_instance_masks_png` (string [N]), with attributes
        `groundtruth_attributes`."""
        parsed = tf.io.parse_single_example(serialized_example, self._keys_to_features)
        for key, value in parsed.items():
            if isinstance(value, tf.SparseTensor):
                parsed[key] = tf.sparse.to_dense(
                    value, default_value="" if value.dtype == tf.string else 0)
        encoded = parsed["image/encoded"]
        if self._regenerate_source_id:
            source_id = _generate_source_id(encoded)
        else:
            given = parsed["image/source_id"]
            source_id = tf.cond(tf.strings.length(given) > 0, lambda: given,
                                lambda: _generate_source_id(encoded))
        image = tf.io.decode_image(encoded, channels=3)
        image.set_shape([None, None, 3])
        image_shape = tf.shape(image, out_type=tf.int64)
        size_unknown = (parsed["image/height"] == -1) | (parsed["image/width"] == -1)
        height = tf.where(size_unknown, image_shape[0], parsed["image/height"])
        width = tf.where(size_unknown, image_shape[1], parsed["image/width"])
        ymin, xmin, ymax, xmax = (parsed[f"image/object/bbox/{k}"] for k in _BOX_KEYS)
        boxes = tf.stack([ymin, xmin, ymax, xmax], axis=-1)
        classes = self._decode_classes(parsed)
        given_area = parsed["image/object/area"]
        # Without areas, TFM takes them from the boxes and the record's own size fields.
        areas = tf.cond(
            tf.shape(given_area)[0] > 0, lambda: given_area,
            lambda: (xmax - xmin) * (ymax - ymin)
            * tf.cast(parsed["image/height"], tf.float32)
            * tf.cast(parsed["image/width"], tf.float32))
        crowd = parsed["image/object/is_crowd"]
        is_crowd = tf.cond(tf.shape(crowd)[0] > 0, lambda: tf.cast(crowd, tf.bool),
                           lambda: tf.zeros_like(classes, dtype=tf.bool))
        masks = self._decode_masks(parsed, height, width) if self._include_mask else None
        with tf.control_dependencies(self._checks(source_id, boxes, classes, parsed, masks,
                                                  height, width)):
            decoded = {
                "source_id": tf.identity(source_id),
                "image": tf.identity(image),
                "height": tf.identity(height),
                "width": tf.identity(width),
                "groundtruth_classes": tf.identity(classes),
                "groundtruth_is_crowd": is_crowd,
                "groundtruth_area": areas,
                "groundtruth_boxes": tf.identity(boxes),
            }
        if self._attribute_names:
            decoded["groundtruth_attributes"] = {
                name: tf.expand_dims(parsed[f"image/object/attribute/{name}"], -1)
                for name in self._attribute_names}
        if self._include_mask:
            if self._mask_binarize_threshold is not None:
                masks = tf.cast(masks > self._mask_binarize_threshold, tf.float32)
            decoded["groundtruth_instance_masks"] = masks
            decoded["groundtruth_instance_masks_png"] = parsed["image/object/mask"]
        return decoded


__all__ = ["TfExampleDecoder"]
