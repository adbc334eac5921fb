"""TFM's `modeling/layers/mask_sampler.py` (`MaskSampler`): the mask head's training targets
from the sampled ROIs."""

import tensorflow as tf

from lite_launcher.vision.modeling.layers.nn_layers import Float32Layer
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import spatial_transform_ops


@register_serializable
class MaskSampler(Float32Layer):
    """Takes the first `num_sampled_masks` foreground ROIs of each image and crops their ground
    truths' masks to them.

    Called as `layer(candidate_rois, candidate_gt_boxes, candidate_gt_classes,
    candidate_gt_indices, gt_masks)` with the ROI sampler's outputs ([B, N, 4], [B, N, 4],
    [B, N] with 0 = background, [B, N] with -1 = background) and gt_masks [B, M, H, W].
    Returns `(foreground_rois [B, K, 4], foreground_classes [B, K], cropped_masks
    [B, K, mask_target_size, mask_target_size])`, K = num_sampled_masks. Foreground ROIs come
    in index order; when an image has fewer than K, the rest are its first background ROIs
    (class 0), cropped from mask 0 (TFM's top-k fill).
    """

    def __init__(self, mask_target_size, num_sampled_masks, **kwargs):
        super().__init__(**kwargs)
        self._config_dict = {"mask_target_size": mask_target_size,
                             "num_sampled_masks": num_sampled_masks}

    def call(self, candidate_rois, candidate_gt_boxes, candidate_gt_classes,
             candidate_gt_indices, gt_masks):
        foreground = tf.cast(candidate_gt_classes > 0, tf.int32)
        chosen = tf.nn.top_k(foreground, k=self._config_dict["num_sampled_masks"]).indices
        pick = lambda t: tf.gather(t, chosen, batch_dims=1)
        rois, boxes, classes, gt_indices = (pick(candidate_rois), pick(candidate_gt_boxes),
                                            pick(candidate_gt_classes),
                                            pick(candidate_gt_indices))
        masks = tf.gather(gt_masks, tf.maximum(gt_indices, 0), batch_dims=1)
        cropped = spatial_transform_ops.crop_mask_in_target_box(
            masks, boxes, rois, self._config_dict["mask_target_size"], sample_offset=0.5)
        return rois, classes, cropped
