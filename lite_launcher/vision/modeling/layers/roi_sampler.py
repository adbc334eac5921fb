"""TFM's `modeling/layers/roi_sampler.py` (`ROISampler`): matches proposals to ground truths
and samples the second stage's training ROIs."""

import tensorflow as tf

from lite_launcher.vision.modeling.layers import box_sampler
from lite_launcher.vision.modeling.layers.nn_layers import Float32Layer
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import box_matcher
from lite_launcher.vision.ops import iou_similarity
from lite_launcher.vision.ops import target_gather

# Match indicators: the IoU bands [0, low), [low, high), [high, foreground), [foreground, inf).
INVALID, NEGATIVE, IGNORED, POSITIVE = -3, -1, -2, 1


@register_serializable
class ROISampler(Float32Layer):
    """Assigns each proposal its best-overlapping ground truth and samples ROIs.

    A proposal is positive when its best IoU is >= `foreground_iou_threshold`, negative in
    [`background_iou_low_threshold`, `background_iou_high_threshold`), ignored between the
    two, and background (like a negative, but never sampled) below the low threshold.
    Padding boxes (all coordinates < 0) have IoU -1. With `mix_gt_boxes` the ground truths are
    appended to the proposals first. `skip_subsampling` (Cascade R-CNN's later stages, built
    with `mix_gt_boxes=False` and one IoU threshold for foreground and background) returns
    every proposal with its targets instead of sampling.
    """

    def __init__(self, mix_gt_boxes=True, num_sampled_rois=512, foreground_fraction=0.25,
                 foreground_iou_threshold=0.5, background_iou_high_threshold=0.5,
                 background_iou_low_threshold=0, skip_subsampling=False, **kwargs):
        super().__init__(**kwargs)
        self._config_dict = {
            "mix_gt_boxes": mix_gt_boxes, "num_sampled_rois": num_sampled_rois,
            "foreground_fraction": foreground_fraction,
            "foreground_iou_threshold": foreground_iou_threshold,
            "background_iou_high_threshold": background_iou_high_threshold,
            "background_iou_low_threshold": background_iou_low_threshold,
            "skip_subsampling": skip_subsampling,
        }
        self._sim_calc = iou_similarity.IouSimilarity()
        self._box_matcher = box_matcher.BoxMatcher(
            thresholds=[background_iou_low_threshold, background_iou_high_threshold,
                        foreground_iou_threshold],
            indicators=[INVALID, NEGATIVE, IGNORED, POSITIVE])
        self._target_gather = target_gather.TargetGather()
        self._sampler = box_sampler.BoxSampler(num_sampled_rois, foreground_fraction)

    def call(self, boxes, gt_boxes, gt_classes, gt_outer_boxes=None):
        """Targets of the proposals.

        Args:
          boxes: [B, N, 4] proposals (pixels of the scaled image).
          gt_boxes: [B, M, 4] ground truths, padded with -1 rows.
          gt_classes: [B, M] their classes, padded with -1.
          gt_outer_boxes: optional [B, M, 4] outer boxes, padded with -1 rows.

        Returns:
          `(rois [B, K, 4], gt_boxes [B, K, 4], gt_classes [B, K], gt_indices [B, K])`, with
          the matched outer boxes after gt_boxes when `gt_outer_boxes` is given; K is
          `num_sampled_rois`, or N (+ M with `mix_gt_boxes`) with `skip_subsampling`.
          Background ROIs have a zero box, class 0 and index -1.
        """
        config = self._config_dict
        gt_boxes = tf.cast(gt_boxes, boxes.dtype)
        if config["mix_gt_boxes"]:
            boxes = tf.concat([boxes, gt_boxes], axis=1)
        padding = lambda t: tf.reduce_max(t, axis=-1, keepdims=True) < 0.0
        similarity = self._sim_calc(boxes, gt_boxes, padding(boxes), padding(gt_boxes))
        matched_indices, indicators = self._box_matcher(similarity)
        positive = indicators >= 0
        negative = tf.equal(indicators, NEGATIVE)
        ignored = tf.equal(indicators, IGNORED)
        background = (negative | tf.equal(indicators, INVALID))[..., None]

        def matched(values):
            """values [B, M, D] -> [B, rows, D], zeros on background rows."""
            mask = tf.broadcast_to(background, tf.concat(
                [tf.shape(background)[:2], tf.shape(values)[2:]], axis=0))
            gathered = self._target_gather(values, matched_indices, mask)
            return tf.where(mask, tf.zeros_like(gathered), gathered)

        matched_classes = matched(gt_classes[..., None])
        matched_boxes = matched(gt_boxes)
        matched_outer = None if gt_outer_boxes is None else matched(gt_outer_boxes)
        matched_indices = tf.where(background[..., 0], -tf.ones_like(matched_indices),
                                   matched_indices)
        outer = () if matched_outer is None else (matched_outer,)
        if config["skip_subsampling"]:
            return (boxes, matched_boxes) + outer + (matched_classes[..., 0], matched_indices)

        sampled = self._sampler(positive, negative, ignored)
        pick = lambda t: tf.gather(t, sampled, batch_dims=1)
        outer = () if matched_outer is None else (pick(matched_outer),)
        return ((pick(boxes), pick(matched_boxes)) + outer
                + (pick(matched_classes[..., 0]), pick(matched_indices)))
