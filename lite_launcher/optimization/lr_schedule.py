"""Learning-rate schedules of TFM's `lr_schedule.py` as Keras 3 `LearningRateSchedule`s.

`Offset` shifts any schedule by `offset` steps; TFM's `*WithOffset` names are `Offset`s built
from the Keras schedule's arguments. Every schedule is registered with Keras serialization
(package `lite_launcher`), so an optimizer's config round-trips. `learning_rate_value` reads an
optimizer's current rate for the trainer's logs.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from lite_launcher.optimization.loss_scale import unwrap_loss_scale

_schedules = keras.optimizers.schedules
_register = keras.saving.register_keras_serializable(package="lite_launcher")


def _shifted(step, offset):
    # Before `offset` a schedule stays at its step-0 value (TFM evaluates it at a negative
    # step there, which for exponential or polynomial decay exceeds the initial rate).
    return tf.maximum(tf.cast(step, tf.float32) - float(offset), 0.0)


def _lr_at(lr, step):
    if isinstance(lr, _schedules.LearningRateSchedule):
        return tf.cast(lr(step), tf.float32)
    return tf.constant(lr, tf.float32)


def _serialize_lr(lr):
    if isinstance(lr, _schedules.LearningRateSchedule):
        return _schedules.serialize(lr)
    return float(lr)


def _deserialize_lr(lr):
    return _schedules.deserialize(lr) if isinstance(lr, dict) else lr


@_register
class Offset(_schedules.LearningRateSchedule):
    """`schedule` evaluated at `max(step - offset, 0)`: it starts `offset` steps late and holds
    its step-0 value until then."""

    def __init__(self, schedule, offset=0, name=None):
        super().__init__()
        self.schedule = _deserialize_lr(schedule)
        self.offset = int(offset)
        self.name = name or getattr(self.schedule, "name", None) or "Offset"

    def __call__(self, step):
        return self.schedule(_shifted(step, self.offset))

    def get_config(self):
        return {"schedule": _serialize_lr(self.schedule), "offset": self.offset,
                "name": self.name}


class _KerasScheduleWithOffset(Offset):
    """TFM's `<Keras schedule>WithOffset`: the Keras schedule of the constructor's arguments,
    shifted by `offset`. Its config is the Keras schedule's plus `offset`, as TFM's."""

    def get_config(self):
        return {**self.schedule.get_config(), "offset": self.offset}


@_register
class PiecewiseConstantDecayWithOffset(_KerasScheduleWithOffset):
    """Keras `PiecewiseConstantDecay` of `step - offset`."""

    def __init__(self, boundaries, values, offset=0, name="PiecewiseConstantDecay"):
        super().__init__(_schedules.PiecewiseConstantDecay(
            list(boundaries), [float(v) for v in values], name=name), offset, name)


@_register
class ExponentialDecayWithOffset(_KerasScheduleWithOffset):
    """Keras `ExponentialDecay` of `step - offset`."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 offset=0, name="ExponentialDecay"):
        super().__init__(_schedules.ExponentialDecay(
            float(initial_learning_rate), decay_steps, float(decay_rate),
            staircase=bool(staircase), name=name), offset, name)


@_register
class PolynomialDecayWithOffset(_KerasScheduleWithOffset):
    """Keras `PolynomialDecay` of `step - offset`."""

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001,
                 power=1.0, cycle=False, offset=0, name="PolynomialDecay"):
        super().__init__(_schedules.PolynomialDecay(
            float(initial_learning_rate), decay_steps, end_learning_rate=float(end_learning_rate),
            power=float(power), cycle=cycle, name=name), offset, name)


