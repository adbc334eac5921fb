"""Optimizers, learning-rate schedules, loss scaling and EMA from an `OptimizationConfig`.

The config follows TFM's `official/modeling/optimization/configs` field for field, so a TFM
`trainer.optimizer_config` block (YAML or `--params_override`) works here unchanged:

    optimizer:      {type: sgd, sgd: {momentum: 0.9}}
    learning_rate:  {type: stepwise, stepwise: {boundaries: [1000, 2000],
                                                 values: [0.1, 0.01, 0.001]}}
    warmup:         {type: linear, linear: {warmup_steps: 100, warmup_learning_rate: 0.0}}
    ema:            {average_decay: 0.999}        # optional; null (the default) = no EMA

and `OptimizerFactory` turns it into Keras 3 objects:

    factory = OptimizerFactory(config)
    optimizer = factory.build_optimizer(factory.build_learning_rate())
    optimizer = configure_loss_scale(optimizer, use_float16=True, loss_scale="dynamic")

Where TFM and Keras 3 differ, this module does what a TFM user expects and says so:

- `learning_rate.type: null` is a `ConfigError` (a `ValueError`, as TFM's), raised when the
  factory is built: there is no silent fallback to a Keras default rate.
- Schedules hold their step-0 value before `offset` (TFM evaluates them at a negative step
  there, which for exponential or polynomial decay exceeds the initial rate).
- `sgd.decay` (the legacy optimizers' `lr / (1 + decay * step)`) is applied by wrapping the
  schedule, since Keras 3 optimizers dropped `decay`.
- `adamw` is TFM's AdamWeightDecay: decoupled decay (Keras 3 `AdamW`), regex `include_in_` /
  `exclude_from_weight_decay` matched against variable paths, and `gradient_clip_norm`
  (default 1.0) as Keras 3 `global_clipnorm`.
- `lamb` is TFM's LAMB (weight decay inside the trust ratio, `exclude_from_layer_adaptation`),
  written as a subclass of Keras 3's `Lamb`.
- `lars` is TFM's LARS written as a Keras 3 optimizer (`LARS`); TFM's `power`, `power_linear`,
  `power_with_offset` and `step_cosine_with_offset` schedules have TFM's fields and formulas
  (`step_cosine_with_offset` holds its last value after the last boundary, where TFM's
  divides by zero).
- `build_optimizer(lr, postprocessor=fn)` passes the built optimizer through `fn`, as TFM's.
- EMA is Keras 3's own (`use_ema=True`, `ema_momentum=average_decay`): averages live in the
  optimizer, are updated in `apply_gradients` under every strategy and are saved with it in
  checkpoints. TFM's `dynamic_decay` (decay `min(average_decay, (1+n)/(10+n))`) and
  `start_step` are added by a small subclass; the first average is a copy of the weights (as in
  Keras), not zeros. With `trainable_weights_only: false` the model's non-trainable variables
  (BatchNorm statistics) are averaged too, in optimizer variables the trainer creates
  (`average_non_trainable_variables`), and swapped with the trained weights.
- A fixed `runtime.loss_scale` uses `FixedLossScaleOptimizer`, a `LossScaleOptimizer` whose
  scale never changes and which, like TF2's fixed loss scale, never skips a step.

The EMA averages are a private Keras attribute; `has_ema`, `ema_variables` and
`swap_ema_weights` are the only code that touches it.

TensorFlow and Keras are imported on first use, so importing the configs stays cheap.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
from typing import Any, List, Optional, Sequence, Tuple

from lite_launcher.base_config import Config, ConfigError, OneOfConfig

# ---------------------------------------------------------------------------
# Optimizer configs (TFM: configs/optimizer_config.py).
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class BaseOptimizerConfig(Config):
    """Gradient clipping shared by every optimizer; Keras 3 accepts at most one of the three.

    Attributes:
      clipnorm: clip each gradient to this L2 norm.
      clipvalue: clip each gradient element to [-clipvalue, clipvalue].
      global_clipnorm: clip all gradients together to this global L2 norm.
    """

    clipnorm: Optional[float] = None
    clipvalue: Optional[float] = None
    global_clipnorm: Optional[float] = None


@dataclasses.dataclass
class SGDConfig(BaseOptimizerConfig):
    """`keras.optimizers.SGD`. `decay` > 0 divides the learning rate by `1 + decay * step`."""

    name: str = "SGD"
    decay: float = 0.0
    nesterov: bool = False
    momentum: float = 0.0


@dataclasses.dataclass
class SGDExperimentalConfig(BaseOptimizerConfig):
    """TFM's `sgd_experimental`, which became Keras 3's `SGD`. `jit_compile` has no effect."""

    name: str = "SGD"
    nesterov: bool = False
    momentum: float = 0.0
    jit_compile: bool = False


@dataclasses.dataclass
class RMSPropConfig(BaseOptimizerConfig):
    """`keras.optimizers.RMSprop`."""

    name: str = "RMSprop"
    rho: float = 0.9
    momentum: float = 0.0
    epsilon: float = 1e-7
    centered: bool = False


@dataclasses.dataclass
class AdagradConfig(BaseOptimizerConfig):
    """`keras.optimizers.Adagrad`."""

    name: str = "Adagrad"
    initial_accumulator_value: float = 0.1
    epsilon: float = 1e-07


@dataclasses.dataclass
class AdamConfig(BaseOptimizerConfig):
    """`keras.optimizers.Adam`."""

    name: str = "Adam"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-07
    amsgrad: bool = False


@dataclasses.dataclass
class AdamExperimentalConfig(AdamConfig):
    """TFM's `adam_experimental`, which became Keras 3's `Adam`. `jit_compile` has no effect."""

    jit_compile: bool = False


@dataclasses.dataclass
class AdamWeightDecayConfig(BaseOptimizerConfig):
    """TFM's AdamWeightDecay as Keras 3 `AdamW`.

    Attributes:
      weight_decay_rate: decoupled decay: each step `var -= lr * weight_decay_rate * var`.
      include_in_weight_decay: regexes; a variable whose path matches one is decayed even if it
        matches `exclude_from_weight_decay`.
      exclude_from_weight_decay: regexes; matching variables are not decayed.
      gradient_clip_norm: clip all gradients to this global norm (0 disables); becomes Keras
        `global_clipnorm`.
    """

    name: str = "AdamWeightDecay"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-07
    amsgrad: bool = False
    weight_decay_rate: float = 0.0
    include_in_weight_decay: Optional[List[str]] = None
    exclude_from_weight_decay: Optional[List[str]] = None
    gradient_clip_norm: float = 1.0


@dataclasses.dataclass
class AdamWeightDecayExperimentalConfig(BaseOptimizerConfig):
    """TFM's `adamw_experimental`, which became Keras 3's `AdamW`. `jit_compile` has no effect."""

    name: str = "AdamWeightDecayExperimental"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-07
    amsgrad: bool = False
    weight_decay: float = 0.0
    global_clipnorm: Optional[float] = 1.0
    jit_compile: bool = False


@dataclasses.dataclass
class LAMBConfig(BaseOptimizerConfig):
    """TFM's LAMB (`LAMB` below).

    Attributes:
      weight_decay_rate: L2 decay added to the update before the trust ratio.
      exclude_from_weight_decay: regexes of variables not decayed.
      exclude_from_layer_adaptation: regexes of variables without the trust ratio; None: the
        same as `exclude_from_weight_decay`.
    """

    name: str = "LAMB"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    weight_decay_rate: float = 0.0
    exclude_from_weight_decay: Optional[List[str]] = None
    exclude_from_layer_adaptation: Optional[List[str]] = None


@dataclasses.dataclass
class LARSConfig(BaseOptimizerConfig):
    """TFM's LARS (layer-wise adaptive rate scaling, `LARS` below).

    Attributes:
      momentum: momentum of the velocity.
      eeta: the LARS coefficient; the trust ratio is `eeta * ||w|| / ||g||`.
      weight_decay_rate: L2 decay added to the gradient (`g + rate * w`) before the ratio.
      nesterov: Nesterov momentum.
      classic_momentum: the learning rate (and ratio) scale the gradient inside the momentum
        update; False: the momentum of raw gradients is scaled afterwards (the ratio then
        uses the norm of that update).
      exclude_from_weight_decay: regexes searched in the variable path; matches get no decay.
      exclude_from_layer_adaptation: regexes of variables with ratio 1; None: the same as
        `exclude_from_weight_decay`.
    """

    name: str = "LARS"
    momentum: float = 0.9
    eeta: float = 0.001
    weight_decay_rate: float = 0.0
    nesterov: bool = False
    classic_momentum: bool = True
    exclude_from_weight_decay: Optional[List[str]] = None
    exclude_from_layer_adaptation: Optional[List[str]] = None


@dataclasses.dataclass
class LionConfig(BaseOptimizerConfig):
    """`keras.optimizers.Lion` (not in TFM); decay as in `adamw` (decoupled, regex exclusions)."""

    name: str = "Lion"
    beta_1: float = 0.9
    beta_2: float = 0.99
    weight_decay_rate: float = 0.0
    exclude_from_weight_decay: Optional[List[str]] = None


@dataclasses.dataclass
class EMAConfig(BaseOptimizerConfig):
    """Exponential moving average of the trained weights (`OptimizationConfig.ema`).

    Attributes:
      trainable_weights_only: False also averages the model's non-trainable variables
        (BatchNorm moving statistics), which the trainer then swaps in with the trained
        weights (TFM's ResNet-RS configs use this).
      average_decay: the decay, `average = decay * average + (1 - decay) * weight`.
      start_step: before this step the average follows the weights (decay 0).
      dynamic_decay: use `min(average_decay, (1 + n) / (10 + n))`, n = steps since start_step,
        so that early averages are not dominated by the initial weights.
    The clipping fields are inherited from TFM's config and must stay unset.
    """

    name: str = "ExponentialMovingAverage"
    trainable_weights_only: bool = True
    average_decay: float = 0.99
    start_step: int = 0
    dynamic_decay: bool = True


# ---------------------------------------------------------------------------
# Learning-rate configs (TFM: configs/learning_rate_config.py).
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class ConstantLrConfig(Config):
    """A constant learning rate."""

    name: str = "Constant"
    learning_rate: float = 0.1


@dataclasses.dataclass
class StepwiseLrConfig(Config):
    """`values[i]` while `boundaries[i-1] < step - offset <= boundaries[i]`."""

    name: str = "PiecewiseConstantDecay"
    boundaries: Optional[List[int]] = None
    values: Optional[List[float]] = None
    offset: int = 0


@dataclasses.dataclass
class ExponentialLrConfig(Config):
    """`initial_learning_rate * decay_rate ** (s / decay_steps)`, s = step - offset (floored
    to whole periods with `staircase`)."""

    name: str = "ExponentialDecay"
    initial_learning_rate: Optional[float] = None
    decay_steps: Optional[int] = None
    decay_rate: Optional[float] = None
    staircase: Optional[bool] = None
    offset: int = 0


@dataclasses.dataclass
class PolynomialLrConfig(Config):
    """`(initial - end) * (1 - s / decay_steps) ** power + end`, s = min(step - offset,
    decay_steps); with `cycle` the period grows to the next multiple of decay_steps instead."""

    name: str = "PolynomialDecay"
    initial_learning_rate: Optional[float] = None
    decay_steps: Optional[int] = None
    end_learning_rate: float = 0.0001
    power: float = 1.0
    cycle: bool = False
    offset: int = 0


@dataclasses.dataclass
class CosineLrConfig(Config):
    """`initial * ((1 - alpha) * (1 + cos(pi * s / decay_steps)) / 2 + alpha)`,
    s = min(step - offset, decay_steps)."""

    name: str = "CosineDecay"
    initial_learning_rate: Optional[float] = None
    decay_steps: Optional[int] = None
    alpha: float = 0.0
    offset: int = 0


@dataclasses.dataclass
class DirectPowerLrConfig(Config):
    """`initial_learning_rate * max(step, 1) ** power`."""

    name: str = "DirectPowerDecay"
    initial_learning_rate: Optional[float] = None
    power: float = -0.5


@dataclasses.dataclass
class PowerAndLinearDecayLrConfig(Config):
    """`initial * max(s, 1) ** power * min(1, (total_decay_steps - s) / (total_decay_steps *
    linear_decay_fraction))`, floored at 0, s = step - offset: power decay whose last
    `linear_decay_fraction` of the steps also falls linearly to 0."""

    name: str = "PowerAndLinearDecay"
    initial_learning_rate: Optional[float] = None
    total_decay_steps: Optional[int] = None
    power: float = -0.5
    linear_decay_fraction: float = 0.1
    offset: int = 0


@dataclasses.dataclass
class PowerDecayWithOffsetLrConfig(Config):
    """`pre_offset_learning_rate` up to step `offset`, then `initial * max(step - offset, 1)
    ** power`, capped at `pre_offset_learning_rate`."""

    name: str = "PowerDecayWithOffset"
    initial_learning_rate: Optional[float] = None
    power: float = -0.5
    offset: int = 0
    pre_offset_learning_rate: float = 1.0e6


@dataclasses.dataclass
class StepCosineLrConfig(Config):
    """Cosine decays between levels, s = step - offset (`boundaries` and `values` have the
    same length): up to `boundaries[1]`, `values[0]` falls to `values[1]` over
    `boundaries[1] - boundaries[0]` steps counted from s = 0; from `boundaries[i]`, `values[i]`
    falls to `values[i + 1]` over `boundaries[i + 1] - boundaries[i]` steps; after the last
    boundary the rate stays at `values[-1]` (TFM divides by zero there)."""

    name: str = "StepCosineDecayWithOffset"
    boundaries: Optional[List[int]] = None
    values: Optional[List[float]] = None
    offset: int = 0


@dataclasses.dataclass
class LinearWarmupConfig(Config):
    """For step < warmup_steps: from `warmup_learning_rate` linearly up to the schedule's value
    at `warmup_steps`; afterwards the schedule itself."""

    name: str = "linear"
    warmup_learning_rate: float = 0.0
    warmup_steps: Optional[int] = None


@dataclasses.dataclass
class PolynomialWarmupConfig(Config):
    """For step < warmup_steps: `lr(warmup_steps) * (max(step, 1) / warmup_steps) ** power`."""

    name: str = "polynomial"
    power: float = 1.0
    warmup_steps: Optional[int] = None


# ---------------------------------------------------------------------------
# The oneof configs and OptimizationConfig (TFM: configs/optimization_config.py).
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class OptimizerConfig(OneOfConfig):
    """`type` picks the optimizer; it must be set before building one."""

    type: Optional[str] = None
    sgd: SGDConfig = dataclasses.field(default_factory=SGDConfig)
    sgd_experimental: SGDExperimentalConfig = dataclasses.field(
        default_factory=SGDExperimentalConfig)
    adam: AdamConfig = dataclasses.field(default_factory=AdamConfig)
    adam_experimental: AdamExperimentalConfig = dataclasses.field(
        default_factory=AdamExperimentalConfig)
    adamw: AdamWeightDecayConfig = dataclasses.field(default_factory=AdamWeightDecayConfig)
    adamw_experimental: AdamWeightDecayExperimentalConfig = dataclasses.field(
        default_factory=AdamWeightDecayExperimentalConfig)
    lamb: LAMBConfig = dataclasses.field(default_factory=LAMBConfig)
    rmsprop: RMSPropConfig = dataclasses.field(default_factory=RMSPropConfig)
    lars: LARSConfig = dataclasses.field(default_factory=LARSConfig)
    adagrad: AdagradConfig = dataclasses.field(default_factory=AdagradConfig)
    lion: LionConfig = dataclasses.field(default_factory=LionConfig)


@dataclasses.dataclass
class LrConfig(OneOfConfig):
    """`type` picks the schedule; it must be set before building an optimizer (as TFM)."""

    type: Optional[str] = None
    constant: ConstantLrConfig = dataclasses.field(default_factory=ConstantLrConfig)
    stepwise: StepwiseLrConfig = dataclasses.field(default_factory=StepwiseLrConfig)
    exponential: ExponentialLrConfig = dataclasses.field(default_factory=ExponentialLrConfig)
    polynomial: PolynomialLrConfig = dataclasses.field(default_factory=PolynomialLrConfig)
    cosine: CosineLrConfig = dataclasses.field(default_factory=CosineLrConfig)
    power: DirectPowerLrConfig = dataclasses.field(default_factory=DirectPowerLrConfig)
    power_linear: PowerAndLinearDecayLrConfig = dataclasses.field(
        default_factory=PowerAndLinearDecayLrConfig)
    power_with_offset: PowerDecayWithOffsetLrConfig = dataclasses.field(
        default_factory=PowerDecayWithOffsetLrConfig)
    step_cosine_with_offset: StepCosineLrConfig = dataclasses.field(
        default_factory=StepCosineLrConfig)


@dataclasses.dataclass
class WarmupConfig(OneOfConfig):
    """`type` picks the warmup wrapped around the schedule; None means no warmup."""

    type: Optional[str] = None
    linear: LinearWarmupConfig = dataclasses.field(default_factory=LinearWarmupConfig)
    polynomial: PolynomialWarmupConfig = dataclasses.field(
        default_factory=PolynomialWarmupConfig)


@dataclasses.dataclass
class OptimizationConfig(Config):
    """TFM's optimization config: optimizer, optional EMA, learning rate and warmup."""

    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    ema: Optional[EMAConfig] = None
    learning_rate: LrConfig = dataclasses.field(default_factory=LrConfig)
    warmup: WarmupConfig = dataclasses.field(default_factory=WarmupConfig)

    def _validate(self):
        # Only the chosen branches are checked: the others keep TFM's (incomplete) defaults.
        if self.optimizer.type is not None:
            _check_optimizer(self.optimizer)
        if self.learning_rate.type is not None:
            _check_learning_rate(self.learning_rate)
        if self.warmup.type is not None:
            _check_warmup(self.warmup)
        if self.ema is not None:
            _check_ema(self.ema)


def _choices(oneof: OneOfConfig) -> List[str]:
    return [name for name in oneof.field_names() if name != "type"]


def _check_type(oneof: OneOfConfig, key: str) -> None:
    if oneof.type is not None and oneof.type not in _choices(oneof):
        raise ConfigError(
            f"Unknown value {oneof.type!r} for {key}.type. "
            f"Valid values: {', '.join(_choices(oneof))}.")


def _require(value, key: str, what: str):
    if value is None:
        raise ConfigError(f"{key} must be set ({what}); it is null.")
    return value


def _positive_int(value, key: str) -> int:
    _require(value, key, "a positive number of steps")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}.")
    return value


