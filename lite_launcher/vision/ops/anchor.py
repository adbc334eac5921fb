"""Multilevel anchors and anchor labelling for dense detectors, as TFM's `ops/anchor.py`.

`Anchor` lays `num_scales * len(aspect_ratios)` anchors on every cell of each pyramid level;
`AnchorLabeler` turns one image's ground truths into per-level classification and box
targets with TFM's conventions:

* an anchor whose best IoU is >= `match_threshold` is positive (class target = its ground
  truth's class, box weight 1); below `unmatched_threshold` it is negative; in between it is
  ignored (class weight 0). Every ground truth is also forced onto its best anchor, which
  becomes positive whatever its IoU.
* negative and ignored anchors get class target -1 (no class: all zeros after one-hot) and box
  weight 0; their box targets encode an empty box and must be masked by `box_weights`.
* `cls_weights` is 1 for positive and negative anchors and 0 for ignored ones (times the
  optional per-ground-truth `gt_weights` for positives).
"""

import collections
import math

import tensorflow as tf

from lite_launcher.vision.ops import box_matcher
from lite_launcher.vision.ops import box_ops
from lite_launcher.vision.ops import iou_similarity
from lite_launcher.vision.ops import target_gather


class Anchor:
    """Anchors of levels `min_level`..`max_level` for an image of `image_size` ([h, w],
    Python ints).

    On level l the grid has ceil(h / 2^l) x ceil(w / 2^l) cells; each holds, for every
    intermediate scale 2^(s / num_scales) and aspect ratio r (width / height), a box of side
    `anchor_size * 2^l * 2^(s / num_scales)` stretched by sqrt(r) in x and 1 / sqrt(r) in y,
    scale-major. `multilevel_boxes` maps `str(level)` to [h_l, w_l, A * 4] (yxyx, pixels);
    `boxes` is all of them flattened to [num_anchors, 4] in level order.
    """

    def __init__(self, min_level, max_level, num_scales, aspect_ratios, anchor_size,
                 image_size):
        if min_level > max_level:
            raise ValueError(f"min_level ({min_level}) must be <= max_level ({max_level})")
        self.min_level = min_level
        self.max_level = max_level
        self.num_scales = num_scales
        self.aspect_ratios = aspect_ratios
        self.anchor_size = anchor_size
        self.image_size = image_size
        self.multilevel_boxes = self._generate_multilevel_boxes()

    def _generate_multilevel_boxes(self):
        height, width = self.image_size[0], self.image_size[1]
        multilevel_boxes = collections.OrderedDict()
        for level in range(self.min_level, self.max_level + 1):
            cells_y = math.ceil(height / 2**level)
            cells_x = math.ceil(width / 2**level)
            stride_y = tf.cast(height / cells_y, tf.float32)
            stride_x = tf.cast(width / cells_x, tf.float32)
            grid_x, grid_y = tf.meshgrid(tf.range(stride_x / 2, width, stride_x),
                                         tf.range(stride_y / 2, height, stride_y))
            level_boxes = []
            for scale in range(self.num_scales):
                for aspect_ratio in self.aspect_ratios:
                    side = self.anchor_size * 2**level * 2 ** (scale / self.num_scales)
                    half_x = side * aspect_ratio**0.5 / 2.0
                    half_y = side * aspect_ratio**-0.5 / 2.0
                    level_boxes.append(tf.stack([grid_y - half_y, grid_x - half_x,
                                                 grid_y + half_y, grid_x + half_x], axis=-1))
            multilevel_boxes[str(level)] = tf.concat(level_boxes, axis=-1)
        return multilevel_boxes

    @property
    def anchors_per_location(self):
        """A: anchors per grid cell (num_scales * len(aspect_ratios))."""
        return self.num_scales * len(self.aspect_ratios)

    @property
    def boxes(self):
        """All anchors [num_anchors, 4], level by level, cell by cell (the labels' order)."""
        return flatten_multilevel_boxes(self.multilevel_boxes)


def flatten_multilevel_boxes(multilevel_boxes):
    """Dict of [..., h_l, w_l, A * 4] per level -> [num_anchors, 4] (or [B, num_anchors, 4]
    when batched), concatenated in the dict's order."""
    return tf.concat([tf.reshape(boxes, [-1, 4]) if len(boxes.shape) == 3
                      else tf.reshape(boxes, [tf.shape(boxes)[0], -1, 4])
                      for boxes in multilevel_boxes.values()], axis=-2)


