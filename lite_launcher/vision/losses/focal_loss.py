"""Sigmoid focal loss (Lin et al. 2017), as TFM's `losses/focal_loss.py`."""

import keras
import tensorflow as tf


def sigmoid_focal_loss(y_true, y_pred, alpha, gamma):
    """Element-wise focal loss of logits `y_pred` against 0/1 targets `y_true` (same shape):
    alpha * (1 - p)^gamma * CE where the target is 1, (1 - alpha) * p^gamma * CE elsewhere
    (p = sigmoid(y_pred), CE the sigmoid cross-entropy). Computed in float32."""
    y_true = tf.cast(y_true, tf.float32)
    y_pred = tf.cast(y_pred, tf.float32)
    positive = tf.equal(y_true, 1.0)
    cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    probs = tf.sigmoid(y_pred)
    probs_of_target = tf.where(positive, probs, 1.0 - probs)
    loss = tf.pow(1.0 - probs_of_target, gamma) * cross_entropy
    return tf.where(positive, alpha * loss, (1.0 - alpha) * loss)


class FocalLoss(keras.losses.Loss):
    """`sigmoid_focal_loss` as a Keras loss: `reduction="sum"` is what RetinaNet uses (the
    task divides by the number of positive anchors itself)."""

    def __init__(self, alpha, gamma, reduction="sum_over_batch_size", name=None):
        super().__init__(reduction=reduction, name=name)
        self._alpha = alpha
        self._gamma = gamma

    def call(self, y_true, y_pred):
        return sigmoid_focal_loss(y_true, y_pred, self._alpha, self._gamma)

    def get_config(self):
        return {**super().get_config(), "alpha": self._alpha, "gamma": self._gamma}
