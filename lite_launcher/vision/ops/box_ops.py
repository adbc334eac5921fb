"""Box helpers in [ymin, xmin, ymax, xmax] ("yxyx") order, as TFM's `ops/box_ops.py`.

Every function works on any leading shape (`[..., 4]`) and keeps static shapes, so it runs in
`tf.data`, in a `tf.function` and under XLA alike.
"""

import math

import numpy as np
import tensorflow as tf

# Added to box sizes before a division or a log, so empty (padding) boxes stay finite.
EPSILON = 1e-8
# The largest log-scale a decoded box may grow by: exp(dh) <= 1000 / 16 (Detectron's clip).
BBOX_XFORM_CLIP = math.log(1000.0 / 16.0)


def _check_last_dim(boxes, name="boxes"):
    if boxes.shape[-1] != 4:
        raise ValueError(f"{name} must have a last dimension of 4 ([ymin, xmin, ymax, xmax]); "
                         f"got shape {list(boxes.shape)}")


def _height_width(image_shape, dtype):
    """(height, width) of `image_shape`: a pair of numbers, or a tensor ending in [h, w]."""
    if isinstance(image_shape, (list, tuple)):
        return image_shape
    image_shape = tf.cast(image_shape, dtype)
    return image_shape[..., 0:1], image_shape[..., 1:2]


def yxyx_to_xywh(boxes):
    """NumPy boxes [..., (ymin, xmin, ymax, xmax)] -> [..., (xmin, ymin, width, height)] (COCO)."""
    boxes = np.asarray(boxes)
    _check_last_dim(boxes)
    return np.stack([boxes[..., 1], boxes[..., 0], boxes[..., 3] - boxes[..., 1],
                     boxes[..., 2] - boxes[..., 0]], axis=-1)


def yxyx_to_cycxhw(boxes):
    """Corners -> [..., (center_y, center_x, height, width)]."""
    _check_last_dim(boxes)
    return tf.stack([(boxes[..., 0] + boxes[..., 2]) / 2, (boxes[..., 1] + boxes[..., 3]) / 2,
                     boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]], axis=-1)


def cycxhw_to_yxyx(boxes):
    """[..., (center_y, center_x, height, width)] -> corners."""
    _check_last_dim(boxes)
    half_h, half_w = boxes[..., 2] / 2, boxes[..., 3] / 2
    return tf.stack([boxes[..., 0] - half_h, boxes[..., 1] - half_w,
                     boxes[..., 0] + half_h, boxes[..., 1] + half_w], axis=-1)


def normalize_boxes(boxes, image_shape):
    """Pixel boxes -> boxes in [0, 1] of `image_shape` ([h, w], or a tensor broadcastable to
    the boxes' leading dimensions with last dimension 2)."""
    _check_last_dim(boxes)
    height, width = _height_width(image_shape, boxes.dtype)
    return tf.concat([boxes[..., 0:1] / height, boxes[..., 1:2] / width,
                      boxes[..., 2:3] / height, boxes[..., 3:4] / width], axis=-1)


def denormalize_boxes(boxes, image_shape):
    """Boxes in [0, 1] -> pixel boxes of `image_shape` (see `normalize_boxes`)."""
    _check_last_dim(boxes)
    height, width = _height_width(image_shape, boxes.dtype)
    ymin, xmin, ymax, xmax = tf.split(boxes, 4, axis=-1)
    return tf.concat([ymin * height, xmin * width, ymax * height, xmax * width], axis=-1)


def horizontal_flip_boxes(normalized_boxes):
    """Mirrors normalized boxes left-right (x -> 1 - x)."""
    _check_last_dim(normalized_boxes)
    ymin, xmin, ymax, xmax = tf.split(normalized_boxes, 4, axis=-1)
    return tf.concat([ymin, 1.0 - xmax, ymax, 1.0 - xmin], axis=-1)


def vertical_flip_boxes(normalized_boxes):
    """Mirrors normalized boxes top-bottom (y -> 1 - y)."""
    _check_last_dim(normalized_boxes)
    ymin, xmin, ymax, xmax = tf.split(normalized_boxes, 4, axis=-1)
    return tf.concat([1.0 - ymax, xmin, 1.0 - ymin, xmax], axis=-1)


def clip_boxes(boxes, image_shape):
    """Clips boxes to [0, height] x [0, width] (`image_shape` as in `normalize_boxes`)."""
    _check_last_dim(boxes)
    if isinstance(image_shape, (list, tuple)):
        height, width = image_shape
        limits = [height, width, height, width]
    else:
        height, width = tf.unstack(tf.cast(image_shape, boxes.dtype), axis=-1)
        limits = tf.stack([height, width, height, width], axis=-1)
    return tf.maximum(tf.minimum(boxes, limits), 0.0)


