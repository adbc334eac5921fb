"""Pairwise IoU between box sets, as TFM's `ops/iou_similarity.py` (unbatched or batched)."""

import tensorflow as tf


def area(boxes):
    """Areas [N] or [B, N] of yxyx boxes [N, 4] or [B, N, 4]."""
    ymin, xmin, ymax, xmax = tf.split(boxes, 4, axis=-1)
    return tf.squeeze((ymax - ymin) * (xmax - xmin), axis=-1)


def _transpose_last_two(tensor):
    return tf.transpose(tensor, [1, 0] if len(tensor.shape) == 2 else [0, 2, 1])


def intersection(gt_boxes, boxes):
    """Pairwise intersection areas [N, M] (or [B, N, M]) of gt_boxes [N, 4] and boxes [M, 4]."""
    y1, x1, y2, x2 = tf.split(gt_boxes, 4, axis=-1)
    by1, bx1, by2, bx2 = (_transpose_last_two(t) for t in tf.split(boxes, 4, axis=-1))
    heights = tf.minimum(y2, by2) - tf.maximum(y1, by1)
    widths = tf.minimum(x2, bx2) - tf.maximum(x1, bx1)
    zero = tf.cast(0, heights.dtype)
    return tf.maximum(zero, heights) * tf.maximum(zero, widths)


def iou(gt_boxes, boxes):
    """Pairwise IoU [N, M] (or [B, N, M]); exactly 0 where boxes do not intersect, so empty
    padding boxes give 0, not NaN."""
    inter = intersection(gt_boxes, boxes)
    boxes_area = area(boxes)
    union = (tf.expand_dims(area(gt_boxes), -1)
             + tf.expand_dims(boxes_area, 1 if len(boxes_area.shape) == 2 else 0) - inter)
    return tf.where(tf.equal(inter, 0.0), tf.zeros_like(inter), tf.truediv(inter, union))


class IouSimilarity:
    """IoU similarity of `boxes_1` (rows, e.g. anchors) with `boxes_2` (columns, e.g. ground
    truths), with optional boolean masks whose rows / columns get `mask_val`."""

    def __init__(self, mask_val=-1):
        self.mask_val = mask_val

    def __call__(self, boxes_1, boxes_2, boxes_1_masks=None, boxes_2_masks=None):
        """[M, 4] x [N, 4] -> [M, N], or batched [B, M, 4] x [B, N, 4] (or [N, 4]) ->
        [B, M, N]. Masks: [M, 1] / [B, M, 1] and [N, 1] / [B, N, 1], True = masked."""
        boxes_1 = tf.cast(boxes_1, tf.float32)
        boxes_2 = tf.cast(boxes_2, tf.float32)
        rank_1, rank_2 = len(boxes_1.shape), len(boxes_2.shape)
        for name, rank in (("boxes_1", rank_1), ("boxes_2", rank_2)):
            if rank not in (2, 3):
                raise ValueError(f"{name} must be rank 2 ([N, 4]) or 3 ([B, N, 4]); got {rank}")
        if rank_1 < rank_2:
            raise ValueError(f"boxes_1 is unbatched (rank {rank_1}) while boxes_2 is batched "
                             f"(rank {rank_2}): batch boxes_1 too")
        result = iou(boxes_1, boxes_2)
        if boxes_1_masks is None and boxes_2_masks is None:
            return result
        if boxes_2_masks is not None:
            column_mask = _transpose_last_two(boxes_2_masks)
            if boxes_1_masks is None:
                column_mask = tf.logical_or(tf.zeros(tf.shape(result), tf.bool), column_mask)
            background = column_mask if boxes_1_masks is None else tf.logical_or(
                boxes_1_masks, column_mask)
        else:
            background = boxes_1_masks
        return tf.where(background, tf.cast(self.mask_val, result.dtype) * tf.ones_like(result),
                        result)
