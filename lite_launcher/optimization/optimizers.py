"""Keras 3 optimizers for TFM's optimizer types: SGD, RMSprop, Adam and AdamW with TensorFlow's
fused update kernels (as tf_keras ran them), and TFM's layer-adaptive optimizers LAMB and LARS."""

from __future__ import annotations

import re

import keras
import tensorflow as tf
from keras import ops

from lite_launcher.common import keras_adapter
from lite_launcher.common.keras_adapter import DecayReadsScheduleOnce

_register = keras.saving.register_keras_serializable(package="lite_launcher")


def _path_matches(patterns, variable) -> bool:
    """Whether a regex of `patterns` is found in the variable's path (`dense/kernel`), the
    Keras 3 counterpart of TFM's variable names (`dense/kernel:0`)."""
    path = re.sub(r":\d+$", "", getattr(variable, "path", None) or variable.name)
    return any(re.search(p, path) for p in patterns)


def _trust_ratio(variable, direction, coefficient=1.0):
    """`coefficient * ||variable|| / ||direction||`, or 1 where either norm is 0."""
    w_norm = ops.sqrt(ops.sum(ops.square(variable)))
    d_norm = ops.sqrt(ops.sum(ops.square(direction)))
    return ops.where(w_norm > 0, ops.where(d_norm > 0, coefficient * w_norm / d_norm, 1.0), 1.0)


class FusedAdamUpdate:
    """Mixin for Keras 3's Adam and AdamW: the update is one fused TensorFlow op per variable.

    Keras 3 spends about fifteen ops per variable on Adam's update (the bias-correction powers,
    Square, Sqrt, Mul, Sub, Div and three assigns), which on a small model such as ViT-Ti (202
    variables) is a large part of a CPU training step. tf_keras, and so TFM, ran one
    `ResourceApplyAdam`, which computes the same update: `m += (g - m) * (1 - beta_1)`,
    `v += (g**2 - v) * (1 - beta_2)`, `w -= m * lr_t / (sqrt(v) + epsilon)` with
    `lr_t = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)`. Results equal Keras's to float32
    rounding (the kernel evaluates the expression in one pass). Dense gradients without
    `amsgrad` take the kernel; sparse (`IndexedSlices`) gradients and `amsgrad` are Keras's.
    """

    def apply(self, grads, trainable_variables=None):
        # The bias-correction powers depend on the step alone: computed once per apply and
        # dtype (as tf_keras's `_prepare_local`), not once per variable (~7 scalar ops each:
        # 1,400 for ViT-Ti's 202 variables). Set through __dict__: tensors, not tracked state.
        self.__dict__["_adam_powers"] = {}
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self.__dict__["_adam_powers"] = None

    def _powers(self, dtype):
        """(beta_1**t, beta_2**t) at t = iterations + 1, in `dtype`."""
        cache = self.__dict__.get("_adam_powers")
        if cache is not None and dtype in cache:
            return cache[dtype]
        step = tf.cast(self.iterations + 1, dtype)
        powers = (tf.pow(tf.cast(self.beta_1, dtype), step),
                  tf.pow(tf.cast(self.beta_2, dtype), step))
        if cache is not None:
            cache[dtype] = powers
        return powers

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        beta1_power, beta2_power = self._powers(dtype)
        # As in SGD below: `variable` and the slots are the same replica's components.
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=keras_adapter.slot(self, "momentums", variable).value.handle,
            v=keras_adapter.slot(self, "velocities", variable).value.handle,
            beta1_power=beta1_power,
            beta2_power=beta2_power, lr=tf.cast(learning_rate, dtype),
            beta1=tf.cast(self.beta_1, dtype), beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype))