def _check_optimizer(oneof: OptimizerConfig) -> None:
    _check_type(oneof, "optimizer")
    _clip_kwargs(oneof)


def _check_learning_rate(oneof: LrConfig) -> None:
    _check_type(oneof, "learning_rate")
    kind = oneof.type
    cfg = oneof.get()
    key = f"learning_rate.{kind}"
    if kind == "stepwise":
        boundaries = _require(cfg.boundaries, f"{key}.boundaries", "a list of step numbers")
        values = _require(cfg.values, f"{key}.values", "one more rate than boundaries")
        if len(values) != len(boundaries) + 1:
            raise ConfigError(
                f"{key}.values needs one more entry than {key}.boundaries: got "
                f"{len(values)} values for {len(boundaries)} boundaries.")
        if not boundaries or any(b <= a for a, b in zip(boundaries, boundaries[1:])):
            raise ConfigError(
                f"{key}.boundaries must be a non-empty, strictly increasing list, "
                f"got {boundaries}.")
    elif kind in ("exponential", "polynomial", "cosine"):
        _require(cfg.initial_learning_rate, f"{key}.initial_learning_rate", "a float")
        _positive_int(cfg.decay_steps, f"{key}.decay_steps")
        if kind == "exponential":
            _require(cfg.decay_rate, f"{key}.decay_rate", "a float")
    elif kind in ("power", "power_linear", "power_with_offset"):
        _require(cfg.initial_learning_rate, f"{key}.initial_learning_rate", "a float")
        if kind == "power_linear":
            _positive_int(cfg.total_decay_steps, f"{key}.total_decay_steps")
            if not 0.0 <= cfg.linear_decay_fraction <= 1.0:
                raise ConfigError(f"{key}.linear_decay_fraction must be in [0, 1], got "
                                  f"{cfg.linear_decay_fraction}.")
    elif kind == "step_cosine_with_offset":
        boundaries = _require(cfg.boundaries, f"{key}.boundaries", "a list of step numbers")
        values = _require(cfg.values, f"{key}.values", "one rate per boundary")
        if len(values) != len(boundaries) or not values:
            raise ConfigError(
                f"{key}.values needs as many entries as {key}.boundaries (at least one): got "
                f"{len(values)} values for {len(boundaries)} boundaries.")
        if any(b <= a for a, b in zip(boundaries, boundaries[1:])):
            raise ConfigError(f"{key}.boundaries must be strictly increasing, got "
                              f"{boundaries}.")


