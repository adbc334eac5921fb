"""TFM's semantic segmentation metrics as Keras 3 metrics: the train `MeanIoU` and the eval
`PerClassIoU`, both fed `update_state(labels, logits)` with the parser's labels dict.

The state is one confusion matrix of pixel counts, a sum: it accumulates across eval steps
and, being a Keras metric variable (summed on read), across the replicas of a
`tf.distribute` strategy. It is kept in float64 so counts stay exact past 2**24 pixels per
cell (a float32 count stops adding ones there; one Cityscapes evaluation has 10**9 pixels).
"""

from __future__ import annotations

from typing import Tuple

import keras
import tensorflow as tf

_STATE_DTYPE = "float64"


def _bilinear_resize_crop_and_pad(logits, rescale_size, crop_size, offset, output_size):
    """Per image b: `logits[b]` bilinearly resized (half-pixel centres) to `rescale_size[b]`,
    shifted up-left by `offset[b]`, cut to `crop_size[b]` at the top left and zero-padded to
    `output_size`; TFM's `bilinear_resize_with_crop_and_pad`. [b, out_h, out_w, classes]."""
    input_h = tf.cast(tf.shape(logits)[1], tf.float32)
    input_w = tf.cast(tf.shape(logits)[2], tf.float32)
    rescale_size = tf.cast(rescale_size, tf.float32)
    offset = tf.cast(offset, tf.float32)

    def axis_samples(start, length, input_length, output_length):
        """Source positions, lower neighbours and in-box flags for one axis, [b, out]."""
        grid = tf.range(output_length, dtype=tf.float32)[tf.newaxis, :]
        start, length = start[:, tf.newaxis], length[:, tf.newaxis]
        scale = tf.math.divide_no_nan(input_length, length)
        position = tf.clip_by_value((grid - start + 0.5) * scale - 0.5, 0.0, input_length - 1.0)
        lower = tf.clip_by_value(tf.floor(position), 0.0, input_length - 2.0)
        inside = (start <= grid) & (grid < start + length)
        return position, lower, inside

    y_pos, y0, y_in = axis_samples(-offset[:, 0], rescale_size[:, 0], input_h, output_size[0])
    x_pos, x0, x_in = axis_samples(-offset[:, 1], rescale_size[:, 1], input_w, output_size[1])
    y1, x1 = y0 + 1.0, x0 + 1.0

    def sample(rows, cols):
        picked = tf.gather(logits, tf.cast(rows, tf.int32), axis=1, batch_dims=1)
        return tf.gather(picked, tf.cast(cols, tf.int32), axis=2, batch_dims=1)

    y_pos, y0, y1 = (t[:, :, tf.newaxis] for t in (y_pos, y0, y1))
    x_pos, x0, x1 = (t[:, tf.newaxis, :] for t in (x_pos, x0, x1))
    weights = [(y1 - y_pos) * (x1 - x_pos), (y1 - y_pos) * (x_pos - x0),
               (y_pos - y0) * (x1 - x_pos), (y_pos - y0) * (x_pos - x0)]
    values = [sample(y0[:, :, 0], x0[:, 0, :]), sample(y0[:, :, 0], x1[:, 0, :]),
              sample(y1[:, :, 0], x0[:, 0, :]), sample(y1[:, :, 0], x1[:, 0, :])]
    resized = (values[0] * weights[0][..., tf.newaxis] + values[1] * weights[1][..., tf.newaxis]
               + values[2] * weights[2][..., tf.newaxis]
               + values[3] * weights[3][..., tf.newaxis])
    in_box = y_in[:, :, tf.newaxis] & x_in[:, tf.newaxis, :]
    in_crop = _top_left_box_mask(crop_size, output_size)
    keep = tf.cast(in_box & in_crop, resized.dtype)[..., tf.newaxis]
    return resized * keep


def _top_left_box_mask(box_size, output_size):
    """[b, out_h, out_w] bool: True inside the top-left box of `box_size[b]` (height, width)."""
    box_size = tf.cast(box_size, tf.int32)
    rows = tf.range(output_size[0])[tf.newaxis, :, tf.newaxis] < box_size[:, 0, None, None]
    cols = tf.range(output_size[1])[tf.newaxis, tf.newaxis, :] < box_size[:, 1, None, None]
    return rows & cols