def resize_and_crop_boxes(boxes, image_scale, output_size, offset):
    """Boxes [N, 4] of an image scaled by `image_scale` ([sy, sx]) and cropped at `offset`
    ([y0, x0]), clipped to `output_size` ([h, w]): the parser's box counterpart of
    `resize_and_crop_image`."""
    boxes = boxes * tf.tile(tf.expand_dims(image_scale, axis=0), [1, 2])
    boxes = boxes - tf.tile(tf.expand_dims(offset, axis=0), [1, 2])
    return clip_boxes(boxes, output_size)


def compute_outer_boxes(boxes, image_shape, scale: float = 1.0):
    """Boxes grown by `scale` about their centres and clipped to `image_shape` (TFM's outer
    boxes, which give masks a margin); `scale` 1.0 returns `boxes` unchanged."""
    if scale < 1.0:
        raise ValueError(f"outer_boxes_scale ({scale}) must be >= 1.0.")
    if scale == 1.0:
        return boxes
    center_y = (boxes[..., 0] + boxes[..., 2]) / 2.0
    center_x = (boxes[..., 1] + boxes[..., 3]) / 2.0
    half_height = (boxes[..., 2] - boxes[..., 0]) * scale / 2.0
    half_width = (boxes[..., 3] - boxes[..., 1]) * scale / 2.0
    outer = tf.stack([center_y - half_height, center_x - half_width,
                      center_y + half_height, center_x + half_width], axis=-1)
    return clip_boxes(outer, image_shape)


def _centers_and_sizes(boxes):
    height = boxes[..., 2:3] - boxes[..., 0:1]
    width = boxes[..., 3:4] - boxes[..., 1:2]
    return boxes[..., 0:1] + 0.5 * height, boxes[..., 1:2] + 0.5 * width, height, width


def encode_boxes(boxes, anchors, weights=None):
    """Boxes -> regression targets [dy, dx, dh, dw] relative to `anchors` (broadcastable),
    each multiplied by `weights` ([wy, wx, wh, ww]) when given: the Faster R-CNN box coder."""
    _check_last_dim(boxes)
    boxes = tf.cast(boxes, anchors.dtype)
    box_yc, box_xc, box_h, box_w = _centers_and_sizes(boxes)
    anchor_yc, anchor_xc, anchor_h, anchor_w = _centers_and_sizes(anchors)
    anchor_h += EPSILON
    anchor_w += EPSILON
    box_h += EPSILON
    box_w += EPSILON
    codes = [(box_yc - anchor_yc) / anchor_h, (box_xc - anchor_xc) / anchor_w,
             tf.math.log(box_h / anchor_h), tf.math.log(box_w / anchor_w)]
    if weights:
        codes = [code * weight for code, weight in zip(codes, weights)]
    return tf.concat(codes, axis=-1)


def decode_boxes(encoded_boxes, anchors, weights=None):
    """Inverse of `encode_boxes`; dh and dw are clipped at log(1000 / 16) first."""
    _check_last_dim(encoded_boxes, "encoded_boxes")
    encoded_boxes = tf.cast(encoded_boxes, anchors.dtype)
    dy, dx, dh, dw = tf.split(encoded_boxes, 4, axis=-1)
    if weights:
        dy, dx, dh, dw = dy / weights[0], dx / weights[1], dh / weights[2], dw / weights[3]
    dh = tf.minimum(dh, BBOX_XFORM_CLIP)
    dw = tf.minimum(dw, BBOX_XFORM_CLIP)
    anchor_ymin, anchor_xmin, anchor_ymax, anchor_xmax = tf.split(anchors, 4, axis=-1)
    anchor_h = anchor_ymax - anchor_ymin
    anchor_w = anchor_xmax - anchor_xmin
    center_y = dy * anchor_h + (anchor_ymin + 0.5 * anchor_h)
    center_x = dx * anchor_w + (anchor_xmin + 0.5 * anchor_w)
    height = tf.exp(dh) * anchor_h
    width = tf.exp(dw) * anchor_w
    ymin = center_y - 0.5 * height
    xmin = center_x - 0.5 * width
    return tf.concat([ymin, xmin, ymin + height, xmin + width], axis=-1)


def filter_boxes(boxes, scores, image_shape, min_size_threshold):
    """Zeroes the boxes (and scores) whose sides are <= `min_size_threshold` or whose center
    lies outside the image."""
    _check_last_dim(boxes)
    if isinstance(image_shape, (list, tuple)):
        height, width = image_shape
    else:
        image_shape = tf.cast(image_shape, boxes.dtype)
        height, width = image_shape[..., 0], image_shape[..., 1]
    box_h = boxes[..., 2] - boxes[..., 0]
    box_w = boxes[..., 3] - boxes[..., 1]
    center_y = boxes[..., 0] + 0.5 * box_h
    center_x = boxes[..., 1] + 0.5 * box_w
    min_size = tf.cast(tf.maximum(min_size_threshold, 0.0), boxes.dtype)
    keep = ((box_h > min_size) & (box_w > min_size) & (center_y > 0.0) & (center_y < height)
            & (center_x > 0.0) & (center_x < width))
    return (tf.cast(keep[..., None], boxes.dtype) * boxes,
            tf.where(keep, scores, tf.zeros_like(scores)))


