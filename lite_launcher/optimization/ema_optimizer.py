"""EMA of the trained weights with TFM's schedule, and the access to the averages.

EMA is Keras 3's own (`use_ema=True`, `ema_momentum=average_decay`): the averages live in the
optimizer, are updated in `apply_gradients` under every strategy and are saved with it in
checkpoints. `ExponentialMovingAverage` (TFM's class name; every optimizer built with
`optimizer_config.ema` is one) adds TFM's `dynamic_decay` and `start_step`, and with
`trainable_weights_only: false` also averages the model's non-trainable variables (BatchNorm
statistics); `<Optimizer>WithEMASchedule` are the built-in optimizers with it. The first
average is a copy of the weights (as in Keras), not zeros.

The averages are a private Keras attribute, reached through `keras_adapter` only.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from lite_launcher.common import keras_adapter
from lite_launcher.optimization.loss_scale import unwrap_loss_scale
from lite_launcher.optimization.optimizers import LAMB, LARS, SGD, Adam, AdamW, Lion, RMSprop

_register = keras.saving.register_keras_serializable(package="lite_launcher")


class ExponentialMovingAverage(keras_adapter.MovingAverageUpdateHook):
    """TFM's `optimization.ExponentialMovingAverage`: an optimizer keeping moving averages.

    Every optimizer built with `optimizer_config.ema` is an instance of it, so TFM's trainer
    code runs as written:

        if isinstance(self.optimizer, optimization.ExponentialMovingAverage):
            self.optimizer.swap_weights()

    On Keras 3 it is a mixin of a Keras optimizer class, not a wrapper around another
    optimizer: Keras's own EMA (`use_ema`, `ema_momentum`) plus TFM's `start_step` and
    `dynamic_decay` (see `EMAConfig`) and, with `ema_trainable_weights_only=False`, averages
    of the model's floating-point non-trainable variables (BatchNorm statistics). Put it first
    among the bases (`class MyOptWithEMASchedule(ExponentialMovingAverage, MyOpt)`); without
    `use_ema` it changes nothing. `EMAScheduleMixin` is the same class.
    """

    def __init__(self, *args, ema_dynamic_decay=True, ema_start_step=0,
                 ema_trainable_weights_only=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.ema_dynamic_decay = bool(ema_dynamic_decay)
        self.ema_start_step = int(ema_start_step)
        self.ema_trainable_weights_only = bool(ema_trainable_weights_only)
        # (model variable, average) of the non-trainable variables; not tracked, so the
        # model's variables are not dependencies of the optimizer (averages are: they are
        # optimizer variables, saved with it).
        object.__setattr__(self, "_lite_non_trainable_ema", ())

    def average_non_trainable_variables(self, variables):
        """Creates averages of `variables` (once); each step then updates them as the
        trained weights' averages and `swap_ema_weights` swaps them too."""
        if self._lite_non_trainable_ema or self.ema_trainable_weights_only:
            return
        pairs = []
        for var in variables:
            # Only floating-point state is averaged (BatchNorm statistics); Keras 3 also keeps
            # integer state there (Dropout's int64 seed), which an average would break.
            if not tf.as_dtype(var.dtype).is_floating:
                continue
            average = self.add_variable_from_reference(var, name="non_trainable_average")
            average.assign(var)
            pairs.append((var, average))
        object.__setattr__(self, "_lite_non_trainable_ema", tuple(pairs))

    def ema_decay(self):
        """The decay of the average update of the step being applied."""
        completed = ops.cast(self.iterations, "float32")
        step = completed + 1.0  # TFM counts the step being applied
        decay = ops.cast(self.ema_momentum, "float32")
        if self.ema_dynamic_decay:
            since = step - float(self.ema_start_step)
            decay = ops.minimum(decay, (1.0 + since) / (10.0 + since))
        # The first update copies the weights (Keras); before start_step they are followed.
        follow = ops.logical_or(completed == 0.0, step < float(self.ema_start_step))
        return ops.where(follow, 0.0, decay)

    def update_moving_averages(self, trainable_variables):
        """TFM's EMA update after a step: `ema_decay()`, the non-trainable averages too."""
        if not self.use_ema:
            return
        decay = self.ema_decay()
        pairs = [*zip(trainable_variables, keras_adapter.moving_averages(self)),
                 *self._lite_non_trainable_ema]
        for var, average in pairs:
            if average is None:
                continue
            d = ops.cast(decay, var.dtype)
            average.assign(ops.add(ops.multiply(d, average), ops.multiply(1.0 - d, var)))

    # ----- TFM's ExponentialMovingAverage API
    def shadow_copy(self, model) -> None:
        """Creates the averages of `model`'s weights now (TFM's name): builds the optimizer on
        `model.trainable_variables` and, with `ema_trainable_weights_only=False`, averages
        its non-trainable variables too. Does nothing when they exist already."""
        if not self.built:
            self.build(model.trainable_variables)
        self.average_non_trainable_variables(list(model.non_trainable_variables))

    @property
    def has_shadow_copy(self) -> bool:
        """Whether the averages exist (the optimizer is built with `use_ema`)."""
        return bool(self.use_ema and self.built)

    def swap_weights(self) -> None:
        """Swaps the trained weights with their averages (TFM's name); twice restores them.

        Call it in cross-replica context, as TFM's (outside `strategy.run`); the swap runs
        in the optimizer's strategy.
        """
        if not self.has_shadow_copy:
            raise ValueError(
                f"Optimizer {self.name!r} has no averages to swap yet; call "
                f"shadow_copy(model) (the Trainer does) or apply a step first.")
        variables = keras_adapter.built_variables(self)
        with keras_adapter.distribution_strategy(self).scope():
            swap_ema_weights(self, variables)

    def get_config(self):
        return {**super().get_config(), "ema_dynamic_decay": self.ema_dynamic_decay,
                "ema_start_step": self.ema_start_step,
                "ema_trainable_weights_only": self.ema_trainable_weights_only}