def _check_warmup(oneof: WarmupConfig) -> None:
    _check_type(oneof, "warmup")
    key = f"warmup.{oneof.type}.warmup_steps"
    steps = _require(oneof.get().warmup_steps, key, "a number of steps")
    if steps < 0:
        raise ConfigError(f"{key} must be >= 0, got {steps}.")


def _check_ema(ema: EMAConfig) -> None:
    for clip in ("clipnorm", "clipvalue", "global_clipnorm"):
        if getattr(ema, clip) is not None:
            raise ConfigError(
                f"ema.{clip} has no effect (EMA does not clip); set optimizer.<type>.{clip} "
                f"instead and leave ema.{clip} null.")
    if not 0.0 <= ema.average_decay <= 1.0:
        raise ConfigError(f"ema.average_decay must be in [0, 1], got {ema.average_decay}.")
    if ema.start_step < 0:
        raise ConfigError(f"ema.start_step must be >= 0, got {ema.start_step}.")


def _clip_kwargs(oneof: OptimizerConfig) -> dict:
    """The Keras clipping arguments of the chosen optimizer; errors name the keys."""
    kind = oneof.type
    cfg = oneof.get()
    clips = {k: getattr(cfg, k) for k in ("clipnorm", "clipvalue", "global_clipnorm")
             if getattr(cfg, k) is not None}
    if kind == "adamw" and cfg.gradient_clip_norm and cfg.gradient_clip_norm > 0:
        # TFM's AdamWeightDecay clips to gradient_clip_norm by global norm before the base
        # optimizer's own clipping; two global-norm clips compose to the smaller one.
        others = sorted(set(clips) - {"global_clipnorm"})
        if others:
            raise ConfigError(
                f"optimizer.adamw.gradient_clip_norm ({cfg.gradient_clip_norm}) is a global-norm "
                f"clip and Keras 3 applies only one clipping option; set "
                f"optimizer.adamw.gradient_clip_norm: 0 to use optimizer.adamw.{others[0]}.")
        clips["global_clipnorm"] = min(cfg.gradient_clip_norm,
                                       clips.get("global_clipnorm", cfg.gradient_clip_norm))
    if len(clips) > 1:
        keys = " and ".join(f"optimizer.{kind}.{k}" for k in sorted(clips))
        raise ConfigError(f"Set only one of {keys}: Keras 3 applies one clipping option.")
    for key, value in clips.items():
        if value < 0:
            raise ConfigError(f"optimizer.{kind}.{key} must be >= 0, got {value}.")
    return clips