def filter_boxes_by_scores(boxes, scores, min_score_threshold):
    """Boxes with score <= `min_score_threshold` become zeros and their scores -1."""
    _check_last_dim(boxes)
    keep = scores > min_score_threshold
    return (tf.cast(keep[..., None], boxes.dtype) * boxes,
            tf.where(keep, scores, -tf.ones_like(scores)))


def gather_instances(selected_indices, instances, *aux_instances):
    """`instances[b, selected_indices[b, k]]` for each tensor given ([batch, N, ...] ->
    [batch, K, ...]); one tensor in, one out, else a tuple."""
    gathered = tuple(tf.gather(t, selected_indices, axis=1, batch_dims=1)
                     for t in (instances,) + aux_instances)
    return gathered if aux_instances else gathered[0]


def top_k_boxes(boxes, scores, k):
    """The k best-scored boxes [batch, k, 4] and their scores [batch, k], best first."""
    top_scores, top_indices = tf.nn.top_k(scores, k=k, sorted=True)
    return gather_instances(top_indices, boxes), top_scores


def get_non_empty_box_indices(boxes):
    """Indices (int64) of the boxes [N, 4] with positive height and width."""
    keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    return tf.where(keep)[:, 0]


def bbox_overlap(boxes, gt_boxes):
    """IoU [batch, N, M] of boxes [batch, N, 4] with gt_boxes [batch, M, 4]; -1 wherever
    either box is padding (all its coordinates negative)."""
    y1, x1, y2, x2 = tf.split(boxes, 4, axis=2)
    gy1, gx1, gy2, gx2 = (tf.transpose(t, [0, 2, 1]) for t in tf.split(gt_boxes, 4, axis=2))
    inter = (tf.maximum(tf.minimum(x2, gx2) - tf.maximum(x1, gx1), 0)
             * tf.maximum(tf.minimum(y2, gy2) - tf.maximum(y1, gy1), 0))
    union = (y2 - y1) * (x2 - x1) + (gy2 - gy1) * (gx2 - gx1) - inter + 1e-8
    iou = inter / union
    gt_padding = tf.transpose(tf.reduce_max(gt_boxes, axis=-1, keepdims=True) < 0.0, [0, 2, 1])
    box_padding = tf.reduce_max(boxes, axis=-1, keepdims=True) < 0.0
    return tf.where(gt_padding | box_padding, -tf.ones_like(iou), iou)


def bbox_intersection_over_area(boxes, gt_boxes):
    """Intersection over the area of each box: [batch, N, M] of boxes [batch, N, 4] with
    gt_boxes [batch, M, 4] (0 for an empty box); -1 wherever either box is padding (all its
    coordinates negative), as `bbox_overlap`."""
    y1, x1, y2, x2 = tf.split(boxes, 4, axis=2)
    gy1, gx1, gy2, gx2 = (tf.transpose(t, [0, 2, 1]) for t in tf.split(gt_boxes, 4, axis=2))
    inter = (tf.maximum(tf.minimum(x2, gx2) - tf.maximum(x1, gx1), 0)
             * tf.maximum(tf.minimum(y2, gy2) - tf.maximum(y1, gy1), 0))
    ioa = tf.math.divide_no_nan(inter, (y2 - y1) * (x2 - x1))
    gt_padding = tf.transpose(tf.reduce_max(gt_boxes, axis=-1, keepdims=True) < 0.0, [0, 2, 1])
    box_padding = tf.reduce_max(boxes, axis=-1, keepdims=True) < 0.0
    return tf.where(gt_padding | box_padding, -tf.ones_like(ioa), ioa)


def box_matching(boxes, gt_boxes, gt_classes):
    """Matches each box [batch, N, 4] to its highest-IoU ground truth (padded with -1).

    Returns `(matched_gt_boxes, matched_gt_classes, matched_gt_indices, matched_iou, iou)`;
    a box overlapping no ground truth gets a zero box, class 0 and index -1.
    """
    iou = bbox_overlap(boxes, gt_boxes)
    matched_iou = tf.reduce_max(iou, axis=-1)
    background = matched_iou <= 0.0
    best = tf.argmax(iou, axis=-1, output_type=tf.int32)
    matched_boxes, matched_classes = gather_instances(best, gt_boxes, gt_classes)
    matched_boxes = tf.where(background[..., None], tf.zeros_like(matched_boxes), matched_boxes)
    matched_classes = tf.where(background, tf.zeros_like(matched_classes), matched_classes)
    matched_indices = tf.where(background, -tf.ones_like(best), best)
    return matched_boxes, matched_classes, matched_indices, matched_iou, iou
