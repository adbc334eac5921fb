"""RetinaNet input: TFM's detection parser (official/vision/dataloaders/retinanet_input.py).

Records are TFM's detection `tf.train.Example`s, decoded by `tf_example_decoder` (or its
label-map variant) into `image`, `groundtruth_boxes` (normalised yxyx), `groundtruth_classes`,
`groundtruth_is_crowd`, `groundtruth_area`, `source_id`, `height`, `width`. The parser returns
`(image, labels)`:

- training: crowd annotations dropped (`skip_crowd_during_training`), optional random JPEG
  quality, mean/std normalisation, random horizontal flip of image and boxes together, scale
  jitter in [aug_scale_min, aug_scale_max) with `resize_and_crop_image` (boxes follow with
  `resize_and_crop_boxes`), zero padding to a multiple of 2**max_level (`pad`), empty boxes
  dropped, and per-level anchor targets from `anchor.AnchorLabeler`.
- evaluation: the same without augmentation, plus `labels['groundtruths']` for the COCO
  evaluator (`source_id`, `height`, `width`, `num_detections`, `image_info`, `boxes` in
  original-image pixels, `classes`, `areas`, `is_crowds`), padded to `max_num_instances`.

`labels`: `cls_targets` / `box_targets` (dicts `str(level)` -> [h_l, w_l, A] / [h_l, w_l, A*4]),
`anchor_boxes` (dict of [h_l, w_l, A*4]), `cls_weights` / `box_weights` ([num_anchors]),
`image_info` ([4, 2]: original size, scaled size, scale, offset).

`aug_type` (training only, on the uint8 image and its normalised boxes, after crowds are
skipped and before normalisation, flip and resize, as TFM): 'autoaug' is `augment.AutoAugment`
(its box-aware policy is 'detection_v0'; the image policies leave the boxes alone), 'randaug'
is `augment.RandAugment.build_for_detection` (rotate, shear and translate move the boxes),
'ssd_random_crop' is TFM's SSD crop. A box the policies push out of the image survives as
TFM's 0.05-wide sliver at the border (`box_augment.keep_min_area`); boxes of zero area are
dropped after the resize. Unlike TFM's parser, RandAugment's `magnitude_std` is honoured.

Lite's addition: with `num_classes`, a class id outside [0, num_classes) fails the pipeline at
its record (one line naming its source_id, exit code 2 from `lite-train`).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.dataloaders import utils
from lite_launcher.vision.ops import anchor, augment, box_ops
from lite_launcher.vision.ops.preprocess_ops import (
    IMAGE_DTYPES, compute_padded_size, normalize_image, random_horizontal_flip_with_boxes,
    random_jpeg_quality)
from lite_launcher.vision.dataloaders import parser


def _make_augmenter(aug_type):
    """The box-aware augmenter of `aug_type` (None when unset): `distort_with_boxes(image,
    boxes)` of AutoAugment, RandAugment (box-aware geometric ops) or SSD's random crop."""
    if aug_type is None or aug_type.type != "ssd_random_crop":
        return utils.build_augmenter(aug_type, for_detection=True)
    crop = aug_type.ssd_random_crop
    return augment.SSDRandomCrop(params=crop.ssd_random_crop_params,
                                 aspect_ratio_range=crop.aspect_ratio_range,
                                 area_range=crop.area_range)