def _weight_decay_pattern(include: Optional[Sequence[str]],
                          exclude: Optional[Sequence[str]]) -> Optional[str]:
    """One regex that matches the variable names TFM would exclude from weight decay.

    TFM: a name matching an `include` regex is decayed; else one matching an `exclude` regex
    is not. Keras searches a single pattern in the variable name (`scope/.../kernel:0`).
    """
    if not exclude:
        return None
    excluded = "|".join(f"(?:{p})" for p in exclude)
    if not include:
        return excluded
    included = "|".join(f"(?:{p})" for p in include)
    return f"^(?!.*(?:{included}))(?=.*(?:{excluded}))"


# ---------------------------------------------------------------------------
# Keras objects, defined on first use so that the configs import without TensorFlow.
# ---------------------------------------------------------------------------

_KERAS_NAMES = (
    "PiecewiseConstantDecayWithOffset", "ExponentialDecayWithOffset",
    "PolynomialDecayWithOffset", "CosineDecayWithOffset", "LinearWarmup", "PolynomialWarmUp",
    "LegacyDecay", "LAMB", "FixedLossScaleOptimizer", "DirectPowerDecay",
    "PowerAndLinearDecay", "PowerDecayWithOffset", "StepCosineDecayWithOffset", "LARS",
)


def __getattr__(name):
    if name in _KERAS_NAMES:
        value = getattr(_keras_objects(), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _path_matches(patterns, variable) -> bool:
    """Whether a regex of `patterns` is found in the variable's path (`dense/kernel`), the
    Keras 3 counterpart of TFM's variable names (`dense/kernel:0`)."""
    path = re.sub(r":\d+$", "", getattr(variable, "path", None) or variable.name)
    return any(re.search(p, path) for p in patterns)


@functools.lru_cache(maxsize=None)
def _keras_objects() -> types.SimpleNamespace:
    """Defines (once) the Keras schedule and optimizer classes of this module."""
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    register = keras.saving.register_keras_serializable(package="lite_launcher")
    schedules = keras.optimizers.schedules
    objects = types.SimpleNamespace()

    def public(cls):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
        setattr(objects, cls.__name__, cls)
        return register(cls)

    def shifted(step, offset):
        # Before `offset` the schedule stays at its step-0 value.
        return tf.maximum(tf.cast(step, tf.float32) - float(offset), 0.0)

    def lr_at(lr, step):
        if isinstance(lr, schedules.LearningRateSchedule):
            return tf.cast(lr(step), tf.float32)
        return tf.constant(lr, tf.float32)

    def serialize_lr(lr):
        if isinstance(lr, schedules.LearningRateSchedule):
            return schedules.serialize(lr)
        return float(lr)

    def deserialize_lr(lr):
        return schedules.deserialize(lr) if isinstance(lr, dict) else lr

    class _Offset:
        """Evaluates the Keras base schedule at `max(step - offset, 0)`."""

        def __call__(self, step):
            return super().__call__(shifted(step, self.offset))

        def get_config(self):
            return {**super().get_config(), "offset": self.offset}

    @public
    class PiecewiseConstantDecayWithOffset(_Offset, schedules.PiecewiseConstantDecay):
        """Keras `PiecewiseConstantDecay` of `step - offset`."""

        def __init__(self, boundaries, values, offset=0, name="PiecewiseConstantDecay"):
            super().__init__(list(boundaries), [float(v) for v in values], name=name)
            self.offset = offset

    @public
    class ExponentialDecayWithOffset(_Offset, schedules.ExponentialDecay):
        """Keras `ExponentialDecay` of `step - offset`."""

        def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                     offset=0, name="ExponentialDecay"):
            super().__init__(float(initial_learning_rate), decay_steps, float(decay_rate),
                             staircase=bool(staircase), name=name)
            self.offset = offset

    @public
    class PolynomialDecayWithOffset(_Offset, schedules.PolynomialDecay):
        """Keras `PolynomialDecay` of `step - offset`."""

        def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001,
                     power=1.0, cycle=False, offset=0, name="PolynomialDecay"):
            super().__init__(float(initial_learning_rate), decay_steps,
                             end_learning_rate=float(end_learning_rate), power=float(power),
                             cycle=cycle, name=name)
            self.offset = offset

    @public
    class CosineDecayWithOffset(_Offset, schedules.CosineDecay):
        """Keras `CosineDecay` (no Keras warmup) of `step - offset`."""

        def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, offset=0,
                     name="CosineDecay", warmup_target=None, warmup_steps=0):
            # warmup_* only round-trip Keras's get_config; this project warms up separately.
            super().__init__(float(initial_learning_rate), decay_steps, alpha=float(alpha),
                             name=name, warmup_target=warmup_target, warmup_steps=warmup_steps)
            self.offset = offset

    class _Schedule(schedules.LearningRateSchedule):
        """A schedule whose constructor arguments are its config (as TFM's)."""

        _ARGS: Tuple[str, ...] = ()

        def get_config(self):
            return {name: getattr(self, name) for name in self._ARGS}

    @public
    class DirectPowerDecay(_Schedule):
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

    @public
    class PowerAndLinearDecay(_Schedule):
        """TFM's power decay times a final linear decay (see `PowerAndLinearDecayLrConfig`)."""

        _ARGS = ("initial_learning_rate", "total_decay_steps", "power",
                 "linear_decay_fraction", "offset", "name")

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

    @public
    class PowerDecayWithOffset(_Schedule):
        """TFM's `pre_offset_learning_rate` until `offset`, then power decay capped by it."""

        _ARGS = ("initial_learning_rate", "power", "offset", "pre_offset_learning_rate",
                 "name")

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

    @public
    class StepCosineDecayWithOffset(_Schedule):
        """TFM's stepwise cosine decay (see `StepCosineLrConfig`); holds `values[-1]` after
        the last boundary and its step-0 value before `offset`."""

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
            step = shifted(step, self.offset)
            levels = len(self.values)
            lr = tf.constant(self.values[-1], tf.float32)
            # From the last level down, so that the highest boundary reached wins.
            for i in reversed(range(levels - 1)):
                start = 0.0 if i == 0 else float(self.boundaries[i])
                length = float(self.boundaries[i + 1] - self.boundaries[i])
                high, low = self.values[i], self.values[i + 1]
                cosine = (high - low) * (tf.cos(math.pi * (step - start) / length) + 1.0) / 2.0
                lr = tf.where(step < float(self.boundaries[i + 1]), cosine + low, lr)
            return lr

    @public
    class LinearWarmup(schedules.LearningRateSchedule):
        """Linear warmup from `warmup_learning_rate` (step 0) to `lr(warmup_steps)`, then `lr`.

        `after_warmup_lr_sched` is a schedule or a float.
        """

        def __init__(self, after_warmup_lr_sched, warmup_steps, warmup_learning_rate=0.0,
                     name="linear"):
            super().__init__()
            self.after_warmup_lr_sched = deserialize_lr(after_warmup_lr_sched)
            self.warmup_steps = int(warmup_steps)
            self.warmup_learning_rate = float(warmup_learning_rate)
            self.name = name

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warmup_steps = float(self.warmup_steps)
            start = self.warmup_learning_rate
            end = lr_at(self.after_warmup_lr_sched, warmup_steps)
            warm = start + tf.math.divide_no_nan(step, warmup_steps) * (end - start)
            return tf.where(step < warmup_steps, warm, lr_at(self.after_warmup_lr_sched, step))

        def get_config(self):
            return {"after_warmup_lr_sched": serialize_lr(self.after_warmup_lr_sched),
                    "warmup_steps": self.warmup_steps,
                    "warmup_learning_rate": self.warmup_learning_rate, "name": self.name}

    @public
    class PolynomialWarmUp(schedules.LearningRateSchedule):
        """`lr(warmup_steps) * (max(step, 1) / warmup_steps) ** power` below warmup_steps,
        then `lr` (TFM's PolynomialWarmUp)."""

        def __init__(self, after_warmup_lr_sched, warmup_steps, power=1.0, name="polynomial"):
            super().__init__()
            self.after_warmup_lr_sched = deserialize_lr(after_warmup_lr_sched)
            self.warmup_steps = int(warmup_steps)
            self.power = float(power)
            self.name = name

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warmup_steps = float(self.warmup_steps)
            end = lr_at(self.after_warmup_lr_sched, warmup_steps)
            fraction = tf.math.divide_no_nan(tf.maximum(step, 1.0), warmup_steps)
            warm = end * tf.pow(fraction, self.power)
            return tf.where(step < warmup_steps, warm, lr_at(self.after_warmup_lr_sched, step))

        def get_config(self):
            return {"after_warmup_lr_sched": serialize_lr(self.after_warmup_lr_sched),
                    "warmup_steps": self.warmup_steps, "power": self.power, "name": self.name}

    @public
    class LegacyDecay(schedules.LearningRateSchedule):
        """`lr(step) / (1 + decay * step)`: the `decay` argument of TF1/legacy Keras optimizers."""

        def __init__(self, learning_rate, decay, name="LegacyDecay"):
            super().__init__()
            self.learning_rate = deserialize_lr(learning_rate)
            self.decay = float(decay)
            self.name = name

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            return lr_at(self.learning_rate, step) / (1.0 + self.decay * step)

        def get_config(self):
            return {"learning_rate": serialize_lr(self.learning_rate), "decay": self.decay,
                    "name": self.name}

    @public
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

        _matches = staticmethod(_path_matches)

        def update_step(self, gradient, variable, learning_rate):
            dtype = variable.dtype
            lr = ops.cast(learning_rate, dtype)
            gradient = ops.cast(gradient, dtype)
            step = ops.cast(self.iterations + 1, dtype)
            beta_1 = ops.cast(self.beta_1, dtype)
            beta_2 = ops.cast(self.beta_2, dtype)
            m = self._momentums[self._get_variable_index(variable)]
            v = self._velocities[self._get_variable_index(variable)]
            self.assign_add(m, (gradient - m) * (1.0 - beta_1))
            self.assign_add(v, (ops.square(gradient) - v) * (1.0 - beta_2))
            m_hat = m / (1.0 - ops.power(beta_1, step))
            v_hat = v / (1.0 - ops.power(beta_2, step))
            update = m_hat / (ops.sqrt(v_hat) + self.epsilon)
            if self.weight_decay_rate and not self._matches(self.exclude_from_weight_decay,
                                                            variable):
                update = update + self.weight_decay_rate * variable
            if self._matches(self.exclude_from_layer_adaptation, variable):
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

    @public
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

        _matches = staticmethod(_path_matches)

        def _trust_ratio(self, variable, direction):
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            d_norm = ops.sqrt(ops.sum(ops.square(direction)))
            return ops.where(w_norm > 0,
                             ops.where(d_norm > 0, self.eeta * w_norm / d_norm, 1.0), 1.0)

        def update_step(self, gradient, variable, learning_rate):
            dtype = variable.dtype
            lr = ops.cast(learning_rate, dtype)
            grad = ops.cast(gradient, dtype)
            velocity = self.momentums[self._get_variable_index(variable)]
            momentum = ops.cast(self.momentum, dtype)
            if self.weight_decay_rate and not self._matches(self.exclude_from_weight_decay,
                                                            variable):
                grad = grad + self.weight_decay_rate * variable
            adapt = not self._matches(self.exclude_from_layer_adaptation, variable)
            if self.classic_momentum:
                scaled_lr = lr * self._trust_ratio(variable, grad) if adapt else lr
                next_v = momentum * velocity + scaled_lr * grad
                update = momentum * next_v + scaled_lr * grad if self.nesterov else next_v
            else:
                next_v = momentum * velocity + grad
                raw = momentum * next_v + grad if self.nesterov else next_v
                update = (lr * self._trust_ratio(variable, raw) if adapt else lr) * raw
            self.assign_sub(variable, update)
            self.assign(velocity, next_v)

        def get_config(self):
            return {**super().get_config(), "momentum": self.momentum,
                    "weight_decay_rate": self.weight_decay_rate, "eeta": self.eeta,
                    "nesterov": self.nesterov, "classic_momentum": self.classic_momentum,
                    "exclude_from_weight_decay": self.exclude_from_weight_decay,
                    "exclude_from_layer_adaptation": self.exclude_from_layer_adaptation}

    @public
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
            variables = trainable_variables or self._trainable_variables
            # As the dynamic optimizer: variables overwritten by their "gradient" (float8
            # scaling factors) are not unscaled.
            unscaled = [
                g if g is None or getattr(v, "overwrite_with_gradient", False)
                else ops.divide(g, self.initial_scale)
                for g, v in zip(grads, variables)]
            self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)

        def scale_loss(self, loss):
            return ops.multiply(loss, self.initial_scale)

    class _EMAScheduleMixin:
        """Keras EMA with TFM's `start_step` and `dynamic_decay` (see `EMAConfig`)."""

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

        def _update_model_variables_moving_average(self, trainable_variables):
            if not self.use_ema:
                return
            decay = self.ema_decay()
            pairs = [*zip(trainable_variables, self._model_variables_moving_average),
                     *self._lite_non_trainable_ema]
            for var, average in pairs:
                if average is None:
                    continue
                d = ops.cast(decay, var.dtype)
                average.assign(ops.add(ops.multiply(d, average), ops.multiply(1.0 - d, var)))

        def get_config(self):
            return {**super().get_config(), "ema_dynamic_decay": self.ema_dynamic_decay,
                    "ema_start_step": self.ema_start_step,
                    "ema_trainable_weights_only": self.ema_trainable_weights_only}

    objects.ema_schedule_classes = {}
    for base in (keras.optimizers.SGD, keras.optimizers.Adam, keras.optimizers.AdamW,
                 keras.optimizers.RMSprop, keras.optimizers.Adagrad, keras.optimizers.Lion,
                 LAMB, LARS):
        cls = type(f"{base.__name__}WithEMASchedule", (_EMAScheduleMixin, base),
                   {"__module__": __name__})
        objects.ema_schedule_classes[base] = register(cls)
    return objects