@_register
class Adam(FusedAdamUpdate, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with the fused update (`FusedAdamUpdate`); `optimizer.type:
    adam` builds it."""


@_register
class AdamW(DecayReadsScheduleOnce, FusedAdamUpdate, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose weight decay reads the schedule once per step
    (`DecayReadsScheduleOnce`) and whose update is fused (`FusedAdamUpdate`);
    `optimizer.type: adamw` builds it."""


@_register
class Lion(DecayReadsScheduleOnce, keras.optimizers.Lion):
    """`keras.optimizers.Lion` whose weight decay reads the schedule once per step
    (`DecayReadsScheduleOnce`); `optimizer.type: lion` builds it."""


@_register
class SGD(keras.optimizers.SGD):
    """`keras.optimizers.SGD` whose momentum update is one fused TensorFlow op per variable.

    Keras 3 updates the momentum slot and the variable with four ops per variable (two Mul, a
    Sub, two assigns); tf_keras, and so TFM, ran one `ResourceApplyKerasMomentum`, which
    computes the same update (`m = momentum * m - lr * g`; `w += m`, or with Nesterov
    `w += momentum * m - lr * g`). This class runs that kernel for dense gradients when
    `momentum > 0`; without momentum, and for sparse (`IndexedSlices`) gradients, it is
    Keras's SGD. `optimizer.type: sgd` builds it.
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.momentum == 0 or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        momentum = keras_adapter.slot(self, "momentums", variable)
        # `variable` is the tf.Variable (a replica's component under a strategy); the slot's
        # handle is read in the same update context, so it is the same replica's.
        tf.raw_ops.ResourceApplyKerasMomentum(
            var=variable.handle, accum=momentum.value.handle,
            lr=tf.cast(learning_rate, dtype), grad=tf.cast(gradient, dtype),
            momentum=tf.cast(self.momentum, dtype), use_nesterov=self.nesterov)


@_register
class RMSprop(keras.optimizers.RMSprop):
    """`keras.optimizers.RMSprop` whose update is one fused TensorFlow op per variable.

    Keras 3 spends about ten element-wise ops per variable (Square, Mul, Add, Sqrt, Div and
    assigns); tf_keras, and so TFM, ran `ResourceApplyRMSProp` (`ResourceApplyCenteredRMSProp`
    when `centered`), which computes the same update: `v = rho * v + (1 - rho) * g**2`,
    `m = momentum * m + lr * g / sqrt(v + epsilon)` (centered: `v - mg**2 + epsilon`),
    `w -= m`. This class runs those kernels for dense gradients when `momentum > 0` (the
    kernels need the momentum slot, which Keras creates only then); otherwise it is Keras's
    RMSprop. `optimizer.type: rmsprop` builds it.
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.momentum <= 0 or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        arguments = dict(
            var=variable.handle, ms=keras_adapter.slot(self, "velocities", variable).value.handle,
            mom=keras_adapter.slot(self, "momentums", variable).value.handle,
            lr=tf.cast(learning_rate, dtype),
            rho=tf.cast(self.rho, dtype), momentum=tf.cast(self.momentum, dtype),
            epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype))
        if self.centered:
            tf.raw_ops.ResourceApplyCenteredRMSProp(
                mg=keras_adapter.slot(self, "average_gradients", variable).value.handle,
                **arguments)
        else:
            tf.raw_ops.ResourceApplyRMSProp(**arguments)


