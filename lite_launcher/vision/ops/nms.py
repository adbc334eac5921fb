"""Batched, padded, tile-by-tile NMS over score-sorted boxes, as TFM's `ops/nms.py` (the NMS
of its detection generator's `nms_version: v2`).

Boxes are processed in tiles of `NMS_TILE_SIZE`: each tile is first suppressed by the kept
boxes of all earlier tiles, then by itself (repeatedly, until no kept box changes), so all
shapes are static and the loop runs in graph mode and under XLA. A box is suppressed by a
higher-scored kept box when their IoU is >= `iou_threshold` (TensorFlow's
`non_max_suppression` suppresses only above it). A box that is all zeros (a "dot", as
`box_ops.filter_boxes_by_scores` leaves behind) is never selected.
"""

import tensorflow as tf

from lite_launcher.vision.ops import box_ops

NMS_TILE_SIZE = 512


def _self_suppression(iou, _, iou_sum):
    """One round inside a tile: boxes still kept suppress the ones they overlap."""
    batch_size = tf.shape(iou)[0]
    can_suppress = tf.cast(tf.reshape(tf.reduce_max(iou, 1) <= 0.5, [batch_size, -1, 1]),
                           iou.dtype)
    still_kept = tf.cast(tf.reduce_max(can_suppress * iou, 1) <= 0.5, iou.dtype)
    new_iou = tf.reshape(still_kept, [batch_size, -1, 1]) * iou
    new_iou_sum = tf.reduce_sum(new_iou, [1, 2])
    return [new_iou, tf.reduce_any(iou_sum - new_iou_sum > 0.5), new_iou_sum]


def _cross_suppression(boxes, box_slice, iou_threshold, inner_idx):
    """Suppresses `box_slice` by the (already final) tile `inner_idx` of `boxes`."""
    batch_size = tf.shape(boxes)[0]
    earlier = tf.slice(boxes, [0, inner_idx * NMS_TILE_SIZE, 0], [batch_size, NMS_TILE_SIZE, 4])
    iou = box_ops.bbox_overlap(earlier, box_slice)
    keep = tf.cast(tf.reduce_all(iou < iou_threshold, [1]), box_slice.dtype)
    return boxes, keep[..., None] * box_slice, iou_threshold, inner_idx + 1


def _suppression_loop_body(boxes, iou_threshold, output_size, idx):
    """Finalises tile `idx` of boxes [batch, num_tiles * NMS_TILE_SIZE, 4]: suppressed boxes
    become zeros; `output_size` [batch] counts the boxes kept so far."""
    boxes_shape = tf.shape(boxes)
    num_tiles = boxes_shape[1] // NMS_TILE_SIZE
    batch_size = boxes_shape[0]
    box_slice = tf.slice(boxes, [0, idx * NMS_TILE_SIZE, 0], [batch_size, NMS_TILE_SIZE, 4])
    _, box_slice, _, _ = tf.while_loop(
        lambda _boxes, _slice, _threshold, inner_idx: inner_idx < idx, _cross_suppression,
        [boxes, box_slice, iou_threshold, tf.constant(0)])

    iou = box_ops.bbox_overlap(box_slice, box_slice)
    later = tf.range(NMS_TILE_SIZE)[None, :] > tf.range(NMS_TILE_SIZE)[:, None]
    iou *= tf.cast(tf.logical_and(later[None], iou >= iou_threshold), iou.dtype)
    suppressed_iou, _, _ = tf.while_loop(
        lambda _iou, changed, _iou_sum: changed, _self_suppression,
        [iou, tf.constant(True), tf.reduce_sum(iou, [1, 2])])
    suppressed = tf.reduce_sum(suppressed_iou, 1) > 0
    box_slice *= (1.0 - tf.cast(suppressed, box_slice.dtype))[..., None]

    this_tile = tf.reshape(tf.cast(tf.equal(tf.range(num_tiles), idx), boxes.dtype),
                           [1, -1, 1, 1])
    boxes = (tf.tile(box_slice[:, None], [1, num_tiles, 1, 1]) * this_tile
             + tf.reshape(boxes, [batch_size, num_tiles, NMS_TILE_SIZE, 4]) * (1 - this_tile))
    boxes = tf.reshape(boxes, boxes_shape)
    output_size += tf.reduce_sum(tf.cast(tf.reduce_any(box_slice > 0, [2]), tf.int32), [1])
    return boxes, iou_threshold, output_size, idx + 1