# ---------------------------------------------------------------------------
# The factory (TFM: optimizer_factory.py).
# ---------------------------------------------------------------------------


def _optimizer_class_and_kwargs(oneof: OptimizerConfig) -> Tuple[Any, dict, Optional[str]]:
    """(Keras class, constructor kwargs without learning_rate, weight-decay exclusion regex)."""
    import keras  # pylint: disable=import-outside-toplevel
    kind = oneof.type
    cfg = oneof.get()
    kwargs = {"name": cfg.name, **_clip_kwargs(oneof)}
    pattern = None
    if getattr(cfg, "jit_compile", False):
        from absl import logging  # pylint: disable=import-outside-toplevel
        logging.warning("optimizer.%s.jit_compile has no effect with Keras 3 optimizers; the "
                        "train step's compilation decides.", kind)
    if kind in ("sgd", "sgd_experimental"):
        cls = keras.optimizers.SGD
        kwargs.update(momentum=cfg.momentum, nesterov=cfg.nesterov)
    elif kind in ("adam", "adam_experimental"):
        cls = keras.optimizers.Adam
        kwargs.update(beta_1=cfg.beta_1, beta_2=cfg.beta_2, epsilon=cfg.epsilon,
                      amsgrad=cfg.amsgrad)
    elif kind in ("adamw", "adamw_experimental"):
        cls = keras.optimizers.AdamW
        rate = cfg.weight_decay_rate if kind == "adamw" else cfg.weight_decay
        kwargs.update(weight_decay=rate, beta_1=cfg.beta_1, beta_2=cfg.beta_2,
                      epsilon=cfg.epsilon, amsgrad=cfg.amsgrad)
        if kind == "adamw":
            pattern = _weight_decay_pattern(cfg.include_in_weight_decay,
                                            cfg.exclude_from_weight_decay)
    elif kind == "lamb":
        cls = _keras_objects().LAMB
        kwargs.update(beta_1=cfg.beta_1, beta_2=cfg.beta_2, epsilon=cfg.epsilon,
                      weight_decay_rate=cfg.weight_decay_rate,
                      exclude_from_weight_decay=cfg.exclude_from_weight_decay,
                      exclude_from_layer_adaptation=cfg.exclude_from_layer_adaptation)
    elif kind == "rmsprop":
        cls = keras.optimizers.RMSprop
        kwargs.update(rho=cfg.rho, momentum=cfg.momentum, epsilon=cfg.epsilon,
                      centered=cfg.centered)
    elif kind == "adagrad":
        cls = keras.optimizers.Adagrad
        kwargs.update(initial_accumulator_value=cfg.initial_accumulator_value,
                      epsilon=cfg.epsilon)
    elif kind == "lars":
        cls = _keras_objects().LARS
        kwargs.update(momentum=cfg.momentum, eeta=cfg.eeta,
                      weight_decay_rate=cfg.weight_decay_rate, nesterov=cfg.nesterov,
                      classic_momentum=cfg.classic_momentum,
                      exclude_from_weight_decay=cfg.exclude_from_weight_decay,
                      exclude_from_layer_adaptation=cfg.exclude_from_layer_adaptation)
    elif kind == "lion":
        cls = keras.optimizers.Lion
        kwargs.update(beta_1=cfg.beta_1, beta_2=cfg.beta_2,
                      weight_decay=cfg.weight_decay_rate or None)
        pattern = _weight_decay_pattern(None, cfg.exclude_from_weight_decay)
    else:  # a field added to OptimizerConfig without a builder here
        raise ConfigError(f"optimizer.type {kind!r} has no Keras 3 builder in "
                          f"lite_launcher.optimization.")
    return cls, kwargs, pattern