class Parser(parser.Parser):
    """Turns decoded detection records into `(image, labels)` (see the module docstring), with
    TFM's arguments and defaults.

    Args:
      output_size: [height, width] the image is resized into (then padded to a multiple of
        2**max_level when `pad`).
      min_level, max_level, num_scales, aspect_ratios, anchor_size: the anchors
        (`anchor.build_anchor_generator`).
      match_threshold, unmatched_threshold, box_coder_weights: the anchor labeler's.
      aug_type: None, or TFM's `Augmentation` config: `type` None, 'autoaug', 'randaug' or
        'ssd_random_crop' with that type's fields (module docstring).
      aug_rand_hflip: random horizontal flips in training.
      aug_rand_jpeg: None, or an object with `min_quality`, `max_quality`, `prob_to_apply`.
      aug_scale_min, aug_scale_max: the scale jitter range of training.
      skip_crowd_during_training: drop `is_crowd` annotations from the training targets.
      max_num_instances: instances the evaluation ground truths are padded (or cut) to.
      dtype: the image dtype ('float32', 'float16', 'bfloat16').
      pad: pad to a multiple of 2**max_level (FPN needs each level twice the next).
      keep_aspect_ratio: keep the aspect ratio when resizing.
      num_classes: if set, class ids must lie in [0, num_classes) (checked per record).
    """

    def __init__(self, output_size, min_level: Optional[int], max_level: int,
                 num_scales: Optional[int], aspect_ratios, anchor_size: Optional[float],
                 match_threshold: float = 0.5, unmatched_threshold: float = 0.5,
                 box_coder_weights=None, aug_type=None, aug_rand_hflip: bool = False,
                 aug_rand_jpeg=None, aug_scale_min: float = 1.0, aug_scale_max: float = 1.0,
                 skip_crowd_during_training: bool = True, max_num_instances: int = 100,
                 dtype: str = "bfloat16", pad: bool = True, keep_aspect_ratio: bool = True,
                 num_classes: Optional[int] = None):
        self._augmenter = _make_augmenter(aug_type)
        if dtype not in IMAGE_DTYPES:
            raise ConfigError(f"data dtype {dtype!r} is not one of "
                              f"{', '.join(IMAGE_DTYPES)}.")
        if len(output_size) != 2 or min(output_size) < 1:
            raise ConfigError(f"model.input_size {list(output_size)} must start with a "
                              f"positive height and width, e.g. [640, 640, 3].")
        self._output_size = [int(s) for s in output_size]
        self._max_level = max_level
        self._anchor_generator = anchor.build_anchor_generator(
            min_level=min_level, max_level=max_level, num_scales=num_scales,
            aspect_ratios=aspect_ratios, anchor_size=anchor_size)
        self._anchor_labeler = anchor.AnchorLabeler(
            match_threshold=match_threshold, unmatched_threshold=unmatched_threshold,
            box_coder_weights=box_coder_weights)
        self._aug_rand_hflip = aug_rand_hflip
        self._aug_rand_jpeg = aug_rand_jpeg
        self._aug_scale_min = aug_scale_min
        self._aug_scale_max = aug_scale_max
        self._skip_crowd_during_training = skip_crowd_during_training
        self._max_num_instances = max_num_instances
        self._dtype = IMAGE_DTYPES[dtype]
        self._pad = pad
        self._keep_aspect_ratio = keep_aspect_ratio
        self._num_classes = num_classes

    @property
    def padded_size(self):
        """[height, width] of every parsed image."""
        if self._pad:
            return compute_padded_size(self._output_size, 2 ** self._max_level)
        return list(self._output_size)

    def _resize(self, image, boxes):
        """(image resized, cropped and padded to `padded_size`, pixel boxes following it,
        image_info)."""
        return utils.resize_image_and_boxes(
            image, boxes, self._output_size, self.padded_size, self._aug_scale_min,
            self._aug_scale_max, self._keep_aspect_ratio)

    def _anchor_targets(self, boxes, classes):
        """(anchor boxes, and the labeler's cls / box targets and weights) of the pixel boxes
        of one `padded_size` image; empty boxes are dropped first."""
        keep = box_ops.get_non_empty_box_indices(boxes)
        boxes, classes = tf.gather(boxes, keep), tf.gather(classes, keep)
        anchor_boxes = self._anchor_generator.constant(self.padded_size)
        cls_targets, box_targets, _, cls_weights, box_weights = (
            self._anchor_labeler.label_anchors(anchor_boxes, boxes,
                                               tf.expand_dims(classes, axis=1)))
        return {"cls_targets": cls_targets, "box_targets": box_targets,
                "anchor_boxes": anchor_boxes, "cls_weights": cls_weights,
                "box_weights": box_weights}

    def parse_train_data(self, data):
        """(augmented training image, labels)."""
        classes = utils.checked_classes(data, self._num_classes)
        boxes = data["groundtruth_boxes"]
        if self._skip_crowd_during_training:
            keep = tf.where(tf.logical_not(data["groundtruth_is_crowd"]))[:, 0]
            classes, boxes = tf.gather(classes, keep), tf.gather(boxes, keep)
        image = data["image"]
        if self._augmenter is not None:
            image, boxes = self._augmenter.distort_with_boxes(image, boxes)
        if self._aug_rand_jpeg is not None:
            image = random_jpeg_quality(image, self._aug_rand_jpeg.min_quality,
                                        self._aug_rand_jpeg.max_quality,
                                        self._aug_rand_jpeg.prob_to_apply)
        image_shape = tf.shape(image)[0:2]
        image = normalize_image(image)
        if self._aug_rand_hflip:
            image, boxes = random_horizontal_flip_with_boxes(image, boxes)
        boxes = box_ops.denormalize_boxes(boxes, image_shape)
        image, boxes, image_info = self._resize(image, boxes)
        labels = self._anchor_targets(boxes, classes)
        labels["image_info"] = image_info
        return tf.cast(image, self._dtype), labels

    def parse_eval_data(self, data):
        """(evaluation image, labels with `groundtruths` for the COCO evaluator)."""
        classes = utils.checked_classes(data, self._num_classes)
        image = data["image"]
        image_shape = tf.shape(image)[0:2]
        boxes = box_ops.denormalize_boxes(data["groundtruth_boxes"], image_shape)
        # No jitter in evaluation, whatever the training range.
        image, scaled_boxes, image_info = utils.resize_image_and_boxes(
            normalize_image(image), boxes, self._output_size, self.padded_size,
            keep_aspect_ratio=self._keep_aspect_ratio)
        labels = self._anchor_targets(scaled_boxes, classes)
        labels["image_info"] = image_info
        # TFM's RetinaNet parser gives num_detections as a [1] shape, not a scalar.
        labels["groundtruths"] = utils.eval_groundtruths(
            data, classes, boxes, self._max_num_instances, num_detections=tf.shape(classes),
            image_info=image_info)
        return tf.cast(image, self._dtype), labels

