"""Loss scaling for float16 training: `configure_loss_scale` and a fixed-scale optimizer."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from lite_launcher.common import keras_adapter
from lite_launcher.core.base_config import ConfigError


@keras.saving.register_keras_serializable(package="lite_launcher")
class FixedLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """A `LossScaleOptimizer` with a loss scale that never changes.

    Keras 3 dropped `dynamic=False`; this is TF2's fixed loss scale: `scale_loss` multiplies
    by `initial_scale`, `apply` divides the gradients by it and always applies them (a
    non-finite gradient is not skipped, as with TF2's fixed scale). `dynamic_scale` stays
    equal to `initial_scale`, so checkpoints match those of the dynamic optimizer.
    """

    def __init__(self, inner_optimizer, initial_scale, dynamic_growth_steps=2000,
                 name=None, **kwargs):
        super().__init__(inner_optimizer, initial_scale=float(initial_scale),
                         dynamic_growth_steps=dynamic_growth_steps, name=name, **kwargs)

    def apply(self, grads, trainable_variables=None):
        if not self.built:
            self.build(trainable_variables)
            self.built = True
        variables = trainable_variables or keras_adapter.built_variables(self)
        # As the dynamic optimizer: variables overwritten by their "gradient" (float8
        # scaling factors) are not unscaled.
        unscaled = [
            g if g is None or getattr(v, "overwrite_with_gradient", False)
            else ops.divide(g, self.initial_scale)
            for g, v in zip(grads, variables)]
        self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)

    def scale_loss(self, loss):
        return ops.multiply(loss, self.initial_scale)


def configure_loss_scale(optimizer, use_float16: bool, loss_scale=None):
    """Wraps `optimizer` for float16 training; returns it unchanged when not `use_float16`.

    `loss_scale` None or "dynamic": `keras.optimizers.LossScaleOptimizer` (start 2**15, halve
    on a non-finite step and skip it, double after 2000 finite steps). A positive number: a
    `FixedLossScaleOptimizer` with that scale for good.
    """
    if not use_float16 or isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    if loss_scale is None or loss_scale == "dynamic":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)) \
            or loss_scale <= 0:
        raise ConfigError(
            f"runtime.loss_scale must be 'dynamic', null or a positive number, "
            f"got {loss_scale!r}.")
    return FixedLossScaleOptimizer(optimizer, float(loss_scale))


# do_not_convert: graph-safe as written (no Python control flow on tensors, no user code
# called), so AutoGraph's conversion would only add time to the first trace (issue 31).
@tf.autograph.experimental.do_not_convert
def unwrap_loss_scale(optimizer):
    """The optimizer inside any LossScaleOptimizer wrappers (`optimizer` itself if none)."""
    while isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    return optimizer