class AnchorGenerator:
    """`Anchor`'s levels, scales, ratios and size, called with an image size (TFM's
    `AnchorGeneratorv2`): image_size [h, w] -> `Anchor(...).multilevel_boxes`."""

    def __init__(self, min_level, max_level, num_scales, aspect_ratios, anchor_size):
        self.min_level = min_level
        self.max_level = max_level
        self.num_scales = num_scales
        self.aspect_ratios = aspect_ratios
        self.anchor_size = anchor_size
        self._constants = {}  # (h, w) -> {level: NumPy boxes}, see `constant`

    def __call__(self, image_size):
        return Anchor(self.min_level, self.max_level, self.num_scales, self.aspect_ratios,
                      self.anchor_size, image_size).multilevel_boxes

    def constant(self, image_size):
        """`self(image_size)` for a static [h, w], as one constant per level.

        The values are computed once, eagerly on the host, and kept: a parser traced into a
        tf.data map then holds a constant instead of the few ops per level and anchor shape
        (~200 for RetinaNet's 5 levels x 9 anchors) that TensorFlow's graph optimisation
        would fold again at every iterator creation (each evaluation) or every element would
        run. The values are `self(image_size)`'s, bit for bit.
        """
        key = tuple(int(s) for s in image_size)
        if key not in self._constants:
            with tf.init_scope(), tf.device("/cpu:0"):
                self._constants[key] = {level: boxes.numpy()
                                        for level, boxes in self(key).items()}
        return collections.OrderedDict(
            (level, tf.constant(value)) for level, value in self._constants[key].items())


def tile_to_batch(multilevel_boxes, images):
    """{str(level): [h_l, w_l, 4 * A]} -> {str(level): [B, h_l, w_l, 4 * A]}, B the batch
    of `images`."""
    batch_size = tf.shape(images)[0]
    return {level: tf.tile(boxes[None], [batch_size, 1, 1, 1])
            for level, boxes in multilevel_boxes.items()}


def batch_multilevel_boxes(images, min_level, max_level, num_scales, aspect_ratios,
                           anchor_size):
    """The anchors of `images`' static height and width, for each image of the batch
    ({str(level): [B, h_l, w_l, 4 * A]}): what TFM's detection models generate when they
    are called without anchors."""
    height, width = images.shape[1], images.shape[2]
    if height is None or width is None:
        raise ValueError(f"images of shape {images.shape} have no static height and width "
                         f"to generate anchors from; pass anchor_boxes.")
    return tile_to_batch(Anchor(min_level, max_level, num_scales, aspect_ratios, anchor_size,
                                (int(height), int(width))).multilevel_boxes, images)


def build_anchor_generator(min_level, max_level, num_scales, aspect_ratios, anchor_size):
    """The `AnchorGenerator` the RetinaNet parser and the serving module call per image size."""
    return AnchorGenerator(min_level, max_level, num_scales, aspect_ratios, anchor_size)