def preprocess_inputs(labels, logits, rescale_predictions: bool
                      ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(logits at the ground truth's size, masks, valid_masks [b, h, w, 1] bool), as TFM's.

    `rescale_predictions`: logits are rescaled to each image's original size with
    `labels['image_info']` and padded to the masks' size; pixels outside the original image
    are not valid. Otherwise logits are resized (bilinear) to the masks' size.
    Lists/tuples of per-replica tensors are concatenated first.
    """
    masks, valid_masks = labels["masks"], labels["valid_masks"]
    image_info = labels["image_info"]
    if isinstance(logits, (list, tuple)):
        logits, masks, valid_masks, image_info = (
            tf.concat(t, axis=0) for t in (logits, masks, valid_masks, image_info))
    # A pixel is valid when any of its mask layers is.
    valid = tf.reduce_any(tf.cast(valid_masks, tf.bool), axis=-1)
    masks_size = tf.shape(masks)[1:3]
    if rescale_predictions:
        image_shape = tf.cast(image_info[:, 0, :], tf.int32)
        rescale_size = tf.cast(tf.math.ceil(image_info[:, 1, :] / image_info[:, 2, :]),
                               tf.int32)
        logits = _bilinear_resize_crop_and_pad(logits, rescale_size, image_shape,
                                               tf.cast(image_info[:, 3, :], tf.int32),
                                               masks_size)
        valid &= _top_left_box_mask(image_shape, masks_size)
    else:
        logits = tf.image.resize(logits, masks_size, method="bilinear")
    return logits, masks, valid[..., tf.newaxis]


def _confusion_terms(total_cm, dtype):
    """(true positives, union) per class of a confusion matrix [true, predicted]."""
    predicted = tf.cast(tf.reduce_sum(total_cm, axis=0), dtype)
    actual = tf.cast(tf.reduce_sum(total_cm, axis=1), dtype)
    true_positives = tf.cast(tf.linalg.tensor_diag_part(total_cm), dtype)
    return true_positives, predicted + actual - true_positives


class MeanIoU(keras.metrics.MeanIoU):
    """TFM's segmentation `MeanIoU`: the mean IoU over the classes present (in the ground
    truth or the predictions), from `update_state(labels, logits)`.

    Args:
      num_classes: number of classes.
      rescale_predictions: rescale logits to the original image size with
        `labels['image_info']` (ground truth kept at its size, padded) instead of resizing
        them to the masks.
      name: metric name.
      dtype: dtype of the result (the confusion matrix is float64).
    """

    def __init__(self, num_classes: int, rescale_predictions: bool = False, name=None,
                 dtype=None):
        super().__init__(num_classes=num_classes, name=name, dtype=_STATE_DTYPE)
        self._rescale_predictions = rescale_predictions
        self._result_dtype = tf.as_dtype(dtype or "float32")

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Adds a batch: `y_true` the labels dict ('masks', 'valid_masks', 'image_info'),
        `y_pred` logits [b, h, w, classes] (or lists of them). `sample_weight` is not used."""
        del sample_weight  # The valid masks are the weights, as in TFM.
        logits, masks, valid = preprocess_inputs(y_true, y_pred, self._rescale_predictions)
        # Ignored pixels enter the confusion matrix as class 0 with weight 0.
        masks = tf.where(valid, masks, tf.zeros_like(masks))
        predictions = tf.argmax(logits, axis=3)
        return super().update_state(
            tf.reshape(tf.cast(masks, tf.int64), [-1]), tf.reshape(predictions, [-1]),
            sample_weight=tf.reshape(tf.cast(valid, _STATE_DTYPE), [-1]))

    def result(self):
        """Mean IoU of the classes with a non-empty union (0 when none)."""
        true_positives, union = _confusion_terms(self.total_cm, self._result_dtype)
        present = tf.reduce_sum(tf.cast(tf.not_equal(union, 0), self._result_dtype))
        iou = tf.math.divide_no_nan(true_positives, union)
        return tf.math.divide_no_nan(tf.reduce_sum(iou), present)

    def get_config(self):
        return {"num_classes": self.num_classes, "name": self.name,
                "rescale_predictions": self._rescale_predictions,
                "dtype": self._result_dtype.name}


class PerClassIoU(MeanIoU):
    """TFM's `PerClassIoU`: the IoU of each class, a [num_classes] vector (0 for a class absent
    from both ground truth and predictions). TFM's eval logs report it as `iou/<i>` and its
    plain mean (absent classes included) as `mean_iou`."""

    def result(self):
        true_positives, union = _confusion_terms(self.total_cm, self._result_dtype)
        return tf.math.divide_no_nan(true_positives, union)
