"""Mask R-CNN / Faster R-CNN / Cascade R-CNN losses, as TFM's `losses/maskrcnn_losses.py`
(same classes, arguments and numbers) and `tasks/maskrcnn.py` `build_losses`
(`maskrcnn_losses`, the function the task calls).

Normalisations, TFM's:
- RPN score: sigmoid cross-entropy summed over the sampled anchors (targets 1 / 0; -1 is
  ignored), divided by batch size x `rpn_batch_size_per_im` (the task passes the number of
  sampled ROIs per image there, as TFM's does).
- RPN box: Huber summed over the anchors with a non-zero target, divided by (their
  coordinate count, averaged over replicas, + 0.01).
- Fast R-CNN class: softmax (or sigmoid) cross-entropy per ROI weighted by its class's weight,
  averaged (or over the `top_k_percent` largest).
- Fast R-CNN box: Huber on the ROIs of a foreground class (the box of that class unless
  class-agnostic), divided by (their coordinate count, averaged over replicas, + 0.01).
- Mask: sigmoid cross-entropy on the masks of foreground ROIs, divided by (their pixel count,
  averaged over replicas, + 0.01).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import tensorflow as tf

from lite_launcher.vision.losses.retinanet_losses import huber_loss


def _replica_mean(value):
    """`value` averaged over the replicas in sync (itself outside a replica context)."""
    context = tf.distribute.get_replica_context()
    if context is None:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.MEAN, value)


def _elementwise_huber(y_true, y_pred, delta):
    return huber_loss(y_true[..., None], y_pred[..., None], delta)


def _sigmoid_cross_entropy(labels, logits):
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.cast(labels, logits.dtype),
                                                   logits=logits)


class RpnScoreLoss:
    """RPN objectness loss: `__call__(score_outputs, score_targets)`, dicts by level of
    [B, h, w, A] logits and int targets (1 object, 0 background, -1 not sampled)."""

    def __init__(self, rpn_batch_size_per_im):
        self._rpn_batch_size_per_im = rpn_batch_size_per_im

    def __call__(self, score_outputs, labels):
        losses = []
        for level in sorted(score_outputs.keys()):
            outputs = score_outputs[level]
            targets = labels[level]
            sampled = tf.cast((targets == 1) | (targets == 0), outputs.dtype)
            per_anchor = _sigmoid_cross_entropy(tf.maximum(targets, 0), outputs)
            normalizer = tf.cast(tf.shape(outputs)[0] * self._rpn_batch_size_per_im,
                                 outputs.dtype)
            losses.append(tf.reduce_sum(per_anchor * sampled) / normalizer)
        return tf.math.add_n(losses)


class RpnBoxLoss:
    """RPN box regression loss: `__call__(box_outputs, box_targets)`, dicts by level of
    [B, h, w, A * 4]; anchors whose 4 targets are all ~0 (unmatched) are left out."""

    def __init__(self, huber_loss_delta: float):
        self._delta = huber_loss_delta

    def __call__(self, box_outputs, labels):
        losses = []
        for level in sorted(box_outputs.keys()):
            outputs, targets = box_outputs[level], labels[level]
            _, height, width, coordinates = targets.shape.as_list()
            per_anchor = tf.reshape(targets, [-1, height, width, coordinates // 4, 4])
            valid = tf.reduce_any(tf.abs(per_anchor) > 1e-6, axis=-1)
            valid = tf.cast(tf.repeat(valid, 4, axis=-1), outputs.dtype)
            loss = tf.reduce_sum(_elementwise_huber(targets, outputs, self._delta) * valid)
            losses.append(loss / (_replica_mean(tf.reduce_sum(valid)) + 0.01))
        return tf.math.add_n(losses)


class FastrcnnClassLoss:
    """Fast R-CNN classification loss: `__call__(class_outputs [B, R, C], class_targets
    [B, R], class_weights=None)`.

    Args:
      use_binary_cross_entropy: sigmoid cross-entropy per class instead of softmax.
      top_k_percent: below 1, average only that fraction of the largest per-ROI losses
        (hard example mining).
    """

    def __init__(self, use_binary_cross_entropy: bool = False, top_k_percent: float = 1.0):
        self._use_binary_cross_entropy = use_binary_cross_entropy
        self._top_k_percent = top_k_percent

    def __call__(self, class_outputs, class_targets, class_weights=None):
        num_classes = class_outputs.shape[-1]
        if class_weights is None:
            class_weights = [1.0] * num_classes
        if len(class_weights) != num_classes:
            raise ValueError(f"losses.class_weights has {len(class_weights)} values; give "
                             f"one per class ({num_classes}).")
        weights = tf.constant(class_weights, class_outputs.dtype)
        one_hot = tf.one_hot(tf.cast(class_targets, tf.int32), num_classes,
                             dtype=class_outputs.dtype)
        if self._use_binary_cross_entropy:
            loss = _sigmoid_cross_entropy(one_hot, class_outputs) * weights
        else:
            loss = tf.nn.softmax_cross_entropy_with_logits(labels=one_hot, logits=class_outputs)
            loss *= tf.reduce_sum(one_hot * weights, axis=-1)
        if self._top_k_percent < 1.0:
            return self.aggregate_loss_top_k(loss)
        return tf.reduce_mean(loss)

    def aggregate_loss_top_k(self, loss, num_valid_values=None):
        """Mean of the `top_k_percent` largest values of `loss` (any shape); with
        `num_valid_values`, divided by at most that many."""
        loss = tf.reshape(loss, [-1])
        count = tf.cast(self._top_k_percent * tf.cast(tf.size(loss), tf.float32), tf.int32)
        largest, _ = tf.math.top_k(loss, k=count)
        normalizer = tf.cast(count, loss.dtype)
        if num_valid_values is not None:
            normalizer = tf.minimum(normalizer, tf.cast(num_valid_values, loss.dtype))
        return tf.reduce_sum(largest) / (normalizer + 1e-5)


class FastrcnnBoxLoss:
    """Fast R-CNN box loss: `__call__(box_outputs [B, R, C * 4] (or [B, R, 4] when
    class-agnostic), class_targets [B, R], box_targets [B, R, 4])`; background ROIs (class
    0) are left out."""

    def __init__(self, huber_loss_delta: float, class_agnostic_bbox_pred: bool = False):
        self._delta = huber_loss_delta
        self._class_agnostic_bbox_pred = class_agnostic_bbox_pred

    def __call__(self, box_outputs, class_targets, box_targets):
        class_targets = tf.cast(class_targets, tf.int32)
        if not self._class_agnostic_bbox_pred:
            _, num_rois, coordinates = box_outputs.shape.as_list()
            per_class = tf.reshape(box_outputs, [-1, num_rois, coordinates // 4, 4])
            one_hot = tf.one_hot(class_targets, coordinates // 4, dtype=box_outputs.dtype)
            box_outputs = tf.einsum("brcj,brc->brj", per_class, one_hot)
        foreground = tf.cast(tf.tile((class_targets > 0)[..., None], [1, 1, 4]),
                             box_outputs.dtype)
        loss = tf.reduce_sum(_elementwise_huber(box_targets, box_outputs, self._delta)
                             * foreground)
        return loss / (_replica_mean(tf.reduce_sum(foreground)) + 0.01)


class MaskrcnnLoss:
    """Mask loss: `__call__(mask_outputs [B, M, h, w] logits, mask_targets [B, M, h, w],
    select_class_targets [B, M])`; masks of class 0 are left out."""

    def __call__(self, mask_outputs, mask_targets, select_class_targets):
        _, _, height, width = mask_outputs.shape.as_list()
        weights = tf.tile((select_class_targets > 0)[:, :, None, None], [1, 1, height, width])
        weights = tf.cast(weights, mask_outputs.dtype)
        loss = tf.reduce_sum(_sigmoid_cross_entropy(mask_targets, mask_outputs) * weights)
        return loss / (_replica_mean(tf.reduce_sum(weights)) + 0.01)


def zero_out_disallowed_class_ids(class_ids, allowed_class_ids: Sequence[int]):
    """[B, N] class ids with every id not in `allowed_class_ids` set to 0 (TFM's
    `allowed_mask_class_ids`: masks of other classes do not train)."""
    allowed = tf.constant(allowed_class_ids, class_ids.dtype)
    keep = tf.reduce_any(class_ids[..., None] == allowed, axis=-1)
    return tf.where(keep, class_ids, tf.zeros_like(class_ids))


def _stage_key(name: str, stage: int) -> str:
    return f"{name}_{stage}" if stage else name


def maskrcnn_losses(outputs: Mapping, labels: Mapping, *, include_mask: bool = True,
                    cascade_iou_thresholds: Optional[Sequence[float]] = None,
                    class_agnostic_bbox_pred: bool = False, loss_weight: float = 1.0,
                    rpn_huber_loss_delta: float = 1.0 / 9.0,
                    frcnn_huber_loss_delta: float = 1.0,
                    frcnn_class_use_binary_cross_entropy: bool = False,
                    frcnn_class_loss_top_k_percent: float = 1.0, rpn_score_weight: float = 1.0,
                    rpn_box_weight: float = 1.0, frcnn_class_weight: float = 1.0,
                    frcnn_box_weight: float = 1.0, mask_weight: float = 1.0,
                    class_weights: Optional[Sequence[float]] = None,
                    allowed_mask_class_ids: Optional[Sequence[int]] = None, aux_losses=None):
    """TFM's `MaskRCNNTask.build_losses` (defaults: TFM's `Losses` config).

    Args:
      outputs: the model's training outputs: `rpn_scores`, `rpn_boxes` (dicts by level),
        `class_outputs`, `box_outputs`, `class_targets`, `box_targets` (and `_<i>` for
        cascade stage i), with masks `mask_outputs`, `mask_targets`, `mask_class_targets`.
      labels: the parser's `rpn_score_targets`, `rpn_box_targets`.
      cascade_iou_thresholds: the cascade stages' IoUs; the Fast R-CNN losses are averaged
        over the 1 + len(...) stages.
      aux_losses: the model's regularisation losses (L2), summed into `total_loss`.

    Returns:
      dict of scalars `total_loss` (= loss_weight * (model_loss + sum(aux_losses))),
      `rpn_score_loss`, `rpn_box_loss`, `frcnn_cls_loss`, `frcnn_box_loss`, `mask_loss`,
      `model_loss` (the weighted sum of the five).
    """
    # TFM normalises the RPN score loss by the number of sampled ROIs per image.
    rpn_score_loss = RpnScoreLoss(tf.shape(outputs["box_outputs"])[1])(
        outputs["rpn_scores"], labels["rpn_score_targets"])
    rpn_box_loss = RpnBoxLoss(rpn_huber_loss_delta)(outputs["rpn_boxes"],
                                                   labels["rpn_box_targets"])
    class_loss_fn = FastrcnnClassLoss(frcnn_class_use_binary_cross_entropy,
                                      frcnn_class_loss_top_k_percent)
    box_loss_fn = FastrcnnBoxLoss(frcnn_huber_loss_delta, class_agnostic_bbox_pred)
    num_stages = 1 + len(cascade_iou_thresholds or [])
    frcnn_cls_loss = frcnn_box_loss = 0.0
    for stage in range(num_stages):
        class_targets = outputs[_stage_key("class_targets", stage)]
        frcnn_cls_loss += class_loss_fn(outputs[_stage_key("class_outputs", stage)],
                                        class_targets, class_weights)
        frcnn_box_loss += box_loss_fn(outputs[_stage_key("box_outputs", stage)], class_targets,
                                      outputs[_stage_key("box_targets", stage)])
    frcnn_cls_loss /= num_stages
    frcnn_box_loss /= num_stages
    if include_mask:
        mask_class_targets = outputs["mask_class_targets"]
        if allowed_mask_class_ids is not None:
            mask_class_targets = zero_out_disallowed_class_ids(mask_class_targets,
                                                               allowed_mask_class_ids)
        mask_loss = MaskrcnnLoss()(outputs["mask_outputs"], outputs["mask_targets"],
                                   mask_class_targets)
    else:
        mask_loss = tf.constant(0.0, tf.float32)
    model_loss = (rpn_score_weight * rpn_score_loss + rpn_box_weight * rpn_box_loss
                  + frcnn_class_weight * frcnn_cls_loss + frcnn_box_weight * frcnn_box_loss
                  + mask_weight * mask_loss)
    total_loss = model_loss
    if aux_losses:
        total_loss = model_loss + tf.reduce_sum(aux_losses)
    return {"total_loss": loss_weight * total_loss, "rpn_score_loss": rpn_score_loss,
            "rpn_box_loss": rpn_box_loss, "frcnn_cls_loss": frcnn_cls_loss,
            "frcnn_box_loss": frcnn_box_loss, "mask_loss": mask_loss, "model_loss": model_loss}