EMAScheduleMixin = ExponentialMovingAverage  # the name lite used before TFM's


def with_ema_schedule(optimizer_cls: type) -> type:
    """`optimizer_cls` with `ExponentialMovingAverage` first among its bases (itself when it
    has it already); one class per `optimizer_cls`, made once."""
    if issubclass(optimizer_cls, ExponentialMovingAverage):
        return optimizer_cls
    made = _DERIVED_EMA_CLASSES.get(optimizer_cls)
    if made is None:
        made = type(f"{optimizer_cls.__name__}WithEMASchedule",
                    (ExponentialMovingAverage, optimizer_cls),
                    {"__module__": optimizer_cls.__module__,
                     "__doc__": f"`{optimizer_cls.__name__}` with TFM's EMA schedule."})
        _DERIVED_EMA_CLASSES[optimizer_cls] = made
    return made


_DERIVED_EMA_CLASSES: dict = {}


# The built-in optimizers with TFM's EMA schedule (`register_optimizer_cls` takes a user's).
@_register
class SGDWithEMASchedule(EMAScheduleMixin, SGD):
    """lite's `SGD` (fused momentum) with TFM's EMA schedule."""


@_register
class AdamWithEMASchedule(EMAScheduleMixin, Adam):
    """`optimizers.Adam` (Keras's, fused update) with TFM's EMA schedule."""


@_register
class AdamWWithEMASchedule(EMAScheduleMixin, AdamW):
    """lite's `AdamW` (the schedule read once for the decay) with TFM's EMA schedule."""


@_register
class RMSpropWithEMASchedule(EMAScheduleMixin, RMSprop):
    """lite's `RMSprop` (fused update) with TFM's EMA schedule."""


