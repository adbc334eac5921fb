"""ROI Align for two-stage detectors, as TFM's `ops/spatial_transform_ops.py`
(`multilevel_crop_and_resize`, `crop_mask_in_target_box`).

Both crop an `output_size` x `output_size` grid out of a feature map per box and sample it
bilinearly, with TFM's conventions (equal to its outputs on the same inputs):

* sample `i` of a box starting at `y0` with height `h` lies at `y0 + (i + sample_offset) * h /
  output_size` (in feature-map pixels);
* its two neighbouring rows are `floor(y)` clipped to [0, boundary] and that plus one clipped to
  the boundary; the weights are `1 - (y - row0)` and `y - row0` *of the clipped row*, so a
  sample outside the map extrapolates from the border rows as TFM's does;
* every output value is the weighted sum of its 2 x 2 neighbours.

`multilevel_crop_and_resize` first sends each box to an FPN level, Mask R-CNN's rule:
`floor(log2(sqrt(area) / 224)) + 4`, clipped to the pyramid's levels.
"""

import tensorflow as tf

# Added to a ground-truth box's side before dividing by it (an empty padding box stays finite).
EPSILON = 1e-8
# Mask R-CNN's canonical ROI size and its level (FPN paper, eq. 1).
CANONICAL_SIZE = 224.0
CANONICAL_LEVEL = 4


def _sample_grid(start, size, boundary, output_size, sample_offset):
    """Rows (or columns) sampled along one axis of each box.

    start, size, boundary: [B, N] in feature-map pixels. Returns the neighbour indices
    [B, N, output_size, 2] (int32) and their bilinear weights [B, N, output_size, 2].
    """
    steps = tf.range(output_size, dtype=start.dtype) + sample_offset
    # (step * size) / S, in TFM's order: off-map samples extrapolate, which magnifies rounding.
    position = start[..., None] + steps * size[..., None] / output_size
    boundary = boundary[..., None]
    low = tf.minimum(tf.maximum(tf.floor(position), 0.0), boundary)
    high = tf.minimum(low + 1.0, boundary)
    frac = position - low  # measured from the clipped row, as TFM (extrapolates off the map)
    indices = tf.cast(tf.stack([low, high], axis=-1), tf.int32)
    return indices, tf.stack([1.0 - frac, frac], axis=-1)


def _bilinear_gather(flat_features, offsets, row_stride, rows, row_weights, cols, col_weights):
    """Bilinear samples of boxes from one flat feature table.

    flat_features: [T, C], every (map, y, x) row of all maps; offsets [B, N]: the row of each
    box's map's (0, 0); row_stride [B, N]: that map's width. rows / cols and their weights:
    from `_sample_grid`. Returns [B, N, S, S, C].
    """
    index = (offsets[:, :, None, None, None, None]
             + rows[:, :, :, :, None, None] * row_stride[:, :, None, None, None, None]
             + cols[:, :, None, None, :, :])  # [B, N, S, 2, S, 2]
    corners = tf.gather(flat_features, index)  # [B, N, S, 2, S, 2, C]
    weights = row_weights[:, :, :, :, None, None] * col_weights[:, :, None, None, :, :]
    weights = tf.cast(weights, flat_features.dtype)[..., None]
    # The four weighted corners of each sample are a 2x2 window of a [B*N, 2S, 2S, C] map:
    # a 2x2 average pool (x 4) sums them, as TFM does. A reduce_sum over axes 3 and 5 of the
    # 7-D product took ~0.8 s of a Mask R-CNN training step's op time (256^2, batch 2) against
    # ~0.2 s for the pool and its gradient.
    size = rows.shape[2]
    channels = flat_features.shape[-1]
    windows = tf.reshape(corners * weights, [-1, 2 * size, 2 * size, channels])
    pooled = tf.nn.avg_pool2d(windows, ksize=2, strides=2, padding="VALID") * 4.0
    boxes = tf.shape(offsets)
    return tf.reshape(pooled, [boxes[0], boxes[1], size, size, channels])


def assign_levels(boxes, min_level, max_level):
    """FPN level [B, N] (int32) of each box [B, N, 4] (pixels), clipped to the pyramid; a box
    with no area goes to `min_level`."""
    height = tf.cast(boxes[..., 2] - boxes[..., 0], tf.float32)
    width = tf.cast(boxes[..., 3] - boxes[..., 1], tf.float32)
    side = tf.sqrt(height * width)
    levels = tf.math.floordiv(tf.math.log(tf.math.divide_no_nan(side, CANONICAL_SIZE)),
                              tf.math.log(2.0)) + CANONICAL_LEVEL
    levels = tf.cast(levels, tf.int32)
    return tf.minimum(max_level, tf.maximum(levels, min_level))