class OptimizerFactory:
    """Builds the learning rate and the Keras 3 optimizer of an `OptimizationConfig`.

        factory = OptimizerFactory(config)
        lr = factory.build_learning_rate()      # a float or a LearningRateSchedule
        optimizer = factory.build_optimizer(lr)

    Raises `ConfigError` (a `ValueError`, naming the key and the valid choices) when
    `optimizer.type` or `learning_rate.type` is not set or a chosen branch is incomplete.
    """

    def __init__(self, config: OptimizationConfig):
        self._config = config
        if config.optimizer.type is None:
            raise ConfigError(
                f"optimizer.type is not set; set it to one of: "
                f"{', '.join(_choices(config.optimizer))} (e.g. "
                f"trainer.optimizer_config.optimizer.type=sgd).")
        if config.learning_rate.type is None:
            raise ConfigError(
                f"learning_rate.type is not set; set it to one of: "
                f"{', '.join(_choices(config.learning_rate))} (e.g. "
                f"trainer.optimizer_config.learning_rate.type=constant with "
                f"trainer.optimizer_config.learning_rate.constant.learning_rate=0.1).")
        config.validate()
        self._optimizer_type = config.optimizer.type
        self._optimizer_config = config.optimizer.get()
        self._lr_type = config.learning_rate.type
        self._lr_config = config.learning_rate.get()
        self._warmup_type = config.warmup.type
        self._warmup_config = config.warmup.get()
        self._ema_config = config.ema

    @property
    def config(self) -> OptimizationConfig:
        return self._config

    def build_learning_rate(self):
        """Returns the learning rate: a float, or a serialisable `LearningRateSchedule`.

        The schedule of `learning_rate` (its value shifted by `offset`), wrapped in the
        `warmup` when one is set, then in `LegacyDecay` when `optimizer.sgd.decay` > 0.
        """
        k = _keras_objects()
        kind, cfg = self._lr_type, self._lr_config
        if kind == "constant":
            lr = float(cfg.learning_rate)
        elif kind == "stepwise":
            lr = k.PiecewiseConstantDecayWithOffset(cfg.boundaries, cfg.values, offset=cfg.offset,
                                                    name=cfg.name)
        elif kind == "exponential":
            lr = k.ExponentialDecayWithOffset(cfg.initial_learning_rate, cfg.decay_steps,
                                              cfg.decay_rate, staircase=bool(cfg.staircase),
                                              offset=cfg.offset, name=cfg.name)
        elif kind == "polynomial":
            lr = k.PolynomialDecayWithOffset(cfg.initial_learning_rate, cfg.decay_steps,
                                             end_learning_rate=cfg.end_learning_rate,
                                             power=cfg.power, cycle=cfg.cycle,
                                             offset=cfg.offset, name=cfg.name)
        elif kind == "cosine":
            lr = k.CosineDecayWithOffset(cfg.initial_learning_rate, cfg.decay_steps,
                                         alpha=cfg.alpha, offset=cfg.offset, name=cfg.name)
        elif kind == "power":
            lr = k.DirectPowerDecay(cfg.initial_learning_rate, power=cfg.power, name=cfg.name)
        elif kind == "power_linear":
            lr = k.PowerAndLinearDecay(cfg.initial_learning_rate, cfg.total_decay_steps,
                                       power=cfg.power,
                                       linear_decay_fraction=cfg.linear_decay_fraction,
                                       offset=cfg.offset, name=cfg.name)
        elif kind == "power_with_offset":
            lr = k.PowerDecayWithOffset(cfg.initial_learning_rate, power=cfg.power,
                                        offset=cfg.offset,
                                        pre_offset_learning_rate=cfg.pre_offset_learning_rate,
                                        name=cfg.name)
        elif kind == "step_cosine_with_offset":
            lr = k.StepCosineDecayWithOffset(cfg.boundaries, cfg.values, offset=cfg.offset,
                                             name=cfg.name)
        else:
            raise ConfigError(f"learning_rate.type {kind!r} has no schedule builder.")

        if self._warmup_type == "linear":
            lr = k.LinearWarmup(lr, self._warmup_config.warmup_steps,
                                self._warmup_config.warmup_learning_rate,
                                name=self._warmup_config.name)
        elif self._warmup_type == "polynomial":
            lr = k.PolynomialWarmUp(lr, self._warmup_config.warmup_steps,
                                    power=self._warmup_config.power,
                                    name=self._warmup_config.name)

        # Only TFM's `sgd` has the legacy `decay` argument.
        decay = self._optimizer_config.decay if self._optimizer_type == "sgd" else 0.0
        if decay < 0:
            raise ConfigError(f"optimizer.sgd.decay must be >= 0, got {decay}.")
        if decay > 0:
            lr = k.LegacyDecay(lr, decay)
        return lr

    def build_optimizer(self, lr, postprocessor=None):
        """Returns the Keras 3 optimizer with learning rate `lr` (float or schedule).

        `postprocessor` (TFM's argument): a function given the built optimizer that returns
        the optimizer to use (a wrapped or modified one); it must return a Keras optimizer.

        With `ema` set, the optimizer keeps moving averages of the variables it trains
        (Keras `use_ema=True`, `ema_momentum=average_decay`; TFM's `dynamic_decay` and
        `start_step` via a subclass). Read or swap them with `ema_variables` /
        `swap_ema_weights`.
        """
        import keras  # pylint: disable=import-outside-toplevel
        cls, kwargs, pattern = _optimizer_class_and_kwargs(self._config.optimizer)
        if not isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) and \
                not callable(lr):
            lr = float(lr)  # Keras accepts only a Python float here
        ema = self._ema_config
        if ema is not None:
            kwargs.update(use_ema=True, ema_momentum=float(ema.average_decay))
            if ema.dynamic_decay or ema.start_step or not ema.trainable_weights_only:
                cls = _keras_objects().ema_schedule_classes[cls]
                kwargs.update(ema_dynamic_decay=ema.dynamic_decay,
                              ema_start_step=ema.start_step,
                              ema_trainable_weights_only=ema.trainable_weights_only)
        try:
            optimizer = cls(learning_rate=lr, **kwargs)
        except ValueError as e:
            raise ConfigError(f"optimizer.{self._optimizer_type}: {e}") from e
        if pattern is not None:
            optimizer.exclude_from_weight_decay(var_names=[pattern])
        if postprocessor is not None:
            optimizer = postprocessor(optimizer)
            if not isinstance(optimizer, keras.optimizers.Optimizer):
                raise TypeError(f"build_optimizer's postprocessor returned "
                                f"{type(optimizer).__name__} ({optimizer!r}), not a Keras "
                                f"optimizer.")
        return optimizer