@_register
class AdagradWithEMASchedule(EMAScheduleMixin, keras.optimizers.Adagrad):
    """`keras.optimizers.Adagrad` with TFM's EMA schedule."""


@_register
class LionWithEMASchedule(EMAScheduleMixin, Lion):
    """lite's `Lion` (the schedule read once for the decay) with TFM's EMA schedule."""


@_register
class LAMBWithEMASchedule(EMAScheduleMixin, LAMB):
    """`LAMB` with TFM's EMA schedule."""


@_register
class LARSWithEMASchedule(EMAScheduleMixin, LARS):
    """`LARS` with TFM's EMA schedule."""


def has_ema(optimizer) -> bool:
    """Whether `optimizer` (or the one a LossScaleOptimizer wraps) keeps moving averages."""
    return bool(getattr(unwrap_loss_scale(optimizer), "use_ema", False))


def ema_variables(optimizer) -> list:
    """The moving averages, one per variable the optimizer was built with, in that order.

    Raises ValueError when the optimizer has no EMA or is not built yet (averages are created
    with the slots, at `build` or the first `apply_gradients`).
    """
    inner = unwrap_loss_scale(optimizer)
    if not has_ema(inner):
        raise ValueError(f"Optimizer {inner.name!r} keeps no moving averages; set "
                         f"optimizer_config.ema to train with EMA.")
    if not inner.built:
        raise ValueError(f"Optimizer {inner.name!r} is not built, so it has no moving averages "
                         f"yet; call optimizer.build(model.trainable_variables) first.")
    averages = keras_adapter.moving_averages(inner)
    if averages is None:
        raise RuntimeError(
            f"Keras {keras.__version__} keeps EMA averages somewhere other than "
            f"`optimizer._model_variables_moving_average`; update "
            f"lite_launcher.common.keras_adapter.moving_averages.")
    return list(averages)


def swap_ema_weights(optimizer, variables) -> None:
    """Swaps each of `variables` with its moving average, with `assign` (exact).

    `variables` are model variables the optimizer trains (`model.trainable_variables`, any
    order). The averaged non-trainable variables (`ema.trainable_weights_only: false`, see
    `average_non_trainable_variables`) are swapped too. Calling it twice restores the weights
    bit for bit. Under a distribution strategy call it in cross-replica context (in
    `strategy.scope()`, outside `strategy.run`), eagerly or in a `tf.function`; every
    replica's copy is assigned.
    """
    inner = unwrap_loss_scale(optimizer)
    averages = ema_variables(inner)
    if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
        raise ValueError("swap_ema_weights must run in cross-replica context (outside "
                         "strategy.run), so that every replica's copy is swapped.")
    pairs = []
    for var in variables:
        try:
            index = keras_adapter.variable_index(inner, var)
        except KeyError:
            raise ValueError(
                f"Variable {var.path if hasattr(var, 'path') else var.name!r} is not one the "
                f"optimizer trains, so it has no moving average.") from None
        if averages[index] is not None:  # Keras keeps no average for some special variables
            pairs.append((var, averages[index]))
    pairs.extend(getattr(inner, "_lite_non_trainable_ema", ()))

    def raw(v):
        return v.value if isinstance(v, keras.Variable) else v

    for var, average in pairs:
        var, average = raw(var), raw(average)
        weights = tf.identity(var)
        var.assign(average)
        average.assign(weights)


def average_non_trainable_variables(optimizer, variables) -> None:
    """Creates the averages of a model's non-trainable `variables` (BatchNorm statistics)
    when the optimizer was built with `ema.trainable_weights_only: false`; else does nothing.

    The trainer calls it once, in the strategy scope, after building the optimizer. Each
    `apply_gradients` then updates these averages with the trained weights' decay, and
    `swap_ema_weights` swaps them with the variables.
    """
    inner = unwrap_loss_scale(optimizer)
    track = getattr(inner, "average_non_trainable_variables", None)
    if track is not None:
        track(list(variables))