@_register
class CosineDecayWithOffset(_KerasScheduleWithOffset):
    """Keras `CosineDecay` (no Keras warmup) of `step - offset`."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, offset=0,
                 name="CosineDecay", warmup_target=None, warmup_steps=0):
        # warmup_* only round-trip Keras's get_config; this project warms up separately.
        super().__init__(_schedules.CosineDecay(
            float(initial_learning_rate), decay_steps, alpha=float(alpha), name=name,
            warmup_target=warmup_target, warmup_steps=warmup_steps), offset, name)


class _ArgsConfigSchedule(_schedules.LearningRateSchedule):
    """A schedule whose constructor arguments are its config (as TFM's)."""

    _ARGS = ()

    def get_config(self):
        return {name: getattr(self, name) for name in self._ARGS}


@_register
class DirectPowerDecay(_ArgsConfigSchedule):
    """TFM's `initial_learning_rate * max(step, 1) ** power`."""

    _ARGS = ("initial_learning_rate", "power", "name")

    def __init__(self, initial_learning_rate, power=1.0, name="DirectPowerDecay"):
        super().__init__()
        self.initial_learning_rate = float(initial_learning_rate)
        self.power = float(power)
        self.name = name

    def __call__(self, step):
        step = tf.maximum(tf.cast(step, tf.float32), 1.0)  # step 0 would give inf
        return self.initial_learning_rate * tf.pow(step, self.power)


@_register
class PowerAndLinearDecay(_ArgsConfigSchedule):
    """TFM's power decay times a final linear decay (see `PowerAndLinearDecayLrConfig`)."""

    _ARGS = ("initial_learning_rate", "total_decay_steps", "power", "linear_decay_fraction",
             "offset", "name")

    def __init__(self, initial_learning_rate, total_decay_steps, power=1.0,
                 linear_decay_fraction=0.1, offset=0, name="PowerAndLinearDecay"):
        super().__init__()
        self.initial_learning_rate = float(initial_learning_rate)
        self.total_decay_steps = int(total_decay_steps)
        self.power = float(power)
        self.linear_decay_fraction = float(linear_decay_fraction)
        self.offset = int(offset)
        self.name = name

    def __call__(self, step):
        step = tf.cast(step, tf.float32) - float(self.offset)
        lr = self.initial_learning_rate * tf.pow(tf.maximum(step, 1.0), self.power)
        linear_steps = self.total_decay_steps * self.linear_decay_fraction
        if linear_steps > 0:
            lr *= tf.minimum(1.0, (self.total_decay_steps - step) / linear_steps)
            lr = tf.maximum(lr, 0.0)
        return lr


@_register
class PowerDecayWithOffset(_ArgsConfigSchedule):
    """TFM's `pre_offset_learning_rate` until `offset`, then power decay capped by it."""

    _ARGS = ("initial_learning_rate", "power", "offset", "pre_offset_learning_rate", "name")

    def __init__(self, initial_learning_rate, power=1.0, offset=0,
                 pre_offset_learning_rate=1.0e6, name="PowerDecayWithOffset"):
        super().__init__()
        self.initial_learning_rate = float(initial_learning_rate)
        self.power = float(power)
        self.offset = int(offset)
        self.pre_offset_learning_rate = float(pre_offset_learning_rate)
        self.name = name

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        decayed = self.initial_learning_rate * tf.pow(
            tf.maximum(step - float(self.offset), 1.0), self.power)
        lr = tf.where(step > float(self.offset), decayed, self.pre_offset_learning_rate)
        return tf.minimum(lr, self.pre_offset_learning_rate)


@_register
class StepCosineDecayWithOffset(_ArgsConfigSchedule):
    """TFM's stepwise cosine decay (see `StepCosineLrConfig`); holds `values[-1]` after the
    last boundary (where TFM divides by zero) and its step-0 value before `offset`."""

    _ARGS = ("boundaries", "values", "offset", "name")

    def __init__(self, boundaries, values, offset=0, name="StepCosineDecayWithOffset"):
        super().__init__()
        self.boundaries = [int(b) for b in boundaries]
        self.values = [float(v) for v in values]
        self.offset = int(offset)
        self.name = name
        if not self.values or len(self.values) != len(self.boundaries):
            raise ValueError(f"StepCosineDecayWithOffset needs one value per boundary, got "
                             f"{len(self.values)} values for {len(self.boundaries)} "
                             f"boundaries.")

    def __call__(self, step):
        step = _shifted(step, self.offset)
        lr = tf.constant(self.values[-1], tf.float32)
        # From the last level down, so that the highest boundary reached wins.
        for i in reversed(range(len(self.values) - 1)):
            start = 0.0 if i == 0 else float(self.boundaries[i])
            length = float(self.boundaries[i + 1] - self.boundaries[i])
            high, low = self.values[i], self.values[i + 1]
            cosine = (high - low) * (tf.cos(math.pi * (step - start) / length) + 1.0) / 2.0
            lr = tf.where(step < float(self.boundaries[i + 1]), cosine + low, lr)
        return lr


class _Warmup(_schedules.LearningRateSchedule):
    """Below `warmup_steps`, `_warm(step, end)` with `end = lr(warmup_steps)`; then `lr`.

    `after_warmup_lr_sched` (`lr`) is a schedule or a float. A subclass names its own
    constructor arguments in `_ARGS`, which are also its config.
    """

    _ARGS = ()

    def __init__(self, after_warmup_lr_sched, warmup_steps, name):
        super().__init__()
        self.after_warmup_lr_sched = _deserialize_lr(after_warmup_lr_sched)
        self.warmup_steps = int(warmup_steps)
        self.name = name

    def _warm(self, step, end):
        raise NotImplementedError

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        end = _lr_at(self.after_warmup_lr_sched, float(self.warmup_steps))
        return tf.where(step < float(self.warmup_steps), self._warm(step, end),
                        _lr_at(self.after_warmup_lr_sched, step))

    def get_config(self):
        return {"after_warmup_lr_sched": _serialize_lr(self.after_warmup_lr_sched),
                "warmup_steps": self.warmup_steps, "name": self.name,
                **{name: getattr(self, name) for name in self._ARGS}}


@_register
class LinearWarmup(_Warmup):
    """Linear warmup from `warmup_learning_rate` (step 0) to `lr(warmup_steps)`, then `lr`."""

    _ARGS = ("warmup_learning_rate",)

    def __init__(self, after_warmup_lr_sched, warmup_steps, warmup_learning_rate=0.0,
                 name="linear"):
        super().__init__(after_warmup_lr_sched, warmup_steps, name)
        self.warmup_learning_rate = float(warmup_learning_rate)

    def _warm(self, step, end):
        start = self.warmup_learning_rate
        return start + tf.math.divide_no_nan(step, float(self.warmup_steps)) * (end - start)


@_register
class PolynomialWarmUp(_Warmup):
    """`lr(warmup_steps) * (max(step, 1) / warmup_steps) ** power` below warmup_steps, then
    `lr` (TFM's PolynomialWarmUp)."""

    _ARGS = ("power",)

    def __init__(self, after_warmup_lr_sched, warmup_steps, power=1.0, name="polynomial"):
        super().__init__(after_warmup_lr_sched, warmup_steps, name)
        self.power = float(power)

    def _warm(self, step, end):
        fraction = tf.math.divide_no_nan(tf.maximum(step, 1.0), float(self.warmup_steps))
        return end * tf.pow(fraction, self.power)


@_register
class LegacyDecay(_schedules.LearningRateSchedule):
    """`lr(step) / (1 + decay * step)`: the `decay` argument of TF1/legacy Keras optimizers,
    which Keras 3 optimizers dropped."""

    def __init__(self, learning_rate, decay, name="LegacyDecay"):
        super().__init__()
        self.learning_rate = _deserialize_lr(learning_rate)
        self.decay = float(decay)
        self.name = name

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        return _lr_at(self.learning_rate, step) / (1.0 + self.decay * step)

    def get_config(self):
        return {"learning_rate": _serialize_lr(self.learning_rate), "decay": self.decay,
                "name": self.name}


# do_not_convert: graph-safe as written (no Python control flow on tensors, no user code
# called), so AutoGraph's conversion would only add time to the first trace (issue 31).
@tf.autograph.experimental.do_not_convert
def learning_rate_value(optimizer, step=None):
    """The learning rate as a float32 tensor: the schedule at `step` (default: the optimizer's
    `iterations`), or the constant. Works eagerly, in a `tf.function` and through a
    LossScaleOptimizer.

    The current rate is Keras's public `optimizer.learning_rate`. At another `step` the
    schedule is rebuilt from the optimizer's public config (Keras keeps the object itself
    private); a rate that is not a schedule does not depend on the step.
    """
    inner = unwrap_loss_scale(optimizer)
    if step is None:
        value = inner.learning_rate
    else:
        config = inner.get_config()["learning_rate"]
        if isinstance(config, dict) and config.get("class_name") not in ("function",
                                                                         "__lambda__"):
            value = _schedules.deserialize(config)(step)
        else:
            value = inner.learning_rate
    if isinstance(value, keras.Variable):
        value = value.value
    return tf.cast(tf.convert_to_tensor(value), tf.float32)