# ---------------------------------------------------------------------------
# Loss scaling, EMA access and the learning-rate value.
# ---------------------------------------------------------------------------


def configure_loss_scale(optimizer, use_float16: bool, loss_scale=None):
    """Wraps `optimizer` for float16 training; returns it unchanged when not `use_float16`.

    `loss_scale` None or "dynamic": `keras.optimizers.LossScaleOptimizer` (start 2**15, halve
    on a non-finite step and skip it, double after 2000 finite steps). A positive number: a
    `FixedLossScaleOptimizer` with that scale for good.
    """
    if not use_float16:
        return optimizer
    import keras  # pylint: disable=import-outside-toplevel
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    if loss_scale is None or loss_scale == "dynamic":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)) \
            or loss_scale <= 0:
        raise ConfigError(
            f"runtime.loss_scale must be 'dynamic', null or a positive number, "
            f"got {loss_scale!r}.")
    return _keras_objects().FixedLossScaleOptimizer(optimizer, float(loss_scale))


def _unwrap(optimizer):
    """The optimizer inside any LossScaleOptimizer wrappers."""
    import keras  # pylint: disable=import-outside-toplevel
    while isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    return optimizer


def has_ema(optimizer) -> bool:
    """Whether `optimizer` (or the one a LossScaleOptimizer wraps) keeps moving averages."""
    return bool(getattr(_unwrap(optimizer), "use_ema", False))


