"""Stride-based multilevel anchors, as TFM's `ops/anchor_generator.py` (`AnchorGeneratorv1`).

RetinaNet and Mask R-CNN use `anchor.Anchor` (sizes from the level); this generator takes
explicit per-level anchor sizes and strides, for detectors configured that way.
"""

import tensorflow as tf


class SingleAnchorGenerator:
    """Anchors of one feature level: `anchor_size * scale`, shaped by each aspect ratio
    (width / height), centred every `stride` pixels."""

    def __init__(self, anchor_size, scales, aspect_ratios, stride, clip_boxes=False):
        self.anchor_size = anchor_size
        self.scales = scales
        self.aspect_ratios = aspect_ratios
        self.stride = stride
        self.clip_boxes = clip_boxes

    def __call__(self, image_size):
        """image_size [H, W(, C)] -> anchors [ceil(H / stride), ceil(W / stride), K * 4], K =
        len(scales) * len(aspect_ratios), in [ymin, xmin, ymax, xmax] order."""
        image_height = tf.cast(image_size[0], tf.float32)
        image_width = tf.cast(image_size[1], tf.float32)
        num_anchors = len(self.scales) * len(self.aspect_ratios)
        ratio_sqrt = tf.cast(tf.sqrt(self.aspect_ratios), tf.float32)
        base = tf.cast(self.anchor_size, tf.float32)
        heights = tf.concat([base * scale / ratio_sqrt for scale in self.scales], axis=0)
        widths = tf.concat([base * scale * ratio_sqrt for scale in self.scales], axis=0)
        half_h = tf.reshape(0.5 * heights, [1, 1, num_anchors])
        half_w = tf.reshape(0.5 * widths, [1, 1, num_anchors])
        stride = tf.cast(self.stride, tf.float32)
        center_x = tf.range(0.5 * stride, image_width + 0.5 * stride, stride)
        center_y = tf.range(0.5 * stride, image_height + 0.5 * stride, stride)
        grid_x, grid_y = tf.meshgrid(center_x, center_y)
        grid_x, grid_y = grid_x[..., None], grid_y[..., None]
        corners = [grid_y - half_h, grid_x - half_w, grid_y + half_h, grid_x + half_w]
        if self.clip_boxes:
            limits = [image_height, image_width, image_height, image_width]
            corners = [tf.maximum(tf.minimum(c, limit), 0.0) for c, limit in zip(corners, limits)]
        boxes = tf.stack(corners, axis=-1)  # [h, w, K, 4]
        shape = boxes.shape.as_list()
        return tf.reshape(boxes, [shape[0], shape[1], shape[2] * shape[3]])


def _per_level(params, anchor_sizes):
    """`params` for every level: a flat list of numbers is shared by all levels."""
    if not all(isinstance(p, (int, float)) for p in params):
        return params
    if isinstance(anchor_sizes, dict):
        return {key: params for key in anchor_sizes}
    if isinstance(anchor_sizes, (list, tuple)):
        return [params] * len(anchor_sizes)
    raise ValueError(f"anchor_sizes must be a list, tuple or dict; got {anchor_sizes!r}")


class AnchorGenerator:
    """Anchors for several levels: `anchor_sizes`, `strides` (and optionally per-level
    `scales` / `aspect_ratios`) as lists or as dicts keyed by level; the output has the same
    structure, one `SingleAnchorGenerator` result per level."""

    def __init__(self, anchor_sizes, scales, aspect_ratios, strides, clip_boxes=False):
        aspect_ratios = _per_level(aspect_ratios, anchor_sizes)
        scales = _per_level(scales, anchor_sizes)
        if isinstance(anchor_sizes, dict):
            self.anchor_generators = {
                key: SingleAnchorGenerator(anchor_sizes[key], scales[key], aspect_ratios[key],
                                           strides[key], clip_boxes) for key in anchor_sizes}
        else:
            self.anchor_generators = [
                SingleAnchorGenerator(size, scale, ratio, stride, clip_boxes)
                for size, scale, ratio, stride in zip(anchor_sizes, scales, aspect_ratios,
                                                      strides)]

    def __call__(self, image_size):
        generators = tf.nest.flatten(self.anchor_generators)
        return tf.nest.pack_sequence_as(self.anchor_generators,
                                        [generator(image_size) for generator in generators])
