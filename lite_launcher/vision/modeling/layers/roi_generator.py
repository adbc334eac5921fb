"""TFM's `modeling/layers/roi_generator.py` (`MultilevelROIGenerator`): the region proposal
network's outputs -> the second stage's proposals."""

import tensorflow as tf

from lite_launcher.vision.modeling.layers.nn_layers import Float32Layer
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import box_ops
from lite_launcher.vision.ops import nms


def _propose_level(boxes, scores, anchors, image_shape, pre_nms_top_k, pre_nms_score_threshold,
                   pre_nms_min_size_threshold, nms_iou_threshold, num_proposals,
                   use_batched_nms):
    """One level: boxes [B, n, 4] (encoded), scores [B, n] (logits), anchors [B, n, 4],
    image_shape [B, 1, 2] -> (rois [B, k, 4], scores [B, k]), k = min(n, num_proposals)."""
    num_boxes = scores.shape[1]
    scores = tf.sigmoid(scores)
    boxes = box_ops.clip_boxes(box_ops.decode_boxes(boxes, anchors), image_shape)
    if pre_nms_min_size_threshold > 0.0:
        boxes, scores = box_ops.filter_boxes(boxes, scores, image_shape,
                                             pre_nms_min_size_threshold)
    top_k = min(num_boxes, pre_nms_top_k)
    keep = min(num_boxes, num_proposals)
    if nms_iou_threshold <= 0.0:
        return box_ops.top_k_boxes(boxes, scores, k=keep)
    if use_batched_nms:
        rois, roi_scores, _, _ = tf.image.combined_non_max_suppression(
            boxes[:, :, None], scores[..., None], max_output_size_per_class=top_k,
            max_total_size=keep, iou_threshold=nms_iou_threshold,
            score_threshold=pre_nms_score_threshold, pad_per_class=False, clip_boxes=False)
        return rois, roi_scores
    if pre_nms_score_threshold > 0.0:
        boxes, scores = box_ops.filter_boxes_by_scores(boxes, scores, pre_nms_score_threshold)
    boxes, scores = box_ops.top_k_boxes(boxes, scores, k=top_k)
    roi_scores, rois = nms.sorted_non_max_suppression_padded(scores, boxes, keep,
                                                             nms_iou_threshold)
    return rois, roi_scores


def multilevel_propose_rois(raw_boxes, raw_scores, anchor_boxes, image_shape, pre_nms_top_k=2000,
                            pre_nms_score_threshold=0.0, pre_nms_min_size_threshold=0.0,
                            nms_iou_threshold=0.7, num_proposals=1000, use_batched_nms=False):
    """Proposals from every FPN level, as TFM's `_multilevel_propose_rois` (decoding,
    clipping and sigmoid scores on).

    Per level: sigmoid scores, decode against the anchors, clip to `image_shape`, drop boxes
    with a side <= `pre_nms_min_size_threshold` or a centre off the image (when > 0), keep the
    best `pre_nms_top_k` (after zeroing scores <= `pre_nms_score_threshold`), NMS at
    `nms_iou_threshold` down to `num_proposals` (no NMS when the threshold is 0). Then the best
    `num_proposals` over all levels.

    Args:
      raw_boxes: dict `str(level)` -> [B, h, w, A * 4] box regressions.
      raw_scores: dict `str(level)` -> [B, h, w, A] objectness logits.
      anchor_boxes: dict `str(level)` -> the level's anchors, [B, h, w, A * 4] or
        [B, h * w * A, 4].
      image_shape: [B, 2] (height, width) of the scaled image.

    Returns:
      `(rois [B, K, 4], roi_scores [B, K])`, K = min(num_proposals, all levels' proposals).
    """
    image_shape = tf.expand_dims(image_shape, axis=1)
    rois, roi_scores = [], []
    for level in sorted(raw_scores):
        _, height, width, anchors_per_cell = raw_scores[level].shape.as_list()
        num_boxes = height * width * anchors_per_cell
        scores = tf.reshape(raw_scores[level], [-1, num_boxes])
        level_rois, level_scores = _propose_level(
            tf.reshape(raw_boxes[level], [-1, num_boxes, 4]), scores,
            tf.cast(tf.reshape(anchor_boxes[level], [-1, num_boxes, 4]), scores.dtype),
            image_shape, pre_nms_top_k, pre_nms_score_threshold, pre_nms_min_size_threshold,
            nms_iou_threshold, num_proposals, use_batched_nms)
        rois.append(level_rois)
        roi_scores.append(level_scores)
    all_rois = tf.concat(rois, axis=1)
    all_scores = tf.concat(roi_scores, axis=1)
    return box_ops.top_k_boxes(all_rois, all_scores, k=min(all_scores.shape[1], num_proposals))


@register_serializable
class MultilevelROIGenerator(Float32Layer):
    """Proposes ROIs for the second stage (see `multilevel_propose_rois`).

    Called as `layer(raw_boxes, raw_scores, anchor_boxes, image_shape, training=None)`; the
    plain settings apply in training, the `test_*` ones otherwise. Returns
    `(roi_boxes [B, K, 4], roi_scores [B, K])` in the scaled image's pixels.
    """

    def __init__(self, pre_nms_top_k=2000, pre_nms_score_threshold=0.0,
                 pre_nms_min_size_threshold=0.0, nms_iou_threshold=0.7, num_proposals=1000,
                 test_pre_nms_top_k=1000, test_pre_nms_score_threshold=0.0,
                 test_pre_nms_min_size_threshold=0.0, test_nms_iou_threshold=0.7,
                 test_num_proposals=1000, use_batched_nms=False, **kwargs):
        super().__init__(**kwargs)
        self._config_dict = {
            "pre_nms_top_k": pre_nms_top_k, "pre_nms_score_threshold": pre_nms_score_threshold,
            "pre_nms_min_size_threshold": pre_nms_min_size_threshold,
            "nms_iou_threshold": nms_iou_threshold, "num_proposals": num_proposals,
            "test_pre_nms_top_k": test_pre_nms_top_k,
            "test_pre_nms_score_threshold": test_pre_nms_score_threshold,
            "test_pre_nms_min_size_threshold": test_pre_nms_min_size_threshold,
            "test_nms_iou_threshold": test_nms_iou_threshold,
            "test_num_proposals": test_num_proposals, "use_batched_nms": use_batched_nms,
        }

    def call(self, raw_boxes, raw_scores, anchor_boxes, image_shape, training=None):
        prefix = "" if training else "test_"
        setting = lambda name: self._config_dict[prefix + name]
        return multilevel_propose_rois(
            raw_boxes, raw_scores, anchor_boxes, image_shape,
            pre_nms_top_k=setting("pre_nms_top_k"),
            pre_nms_score_threshold=setting("pre_nms_score_threshold"),
            pre_nms_min_size_threshold=setting("pre_nms_min_size_threshold"),
            nms_iou_threshold=setting("nms_iou_threshold"),
            num_proposals=setting("num_proposals"),
            use_batched_nms=self._config_dict["use_batched_nms"])
