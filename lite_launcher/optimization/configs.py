"""The optimization configs (TFM's `official/modeling/optimization/configs`), field for field.

`OptimizationConfig` holds the optimizer, learning-rate, warmup and EMA choices and validates
the chosen branches. Pure dataclasses: importing this module imports no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Union

from lite_launcher.core.base_config import Config, ConfigError, OneOfConfig

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
    """`keras.optimizers.SGD` (lite's subclass with TF's fused momentum kernel: `optimizers.SGD`).
    `decay` > 0 divides the learning rate by `1 + decay * step`."""

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
        matches `exclude_from_weight_decay`. A single string is one regex (TFM's ViT YAMLs
        write one; TFM would iterate its characters).
      exclude_from_weight_decay: regexes (or one string); matching variables are not decayed.
      gradient_clip_norm: clip all gradients to this global norm (0 disables); becomes Keras
        `global_clipnorm`.
    """

    name: str = "AdamWeightDecay"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-07
    amsgrad: bool = False
    weight_decay_rate: float = 0.0
    include_in_weight_decay: Optional[Union[str, List[str]]] = None
    exclude_from_weight_decay: Optional[Union[str, List[str]]] = None
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
    """TFM's LAMB (built as `optimizers.LAMB`).

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
    """TFM's LARS (layer-wise adaptive rate scaling, built as `optimizers.LARS`).

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


def _check_type(oneof: OneOfConfig, key: str) -> None:
    if oneof.type is not None and oneof.type not in oneof.choices():
        raise ConfigError(
            f"Unknown value {oneof.type!r} for {key}.type. "
            f"Valid values: {', '.join(oneof.choices())}.")


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
    clip_kwargs(oneof)


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
    if "warmup_steps" not in oneof.get().field_names():
        return  # a registered warmup (`register_warmup_cls`) checks its own fields
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


def clip_kwargs(oneof: OptimizerConfig) -> dict:
    """The Keras clipping arguments of the chosen optimizer; errors name the keys."""
    kind = oneof.type
    cfg = oneof.get()
    clips = {k: getattr(cfg, k, None) for k in ("clipnorm", "clipvalue", "global_clipnorm")
             if getattr(cfg, k, None) is not None}
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