def _tiles_with_boxes(boxes):
    """How many leading tiles of boxes [batch, num_tiles * NMS_TILE_SIZE, 4] hold a non-zero
    box in some image: the loop stops there. A tile of zero boxes only (the score filter's
    "dots", the padding) keeps no box and suppresses none — suppression runs from earlier
    tiles to later ones — so skipping the trailing ones leaves every output as it was, while
    the loop's cost, quadratic in its tiles, falls to what the scores above the threshold
    need (TFM's loop runs every tile)."""
    non_zero = tf.reduce_any(tf.not_equal(boxes, 0.0), axis=2)  # [batch, num_boxes]
    positions = tf.range(1, tf.shape(boxes)[1] + 1)[None, :]
    last_non_zero = tf.reduce_max(tf.where(non_zero, positions, 0))
    return (last_non_zero + NMS_TILE_SIZE - 1) // NMS_TILE_SIZE


def sorted_non_max_suppression_padded(scores, boxes, max_output_size, iou_threshold):
    """NMS of boxes [batch, N, 4] already sorted by scores [batch, N] (descending).

    Returns `(nms_scores [batch, max_output_size], nms_boxes [batch, max_output_size, 4])`,
    float32: the kept boxes in score order, then zeros (scores and boxes) as padding.

    Each row (an image, or an image and class) runs its own tile loop, `tf.map_fn` over the
    rows: a row stops at its own last box or when it has `max_output_size`, where one loop
    over all rows would run every tile until the slowest row is done, over [rows, 512, 512]
    IoU tensors too large for the caches. Rows never interact, and a row's first
    `max_output_size` kept boxes do not depend on later tiles (suppression runs forward), so
    the outputs are those of TFM's loop over the whole batch.
    """
    scores, boxes = tf.cast(scores, tf.float32), tf.cast(boxes, tf.float32)
    if tf.executing_eagerly():
        # Eagerly, `tf.map_fn` and the tile loops would run op by op from Python, row by row.
        return _per_row_graph(scores, boxes, max_output_size, iou_threshold)
    return _per_row(scores, boxes, max_output_size, iou_threshold)


def _per_row(scores, boxes, max_output_size, iou_threshold):
    def one_row(row):
        row_scores, row_boxes = _sorted_nms_rows(row[0][None], row[1][None], max_output_size,
                                                 iou_threshold)
        return row_scores[0], row_boxes[0]

    return tf.map_fn(one_row, (scores, boxes),
                     fn_output_signature=(tf.TensorSpec([max_output_size], tf.float32),
                                          tf.TensorSpec([max_output_size, 4], tf.float32)))


_per_row_graph = tf.function(_per_row, reduce_retracing=True)


def _sorted_nms_rows(scores, boxes, max_output_size, iou_threshold):
    """`sorted_non_max_suppression_padded` in one tile loop over all rows (TFM's way)."""
    batch_size = tf.shape(boxes)[0]
    num_boxes = tf.shape(boxes)[1]
    pad = (tf.cast(tf.math.ceil(tf.cast(num_boxes, tf.float32) / NMS_TILE_SIZE), tf.int32)
           * NMS_TILE_SIZE - num_boxes)
    boxes = tf.pad(tf.cast(boxes, tf.float32), [[0, 0], [0, pad], [0, 0]])
    scores = tf.pad(tf.cast(scores, tf.float32), [[0, 0], [0, pad]], constant_values=-1)
    num_boxes += pad
    tiles_with_boxes = _tiles_with_boxes(boxes)

    def not_done(unused_boxes, unused_threshold, output_size, idx):
        return tf.logical_and(tf.reduce_min(output_size) < max_output_size,
                              idx < tiles_with_boxes)

    selected_boxes, _, output_size, _ = tf.while_loop(
        not_done, _suppression_loop_body,
        [boxes, iou_threshold, tf.zeros([batch_size], tf.int32), tf.constant(0)])
    # Indices of the first `max_output_size` kept boxes per image, in their original order.
    kept = tf.cast(tf.reduce_any(selected_boxes > 0, [2]), tf.int32)
    idx = num_boxes - tf.nn.top_k(kept * tf.range(num_boxes, 0, -1)[None], max_output_size)[0]
    idx = tf.minimum(idx, num_boxes - 1)
    valid = tf.range(max_output_size)[None, :] < output_size[:, None]
    boxes = tf.gather(boxes, idx, axis=1, batch_dims=1) * tf.cast(valid[..., None], tf.float32)
    scores = tf.gather(scores, idx, axis=1, batch_dims=1) * tf.cast(valid, tf.float32)
    return scores, boxes
