"""Sigmoid focal loss (Lin et al. 2017), as TFM's `losses/focal_loss.py`.

The values are TFM's; the gradient is written out by hand (`tf.custom_gradient`) instead of
left to autodiff. On RetinaNet the loss runs over every anchor and class (2 x 12,276 x 91
elements for a 256x256 batch of two), and autodiff differentiates each element-wise op of
TFM's formula in turn, among them a `Pow` (gamma 1.5) whose forward alone took 21 ms of a
290 ms MobileNetV2-FPN training step on a 2-core Intel Xeon (op profile in docs/benchmarks.md).
The closed form takes fewer passes over the tensor and no `Pow` for the usual gammas: forward
and backward in less than half of TFM's time (`benchmarks/focal_loss_ab.py`).
"""

import numbers

import keras
import tensorflow as tf


def _modulator(one_minus_q, gamma):
    """(1 - q)^gamma, by multiplications and a square root for the common gammas (a float
    `Pow` is an exp-log per element on CPU; these agree with it to float32 rounding)."""
    if isinstance(gamma, numbers.Real):
        if gamma == 0:
            return tf.ones_like(one_minus_q)
        if gamma == 1:
            return one_minus_q
        if gamma == 2:
            return tf.square(one_minus_q)
        if gamma == 0.5:
            return tf.sqrt(one_minus_q)
        if gamma == 1.5:
            return one_minus_q * tf.sqrt(one_minus_q)
    return tf.pow(one_minus_q, tf.cast(gamma, one_minus_q.dtype))


def sigmoid_focal_loss(y_true, y_pred, alpha, gamma):
    """Element-wise focal loss of logits `y_pred` against targets `y_true` (same shape):
    alpha * (1 - p)^gamma * CE where the target is 1, (1 - alpha) * p^gamma * CE elsewhere
    (p = sigmoid(y_pred), CE the sigmoid cross-entropy, soft targets included). Computed in
    float32; differentiable with respect to `y_pred` (the targets are constants)."""
    y_true = tf.cast(y_true, tf.float32)
    positive = tf.equal(y_true, 1.0)
    gamma_value = gamma if isinstance(gamma, numbers.Real) else tf.cast(gamma, tf.float32)

    @tf.custom_gradient
    def focal(logits):
        probs = tf.sigmoid(logits)
        # 1 - q, q the probability given to the target: (1 - p) at positives, p elsewhere.
        one_minus_q = tf.where(positive, 1.0 - probs, probs)
        modulator = _modulator(one_minus_q, gamma)
        # softplus(x) - x*z is the sigmoid cross-entropy; its only cancellation (z = 1, large
        # x) is where the modulator is ~0.
        cross_entropy = tf.math.softplus(logits) - logits * y_true
        weighted_modulator = tf.where(positive, alpha, 1.0 - alpha) * modulator
        loss = weighted_modulator * cross_entropy

        def grad(upstream):
            # d/dx [w (1-q)^g CE] = w (1-q)^g [(p - z) - g s (1-u) CE], u = 1 - q, s = +1 at
            # positives and -1 elsewhere (dq/dx = s q (1 - q)); no (1-q)^(g-1) appears.
            focusing = gamma_value * (1.0 - one_minus_q) * cross_entropy
            return upstream * weighted_modulator * (
                (probs - y_true) - tf.where(positive, focusing, -focusing))

        return loss, grad

    return focal(tf.cast(y_pred, tf.float32))


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