def unpack_targets(targets, anchor_boxes_dict):
    """Per-anchor targets [num_anchors, M] -> dict of [h_l, w_l, A * M] per level, in the
    order of `anchor_boxes_dict` (whose [h_l, w_l, A * 4] static shapes give the split)."""
    unpacked = collections.OrderedDict()
    start = 0
    for level, boxes in anchor_boxes_dict.items():
        cells_y, cells_x, coords = boxes.shape.as_list()
        count = cells_y * cells_x * (coords // 4)
        unpacked[level] = tf.reshape(targets[start:start + count], [cells_y, cells_x, -1])
        start += count
    return unpacked


def encode_matched_boxes(gt_boxes, match_indices, unmatched, anchors, weights=None):
    """`box_ops.encode_boxes(boxes, anchors, weights)` of each anchor's matched ground truth
    (`gt_boxes[match_indices]`, an all-zero box where `unmatched`), the same values bit for bit.

    The box side of the code (centre, size) is computed once per ground truth, with one
    all-zero box appended for the unmatched anchors, and gathered per anchor; the four codes
    are [num_anchors] vectors stacked and transposed once. Gathering [N, 4] boxes per anchor
    first, masking them, splitting them into [num_anchors, 1] columns and concatenating four
    such columns back moved a few bytes per anchor through a dozen ops each.

    Args:
      gt_boxes: [N, 4] yxyx (N may be 0).
      match_indices: int [num_anchors] rows of `gt_boxes`.
      unmatched: bool [num_anchors]: these anchors encode the zero box instead.
      anchors: [num_anchors, 4] yxyx.
      weights: optional [wy, wx, wh, ww].

    Returns:
      [num_anchors, 4] float codes (dy, dx, dh, dw).
    """
    dtype = anchors.dtype
    boxes = tf.concat([tf.cast(gt_boxes, dtype), tf.zeros([1, 4], dtype)], axis=0)
    index = tf.where(unmatched, tf.shape(boxes)[0] - 1, tf.cast(match_indices, tf.int32))

    def centres_and_sizes(corners):  # [K, 4] -> [K, 4]: y and x centres, heights, widths
        ymin, xmin, ymax, xmax = tf.unstack(corners, axis=1)
        height, width = ymax - ymin, xmax - xmin
        return tf.stack([ymin + 0.5 * height, xmin + 0.5 * width, height, width], axis=1)

    # Whole rows gathered, then one transpose to four [num_anchors] vectors: a gather of
    # single elements along the last axis costs three times as much.
    box_yc, box_xc, box_h, box_w = tf.unstack(tf.transpose(
        tf.gather(centres_and_sizes(boxes), index)))
    anchor_yc, anchor_xc, anchor_h, anchor_w = tf.unstack(
        tf.transpose(centres_and_sizes(anchors)))
    anchor_h += box_ops.EPSILON
    anchor_w += box_ops.EPSILON
    box_h += box_ops.EPSILON
    box_w += box_ops.EPSILON
    # Each code its own [num_anchors] tensor, as encode_boxes computes it: the vectorised log
    # then takes the same elements in the same lanes, so the values match bit for bit.
    codes = [(box_yc - anchor_yc) / anchor_h, (box_xc - anchor_xc) / anchor_w,
             tf.math.log(box_h / anchor_h), tf.math.log(box_w / anchor_w)]
    if weights:
        codes = [code * weight for code, weight in zip(codes, weights)]
    return tf.transpose(tf.stack(codes))


class AnchorLabeler:
    """Labels one image's anchors (see the module docstring for the conventions).

    `box_coder_weights`: optional [wy, wx, wh, ww] multiplying the encoded box targets.
    """

    def __init__(self, match_threshold=0.5, unmatched_threshold=0.5, box_coder_weights=None):
        if unmatched_threshold > match_threshold:
            raise ValueError(f"unmatched_threshold ({unmatched_threshold}) must be <= "
                             f"match_threshold ({match_threshold})")
        self.similarity_calc = iou_similarity.IouSimilarity()
        self.target_gather = target_gather.TargetGather()
        self.matcher = box_matcher.BoxMatcher(thresholds=[unmatched_threshold, match_threshold],
                                              indicators=[-1, -2, 1],
                                              force_match_for_each_col=True)
        self.box_coder_weights = box_coder_weights

    def _match(self, anchor_boxes, gt_boxes):
        """(flattened anchors, matched ground truth per anchor, match indicator per anchor)."""
        anchors = flatten_multilevel_boxes(anchor_boxes)
        match_indices, indicators = self.matcher(self.similarity_calc(anchors, gt_boxes))
        return anchors, match_indices, indicators

    def label_anchors(self, anchor_boxes, gt_boxes, gt_labels, gt_attributes=None,
                      gt_weights=None):
        """Targets for one image.

        Args:
          anchor_boxes: dict `str(level)` -> [h_l, w_l, A * 4] (`Anchor.multilevel_boxes`).
          gt_boxes: [N, 4] yxyx in the anchors' pixel space (N may be 0).
          gt_labels: int [N, 1] classes.
          gt_attributes: optional dict name -> float [N, size].
          gt_weights: optional float [N] per-ground-truth weights.

        Returns:
          `(cls_targets, box_targets, attribute_targets, cls_weights, box_weights)`: dicts
          per level of [h_l, w_l, A] (int, -1 where not positive) and [h_l, w_l, A * 4]
          (encoded), a dict name -> per-level [h_l, w_l, A * size] (0 where not positive),
          and flat float [num_anchors] class and box weights.
        """
        anchors, match_indices, indicators = self._match(anchor_boxes, gt_boxes)
        not_positive = indicators <= 0
        cls_mask = not_positive[:, None]
        cls_targets = self.target_gather(gt_labels, match_indices, cls_mask, -1)
        attribute_targets = {}
        for name, values in (gt_attributes or {}).items():
            mask = tf.tile(cls_mask, [1, values.shape[-1]])
            attribute_targets[name] = unpack_targets(
                self.target_gather(values, match_indices, mask, 0.0), anchor_boxes)

        has_gt = tf.shape(gt_labels)[0] > 0
        weights = tf.cond(has_gt, lambda: tf.ones_like(gt_labels, tf.float32)[..., -1],
                          lambda: tf.ones([1], tf.float32))
        if gt_weights is not None:
            weights = tf.cond(has_gt, lambda: weights * gt_weights, lambda: weights)
        box_weights = self.target_gather(weights, match_indices, not_positive)
        cls_weights = self.target_gather(weights, match_indices, tf.equal(indicators, -2))
        box_targets = encode_matched_boxes(gt_boxes, match_indices, not_positive, anchors,
                                           self.box_coder_weights)
        return (unpack_targets(cls_targets, anchor_boxes),
                unpack_targets(box_targets, anchor_boxes), attribute_targets, cls_weights,
                box_weights)


class RpnAnchorLabeler(AnchorLabeler):
    """Labels anchors for a region proposal network (Faster / Mask R-CNN): positive at IoU
    >= `match_threshold`, negative below `unmatched_threshold`, then `rpn_batch_size_per_im`
    anchors sampled with at most `rpn_fg_fraction` positives.

    Sampling is random (seeded by `seed` when given). With `deterministic=True` the
    positives and negatives with the lowest anchor indices are kept instead, for tests and
    reproducible evaluation; TFM has only the random path.
    """

    def __init__(self, match_threshold=0.7, unmatched_threshold=0.3, rpn_batch_size_per_im=256,
                 rpn_fg_fraction=0.5, seed=None, deterministic=False):
        super().__init__(match_threshold=match_threshold,
                         unmatched_threshold=unmatched_threshold)
        self._rpn_batch_size_per_im = rpn_batch_size_per_im
        self._rpn_fg_fraction = rpn_fg_fraction
        self._seed = seed
        self._deterministic = deterministic

    def _pick(self, candidates, count):
        """Bool mask: at most `count` of the True entries of `candidates` [M]."""
        if self._deterministic:
            order = tf.cast(tf.range(tf.shape(candidates)[0]), tf.float32)
            keys = tf.where(candidates, -order, -tf.float32.max)
        else:
            noise = tf.random.uniform(tf.shape(candidates), seed=self._seed)
            keys = tf.where(candidates, noise, -1.0)
        # The `count` largest keys among the candidates, ties by index: top_k's own order
        # (equal keys, lower index first). A partial selection of `count` (<= 256) among
        # ~16k anchors, where ranking every anchor (two full sorts) was the parser's
        # largest cost.
        size = tf.shape(candidates)[0]
        count = tf.clip_by_value(tf.cast(count, tf.int32), 0, size)
        _, chosen = tf.math.top_k(keys, k=count)
        picked = tf.scatter_nd(chosen[:, None], tf.ones_like(chosen, tf.bool), [size])
        return candidates & picked

    def _sample(self, indicators):
        """Score targets [M]: 1 sampled positive, 0 sampled negative, -1 not sampled."""
        positive = indicators > -1
        negative = tf.equal(indicators, -1)
        max_positives = int(self._rpn_batch_size_per_im * self._rpn_fg_fraction)
        positives = self._pick(positive, max_positives)
        num_negatives = self._rpn_batch_size_per_im - tf.reduce_sum(tf.cast(positives, tf.int32))
        negatives = self._pick(negative, num_negatives)
        return tf.where(positives, 1, tf.where(negatives, 0, -1))

    def label_anchors(self, anchor_boxes, gt_boxes, gt_labels):  # pylint: disable=arguments-differ
        """Returns `(score_targets, box_targets)`, dicts per level of [h_l, w_l, A] (int:
        1 / 0 / -1 as in `_sample`) and [h_l, w_l, A * 4] (encoded; 0 where unmatched)."""
        del gt_labels  # An RPN only tells objects from background.
        anchors, match_indices, indicators = self._match(anchor_boxes, gt_boxes)
        matched = indicators >= 0
        box_targets = encode_matched_boxes(gt_boxes, match_indices, tf.logical_not(matched),
                                           anchors)
        box_targets = tf.where(matched[:, None], box_targets, tf.zeros_like(box_targets))
        return (unpack_targets(self._sample(indicators), anchor_boxes),
                unpack_targets(box_targets, anchor_boxes))