def ema_variables(optimizer) -> list:
    """The moving averages, one per variable the optimizer was built with, in that order.

    Raises ValueError when the optimizer has no EMA or is not built yet (averages are created
    with the slots, at `build` or the first `apply_gradients`).
    """
    inner = _unwrap(optimizer)
    if not has_ema(inner):
        raise ValueError(f"Optimizer {inner.name!r} keeps no moving averages; set "
                         f"optimizer_config.ema to train with EMA.")
    if not inner.built:
        raise ValueError(f"Optimizer {inner.name!r} is not built, so it has no moving averages "
                         f"yet; call optimizer.build(model.trainable_variables) first.")
    averages = getattr(inner, "_model_variables_moving_average", None)
    if averages is None:
        import keras  # pylint: disable=import-outside-toplevel
        raise RuntimeError(
            f"Keras {keras.__version__} keeps EMA averages somewhere other than "
            f"`optimizer._model_variables_moving_average`; update "
            f"lite_launcher.optimization.ema_variables.")
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
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    inner = _unwrap(optimizer)
    averages = ema_variables(inner)
    if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
        raise ValueError("swap_ema_weights must run in cross-replica context (outside "
                         "strategy.run), so that every replica's copy is swapped.")
    pairs = []
    for var in variables:
        try:
            index = inner._get_variable_index(var)  # pylint: disable=protected-access
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
    inner = _unwrap(optimizer)
    track = getattr(inner, "average_non_trainable_variables", None)
    if track is not None:
        track(list(variables))


def learning_rate_value(optimizer, step=None):
    """The learning rate as a float32 tensor: the schedule at `step` (default: the optimizer's
    `iterations`), or the constant. Works eagerly, in a `tf.function` and through a
    LossScaleOptimizer."""
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    inner = _unwrap(optimizer)
    lr = inner._learning_rate  # pylint: disable=protected-access
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        value = lr(inner.iterations if step is None else step)
    elif isinstance(lr, keras.Variable):
        value = lr.value
    elif callable(lr):
        value = lr()
    else:
        value = lr
    return tf.cast(tf.convert_to_tensor(value), tf.float32)