@_register
class LAMB(keras.optimizers.Lamb):
    """TFM's LAMB on Keras 3: Keras `Lamb` plus L2 decay inside the trust ratio.

    update = m_hat / (sqrt(v_hat) + epsilon) + weight_decay_rate * var (unless the variable
    matches `exclude_from_weight_decay`); var -= ratio * lr * update, with the trust ratio
    ||var|| / ||update|| (1 where either is 0, or for `exclude_from_layer_adaptation`).
    Patterns are regexes searched in the variable path (`dense/kernel`).
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 weight_decay_rate=0.0, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LAMB", **kwargs):
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2,
                         epsilon=epsilon, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])
        self.exclude_from_layer_adaptation = list(
            exclude_from_layer_adaptation or self.exclude_from_weight_decay)

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        beta_1 = ops.cast(self.beta_1, dtype)
        beta_2 = ops.cast(self.beta_2, dtype)
        m = keras_adapter.slot(self, "momentums", variable)
        v = keras_adapter.slot(self, "velocities", variable)
        self.assign_add(m, (gradient - m) * (1.0 - beta_1))
        self.assign_add(v, (ops.square(gradient) - v) * (1.0 - beta_2))
        m_hat = m / (1.0 - ops.power(beta_1, step))
        v_hat = v / (1.0 - ops.power(beta_2, step))
        update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
        if self.weight_decay_rate and not _path_matches(self.exclude_from_weight_decay,
                                                        variable):
            update = update + self.weight_decay_rate * variable
        if _path_matches(self.exclude_from_layer_adaptation, variable):
            ratio = ops.cast(1.0, dtype)
        else:
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            u_norm = ops.sqrt(ops.sum(ops.square(update)))
            ratio = ops.where(w_norm > 0, ops.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
        self.assign_sub(variable, ratio * lr * update)

    def get_config(self):
        return {**super().get_config(), "weight_decay_rate": self.weight_decay_rate,
                "exclude_from_weight_decay": self.exclude_from_weight_decay,
                "exclude_from_layer_adaptation": self.exclude_from_layer_adaptation}

@_register
class LARS(keras.optimizers.Optimizer):
    """TFM's LARS on Keras 3 (layer-wise adaptive rate scaling; see `LARSConfig`).

    g += weight_decay_rate * w (unless excluded). Classic momentum:
    v = momentum * v + lr * ratio * g with ratio = eeta * ||w|| / ||g||, w -= v (Nesterov:
    w -= momentum * v + lr * ratio * g). Otherwise v = momentum * v + g, u = v (Nesterov:
    momentum * v + g), w -= lr * ratio * u with ratio = eeta * ||w|| / ||u||. The ratio is 1
    where a norm is 0 or the variable is excluded from layer adaptation. Patterns are
    regexes searched in the variable path (`dense/kernel`).
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, weight_decay_rate=0.0, eeta=0.001,
                 nesterov=False, classic_momentum=True, exclude_from_weight_decay=None,
                 exclude_from_layer_adaptation=None, name="LARS", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = float(momentum)
        self.weight_decay_rate = float(weight_decay_rate)
        self.eeta = float(eeta)
        self.nesterov = bool(nesterov)
        self.classic_momentum = bool(classic_momentum)
        self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])
        self.exclude_from_layer_adaptation = list(
            exclude_from_layer_adaptation or self.exclude_from_weight_decay)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        grad = ops.cast(gradient, dtype)
        velocity = keras_adapter.slot(self, "momentums", variable)
        momentum = ops.cast(self.momentum, dtype)
        if self.weight_decay_rate and not _path_matches(self.exclude_from_weight_decay,
                                                        variable):
            grad = grad + self.weight_decay_rate * variable
        adapt = not _path_matches(self.exclude_from_layer_adaptation, variable)
        if self.classic_momentum:
            scaled_lr = lr * _trust_ratio(variable, grad, self.eeta) if adapt else lr
            next_v = momentum * velocity + scaled_lr * grad
            update = momentum * next_v + scaled_lr * grad if self.nesterov else next_v
        else:
            next_v = momentum * velocity + grad
            raw = momentum * next_v + grad if self.nesterov else next_v
            update = (lr * _trust_ratio(variable, raw, self.eeta) if adapt else lr) * raw
        self.assign_sub(variable, update)
        self.assign(velocity, next_v)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum,
                "weight_decay_rate": self.weight_decay_rate, "eeta": self.eeta,
                "nesterov": self.nesterov, "classic_momentum": self.classic_momentum,
                "exclude_from_weight_decay": self.exclude_from_weight_decay,
                "exclude_from_layer_adaptation": self.exclude_from_layer_adaptation}