def multilevel_crop_and_resize(features, boxes, output_size=7, sample_offset=0.5):
    """ROI Align on a feature pyramid.

    Args:
      features: dict `str(level)` -> [B, H_l, W_l, C] for consecutive levels; each level's
        size must be the lowest level's divided by 2^(level - lowest) (as FPN makes them).
      boxes: [B, N, 4] yxyx in pixels of the input image.
      output_size: the side S of each crop.
      sample_offset: where in each output cell (0..1) the sample lies.

    Returns:
      [B, N, S, S, C] crops in the features' dtype.
    """
    levels = sorted(int(level) for level in features)
    min_level, max_level = levels[0], levels[-1]
    if levels != list(range(min_level, max_level + 1)):
        raise ValueError(f"features must hold consecutive levels; got {levels}")
    lowest = features[str(min_level)]
    batch_size = tf.shape(lowest)[0]
    num_filters = lowest.shape[-1]
    widths, sizes = [], []
    for level in levels:
        _, height, width, _ = features[str(level)].shape.as_list()
        widths.append(width)
        sizes.append(height * width)
    level_offsets = tf.constant([sum(sizes[:i]) for i in range(len(sizes))], tf.int32)
    flat_features = tf.reshape(
        tf.concat([tf.reshape(features[str(level)], [batch_size, -1, num_filters])
                   for level in levels], axis=1), [-1, num_filters])

    box_levels = assign_levels(boxes, min_level, max_level)
    scale = tf.cast(tf.pow(2.0, tf.cast(box_levels, tf.float32)), boxes.dtype)
    ymin, xmin = boxes[..., 0] / scale, boxes[..., 1] / scale
    box_height = (boxes[..., 2] - boxes[..., 0]) / scale
    box_width = (boxes[..., 3] - boxes[..., 1]) / scale
    # The last row / column of each level: TFM derives it from the lowest level's size.
    relative = box_levels - min_level
    stride = tf.cast(tf.pow(2.0, tf.cast(relative, tf.float32)), boxes.dtype)
    lowest_shape = tf.cast(tf.shape(lowest)[1:3], boxes.dtype)
    rows, row_weights = _sample_grid(ymin, box_height, lowest_shape[0] / stride - 1.0,
                                     output_size, sample_offset)
    cols, col_weights = _sample_grid(xmin, box_width, lowest_shape[1] / stride - 1.0,
                                     output_size, sample_offset)
    offsets = (tf.range(batch_size)[:, None] * sum(sizes)
               + tf.gather(level_offsets, relative))
    return _bilinear_gather(flat_features, offsets, tf.gather(tf.constant(widths), relative),
                            rows, row_weights, cols, col_weights)


def crop_mask_in_target_box(masks, boxes, target_boxes, output_size, sample_offset=0.0,
                            use_einsum=True):
    """Crops each mask to its target box (a sampled ROI) and resizes it, for mask targets.

    Args:
      masks: [B, M, H, W], each mask drawn inside its `boxes` row.
      boxes: [B, M, 4] the (ground-truth) boxes the masks fill, pixels of the image.
      target_boxes: [B, M, 4] the boxes to crop, same coordinates.
      output_size: the side S of each crop.
      sample_offset: where in each output cell (0..1) the sample lies.
      use_einsum: accepted for TFM's signature; TFM's einsum and gather paths give the same
        values and lite has one.

    Returns:
      [B, M, S, S] float32. The masks are padded by 2 zero pixels first, so a target box
      reaching past its mask's box samples zeros. As in TFM, the x offset is scaled by the
      mask's height and the crop's height by its width (the same for the square masks Mask
      R-CNN uses).
    """
    del use_einsum
    masks = tf.cast(masks, tf.float32)
    boxes = tf.cast(boxes, tf.float32)
    target_boxes = tf.cast(target_boxes, tf.float32)
    batch_size, num_masks, height, width = masks.shape.as_list()
    if batch_size is None:
        batch_size = tf.shape(masks)[0]
    padded = tf.pad(masks, [[0, 0], [0, 0], [2, 2], [2, 2]])
    gt_ymin, gt_xmin, gt_ymax, gt_xmax = tf.unstack(boxes, axis=-1)
    ymin, xmin, ymax, xmax = tf.unstack(target_boxes, axis=-1)
    gt_height = gt_ymax - gt_ymin + EPSILON
    gt_width = gt_xmax - gt_xmin + EPSILON
    start_y = (ymin - gt_ymin) * height / gt_height + 2
    start_x = (xmin - gt_xmin) * height / gt_width + 2
    crop_height = (ymax - ymin) * width / gt_height
    crop_width = (xmax - xmin) * width / gt_width
    rows, row_weights = _sample_grid(start_y, crop_height,
                                     tf.fill(tf.shape(start_y), float(height + 3)),
                                     output_size, sample_offset)
    cols, col_weights = _sample_grid(start_x, crop_width,
                                     tf.fill(tf.shape(start_x), float(width + 3)),
                                     output_size, sample_offset)
    map_size = (height + 4) * (width + 4)
    offsets = tf.reshape(tf.range(batch_size * num_masks) * map_size, [batch_size, num_masks])
    crops = _bilinear_gather(tf.reshape(padded, [-1, 1]), offsets,
                             tf.fill([batch_size, num_masks], width + 4),
                             rows, row_weights, cols, col_weights)
    return crops[..., 0]
