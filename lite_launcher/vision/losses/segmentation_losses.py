"""TFM's semantic segmentation loss: per-pixel cross entropy over the pixels that are not
`ignore_label`, with label smoothing, class weights and hard-pixel mining (top k percent)."""

from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf

from lite_launcher.vision.ops.preprocess_ops import binarize_matting_map

EPSILON = 1e-5


class SegmentationLoss:
    """TFM's `SegmentationLoss`: `loss_fn(logits [b, h, w, classes], masks [b, H, W, 1])` is the
    mean (or top-k mean) weighted cross entropy over the valid pixels, a scalar.

    `use_groundtruth_dimension`: logits are resized (bilinear) to the masks' size; otherwise the
    masks are resized (nearest) to the logits'. `gt_is_matting_map`: masks hold a foreground
    probability in [0, 1] (2 classes only); ignore_label marks padding only.
    """

    def __init__(self, label_smoothing: float, class_weights: Optional[Sequence[float]],
                 ignore_label: int, use_groundtruth_dimension: bool,
                 use_binary_cross_entropy: bool = False, top_k_percent_pixels: float = 1.0,
                 gt_is_matting_map: bool = False):
        self._label_smoothing = label_smoothing
        self._class_weights = list(class_weights or ())
        self._ignore_label = ignore_label
        self._use_groundtruth_dimension = use_groundtruth_dimension
        self._use_binary_cross_entropy = use_binary_cross_entropy
        self._top_k_percent_pixels = top_k_percent_pixels
        self._gt_is_matting_map = gt_is_matting_map

    def _check(self, num_classes: int, num_layers: int):
        if not self._use_binary_cross_entropy and num_layers > 1:
            raise ValueError(f"Ground-truth masks must have 1 layer for categorical cross "
                             f"entropy, got {num_layers}; set use_binary_cross_entropy.")
        if self._gt_is_matting_map and (num_classes != 2 or num_layers > 1):
            raise ValueError(f"A matting-map ground truth needs 2 classes and 1 mask layer, "
                             f"got {num_classes} classes and {num_layers} layers.")
        if self._class_weights and len(self._class_weights) != num_classes:
            raise ValueError(f"class_weights has {len(self._class_weights)} entries; the model "
                             f"has {num_classes} classes.")

    def __call__(self, logits, labels):
        """The loss of a batch (0-d tensor of the logits' dtype)."""
        _, height, width, num_classes = logits.shape.as_list()
        self._check(num_classes, labels.shape.as_list()[-1])
        dtype = logits.dtype
        class_weights = tf.constant(self._class_weights or [1.0] * num_classes, dtype)
        if not self._gt_is_matting_map:
            labels = tf.cast(labels, tf.int32)
        if self._use_groundtruth_dimension:
            logits = tf.image.resize(logits, tf.shape(labels)[1:3], method="bilinear")
        else:
            labels = tf.image.resize(labels, (height, width), method="nearest")
        layer_valid = tf.not_equal(tf.cast(labels, tf.int32), self._ignore_label)
        soft_labels = self._soft_labels(labels, layer_valid, num_classes, dtype)
        valid = tf.cast(tf.reduce_any(layer_valid, axis=-1), dtype)
        if self._use_binary_cross_entropy:
            pixel_loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=soft_labels,
                                                                 logits=logits)
            pixel_loss = pixel_loss * class_weights * valid[..., tf.newaxis]
            num_valid = tf.reduce_sum(valid) * num_classes
        else:
            pixel_loss = tf.nn.softmax_cross_entropy_with_logits(labels=soft_labels,
                                                                 logits=logits)
            if self._gt_is_matting_map:
                labels = binarize_matting_map(labels)
            # Each pixel weighted by its true class's weight (an ignored pixel's one-hot row
            # is all zeros).
            true_class = tf.one_hot(tf.cast(labels[..., 0], tf.int32), num_classes, dtype=dtype)
            pixel_weight = tf.reduce_sum(true_class * class_weights, axis=-1)
            pixel_loss = pixel_loss * pixel_weight * valid
            num_valid = tf.reduce_sum(valid)
        if self._top_k_percent_pixels < 1.0:
            return self._top_k_mean(pixel_loss, num_valid)
        return tf.reduce_sum(pixel_loss) / (num_valid + EPSILON)

    def _soft_labels(self, labels, layer_valid, num_classes: int, dtype):
        """Per-pixel target distribution [b, h, w, classes], label smoothing applied."""
        if self._gt_is_matting_map:
            targets = tf.concat([1 - labels, labels], axis=-1)
        else:
            # Ignored pixels become class -1: an all-zero one-hot row.
            labels = tf.where(layer_valid, labels, -1)
            if self._use_binary_cross_entropy:
                # A pixel may belong to several classes (one per mask layer).
                targets = tf.reduce_max(tf.one_hot(labels, num_classes, dtype=dtype), axis=-2)
            else:
                targets = tf.one_hot(labels[..., 0], num_classes, dtype=dtype)
        targets = tf.cast(targets, dtype)
        return targets * (1 - self._label_smoothing) + self._label_smoothing / num_classes

    def _top_k_mean(self, pixel_loss, num_valid):
        """Mean of the largest `top_k_percent_pixels` of the pixel losses (at most the number
        of valid pixels counted in the normaliser)."""
        pixel_loss = tf.reshape(pixel_loss, [-1])
        k = tf.cast(self._top_k_percent_pixels * tf.cast(tf.size(pixel_loss), tf.float32),
                    tf.int32)
        top_losses, _ = tf.math.top_k(pixel_loss, k=k)
        normalizer = tf.minimum(tf.cast(k, top_losses.dtype),
                                tf.cast(num_valid, top_losses.dtype))
        return tf.reduce_sum(top_losses) / (normalizer + EPSILON)

