"""Mask R-CNN / Faster R-CNN input: TFM's two-stage parser (official/vision/dataloaders/
maskrcnn_input.py, same arguments, defaults and outputs).

Records are decoded by `tf_example_decoder` (with `include_mask`, `groundtruth_instance_masks`
[N, h, w]). The parser returns `(image, labels)`:

- training: crowd annotations dropped (`skip_crowd_during_training`), optional AutoAugment /
  RandAugment (`aug_type`), mean/std normalisation, random horizontal and vertical flips of
  image, boxes and masks together, scale jitter with `resize_and_crop_image` (padded to a
  multiple of 2**max_level), empty boxes dropped, RPN targets per level from
  `anchor.RpnAnchorLabeler` (sampled: 1 positive, 0 negative, -1 ignored). `labels`:
  `anchor_boxes`, `image_info`, `rpn_score_targets`, `rpn_box_targets` (dicts by `str(level)`),
  `gt_boxes` [max_num_instances, 4] (pixels of the parsed image, padded with -1),
  `gt_classes` [max_num_instances] (-1), and with masks `gt_outer_boxes` (the boxes grown by
  `outer_boxes_scale`, -1) and `gt_masks` [max_num_instances, mask_crop_size,
  mask_crop_size] (each mask bilinearly cropped to its outer box, -1 padding).
- evaluation: the image without augmentation, `image_info`, `anchor_boxes`, and
  `groundtruths` for the COCO evaluator (`source_id`, `height`, `width`, `num_detections`,
  `boxes` in original-image pixels, `classes`, `areas`, `is_crowds`, padded to
  `max_num_instances`; with masks `masks`, each cropped to its box at mask_crop_size).

Lite's addition: with `num_classes`, a class id outside [0, num_classes) fails the pipeline at
its record (one line naming its source_id, exit code 2 from `lite-train`).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.dataloaders import utils
from lite_launcher.vision.ops import anchor, box_ops
from lite_launcher.vision.ops.preprocess_ops import (
    IMAGE_DTYPES, clip_or_pad_to_fixed_size, compute_padded_size, normalize_image,
    random_flip_with_boxes_and_masks)
from lite_launcher.vision.dataloaders import parser


def crop_and_resize_masks(masks, normalized_boxes, crop_size: int):
    """Masks [N, h, w] each cropped to its box [N, 4] (yxyx in [0, 1] of the mask) and
    bilinearly resized to [crop_size, crop_size] (`tf.image.crop_and_resize`)."""
    cropped = tf.image.crop_and_resize(
        masks[..., None], normalized_boxes,
        box_indices=tf.range(tf.shape(masks)[0], dtype=tf.int32),
        crop_size=[crop_size, crop_size], method="bilinear")
    return cropped[..., 0]


class Parser(parser.Parser):
    """Turns decoded detection records into `(image, labels)` for Mask R-CNN (see the module
    docstring), with TFM's arguments and defaults.

    Args:
      output_size: [height, width] the image is resized into, then zero-padded to a
        multiple of 2**max_level.
      min_level, max_level, num_scales, aspect_ratios, anchor_size: the anchors.
      rpn_match_threshold, rpn_unmatched_threshold: IoU at or above which an anchor is an
        RPN positive, below which a negative (in between: ignored).
      rpn_batch_size_per_im, rpn_fg_fraction: anchors sampled per image, and the most of
        them that may be positive.
      aug_rand_hflip, aug_rand_vflip: random horizontal / vertical flips in training.
      aug_scale_min, aug_scale_max: the scale jitter range of training.
      aug_type: None, or an `Augmentation` config (`randaug` / `autoaug`) applied to the
        uint8 image before normalisation.
      skip_crowd_during_training: drop `is_crowd` annotations from the training targets.
      max_num_instances: instances the ground truths are padded (or cut) to.
      include_mask: produce mask targets (the decoder must decode masks).
      outer_boxes_scale: masks are cropped to the boxes grown by this factor (>= 1).
      mask_crop_size: side of the cropped masks.
      dtype: the image dtype ('float32', 'float16', 'bfloat16').
      num_classes: if set, class ids must lie in [0, num_classes) (checked per record).
      rpn_seed: seed of the RPN anchor sampling (None: unseeded, as TFM).
    """

    def __init__(self, output_size, min_level: Optional[int], max_level: int,
                 num_scales: Optional[int], aspect_ratios, anchor_size: Optional[float],
                 rpn_match_threshold: float = 0.7, rpn_unmatched_threshold: float = 0.3,
                 rpn_batch_size_per_im: int = 256, rpn_fg_fraction: float = 0.5,
                 aug_rand_hflip: bool = False, aug_rand_vflip: bool = False,
                 aug_scale_min: float = 1.0, aug_scale_max: float = 1.0, aug_type=None,
                 skip_crowd_during_training: bool = True, max_num_instances: int = 100,
                 include_mask: bool = False, outer_boxes_scale: float = 1.0,
                 mask_crop_size: int = 112, dtype: str = "float32",
                 num_classes: Optional[int] = None, rpn_seed: Optional[int] = None):
        if dtype not in IMAGE_DTYPES:
            raise ConfigError(f"data dtype {dtype!r} is not one of "
                              f"{', '.join(IMAGE_DTYPES)}.")
        if len(output_size) != 2 or min(output_size) < 1:
            raise ConfigError(f"model.input_size {list(output_size)} must start with a "
                              f"positive height and width, e.g. [1024, 1024, 3].")
        if outer_boxes_scale < 1.0:
            raise ConfigError(f"model.outer_boxes_scale ({outer_boxes_scale}) must be >= 1.0.")
        self._output_size = [int(s) for s in output_size]
        self._padded_size = compute_padded_size(self._output_size, 2 ** max_level)
        self._anchor_generator = anchor.build_anchor_generator(
            min_level=min_level, max_level=max_level, num_scales=num_scales,
            aspect_ratios=aspect_ratios, anchor_size=anchor_size)
        self._rpn_labeler = anchor.RpnAnchorLabeler(
            match_threshold=rpn_match_threshold, unmatched_threshold=rpn_unmatched_threshold,
            rpn_batch_size_per_im=rpn_batch_size_per_im, rpn_fg_fraction=rpn_fg_fraction,
            seed=rpn_seed)
        self._aug_rand_hflip = aug_rand_hflip
        self._aug_rand_vflip = aug_rand_vflip
        self._aug_scale_min = aug_scale_min
        self._aug_scale_max = aug_scale_max
        self._augmenter = utils.build_augmenter(aug_type)
        self._skip_crowd_during_training = skip_crowd_during_training
        self._max_num_instances = max_num_instances
        self._include_mask = include_mask
        self._outer_boxes_scale = outer_boxes_scale
        self._mask_crop_size = mask_crop_size
        self._dtype = IMAGE_DTYPES[dtype]
        self._num_classes = num_classes

    @property
    def padded_size(self):
        """[height, width] of every parsed image."""
        return list(self._padded_size)

    def _pad(self, tensor):
        return clip_or_pad_to_fixed_size(tensor, self._max_num_instances, -1)

    def _flip(self, image, boxes, masks):
        """Random horizontal, then vertical flips (each only when enabled)."""
        if self._aug_rand_hflip:
            image, boxes, masks = random_flip_with_boxes_and_masks(image, boxes, masks)
        if self._aug_rand_vflip:
            image, boxes, masks = random_flip_with_boxes_and_masks(image, boxes, masks,
                                                                   vertical=True)
        return image, boxes, masks

    def _mask_targets(self, boxes, masks, image_info, image_shape):
        """(outer boxes in the parsed image's pixels, masks cropped to them): the outer boxes
        are taken back to the original image, where the masks live, to crop."""
        outer_boxes = box_ops.compute_outer_boxes(boxes, image_info[1, :],
                                                  self._outer_boxes_scale)
        scale = tf.tile(image_info[2:3, :], [1, 2])
        offset = tf.tile(image_info[3:4, :], [1, 2])
        original_boxes = box_ops.normalize_boxes((outer_boxes + offset) / scale, image_shape)
        return outer_boxes, crop_and_resize_masks(masks, original_boxes, self._mask_crop_size)

    def parse_train_data(self, data):
        """(augmented training image, labels)."""
        classes = utils.checked_classes(data, self._num_classes)
        boxes = data["groundtruth_boxes"]
        masks = data["groundtruth_instance_masks"] if self._include_mask else None
        if self._skip_crowd_during_training:
            keep = tf.where(tf.logical_not(data["groundtruth_is_crowd"]))[:, 0]
            classes, boxes = tf.gather(classes, keep), tf.gather(boxes, keep)
            if masks is not None:
                masks = tf.gather(masks, keep)
        image = data["image"]
        if self._augmenter is not None:
            image = self._augmenter.distort(image)
        image_shape = tf.shape(image)[0:2]
        image, boxes, masks = self._flip(normalize_image(image), boxes, masks)
        boxes = box_ops.denormalize_boxes(boxes, image_shape)
        image, boxes, image_info = utils.resize_image_and_boxes(
            image, boxes, self._output_size, self._padded_size, self._aug_scale_min,
            self._aug_scale_max)
        keep = box_ops.get_non_empty_box_indices(boxes)
        boxes, classes = tf.gather(boxes, keep), tf.gather(classes, keep)
        anchor_boxes = self._anchor_generator.constant(self._padded_size)
        rpn_score_targets, rpn_box_targets = self._rpn_labeler.label_anchors(
            anchor_boxes, boxes, classes[:, None])
        labels = {
            "anchor_boxes": anchor_boxes,
            "image_info": image_info,
            "rpn_score_targets": rpn_score_targets,
            "rpn_box_targets": rpn_box_targets,
            "gt_boxes": self._pad(boxes),
            "gt_classes": self._pad(classes),
        }
        if masks is not None:
            outer_boxes, masks = self._mask_targets(boxes, tf.gather(masks, keep), image_info,
                                                    image_shape)
            labels["gt_outer_boxes"] = self._pad(outer_boxes)
            labels["gt_masks"] = self._pad(masks)
        return tf.cast(image, self._dtype), labels

    def parse_eval_data(self, data):
        """(evaluation image, labels with `groundtruths` for the COCO evaluator)."""
        classes = utils.checked_classes(data, self._num_classes)
        image = data["image"]
        image_shape = tf.shape(image)[0:2]
        boxes = box_ops.denormalize_boxes(data["groundtruth_boxes"], image_shape)
        # No jitter in evaluation, whatever the training range.
        image, _, image_info = utils.resize_image_and_boxes(
            normalize_image(image), boxes, self._output_size, self._padded_size)
        groundtruths = utils.eval_groundtruths(data, classes, boxes, self._max_num_instances)
        if self._include_mask:
            groundtruths["masks"] = self._pad(crop_and_resize_masks(
                data["groundtruth_instance_masks"], data["groundtruth_boxes"],
                self._mask_crop_size))
        labels = {
            "image_info": image_info,
            "anchor_boxes": self._anchor_generator.constant(self._padded_size),
            "groundtruths": groundtruths,
        }
        return tf.cast(image, self._dtype), labels

