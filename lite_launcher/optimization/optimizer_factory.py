"""`OptimizerFactory`: an `OptimizationConfig` to a Keras 3 learning rate and optimizer.

Table-driven as TFM's `optimizer_factory`: `OPTIMIZERS_CLS`, `LR_CLS` and `WARMUP_CLS` map a
config `type` to what builds it, and `register_optimizer_cls`, `register_learning_rate_cls`
and `register_warmup_cls` add a user's (the user also subclasses the config to add the
field, as in TFM). `create_optimizer_variables` makes a built optimizer's slot and EMA
variables before the first traced step.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence

import gin
import keras
from absl import logging

from lite_launcher.core.base_config import Config, ConfigError
from lite_launcher.optimization import ema_optimizer, loss_scale, lr_schedule, optimizers
from lite_launcher.optimization.configs import OptimizationConfig, clip_kwargs

_CLIP_FIELDS = ("clipnorm", "clipvalue", "global_clipnorm")


def _fields(config: Config) -> dict:
    """The config's own fields (not keys a non-strict override added) as constructor kwargs."""
    return {name: getattr(config, name) for name in config.field_names()}


def _weight_decay_pattern(include: Optional[Sequence[str]],
                          exclude: Optional[Sequence[str]]) -> Optional[str]:
    """One regex that matches the variable names TFM would exclude from weight decay.

    TFM: a name matching an `include` regex is decayed; else one matching an `exclude` regex
    is not. Keras searches a single pattern in the variable name (`scope/.../kernel:0`).
    A single string is one regex.
    """
    include = [include] if isinstance(include, str) else include
    exclude = [exclude] if isinstance(exclude, str) else exclude
    if not exclude:
        return None
    excluded = "|".join(f"(?:{p})" for p in exclude)
    if not include:
        return excluded
    included = "|".join(f"(?:{p})" for p in include)
    return f"^(?!.*(?:{included}))(?=.*(?:{excluded}))"


@dataclasses.dataclass(frozen=True)
class OptimizerEntry:
    """How one `optimizer.type` is built.

    Attributes:
      cls: the Keras optimizer class.
      ema_cls: `cls` with `ExponentialMovingAverage`, built when `ema` is set; None: the
        factory adds the mixin itself (`ema_optimizer.with_ema_schedule`).
      arguments: the branch config -> constructor kwargs besides learning_rate, name and
        clipping.
      weight_decay_exclusion: the branch config -> a regex of variables Keras must not decay
        (`exclude_from_weight_decay`), or None.
    """

    cls: type
    ema_cls: Optional[type]
    arguments: Callable[[Config], dict]
    weight_decay_exclusion: Callable[[Config], Optional[str]] = lambda cfg: None


def _adam_arguments(cfg) -> dict:
    return {"beta_1": cfg.beta_1, "beta_2": cfg.beta_2, "epsilon": cfg.epsilon,
            "amsgrad": cfg.amsgrad}


def _layer_adaptive_arguments(cfg) -> dict:
    return {"weight_decay_rate": cfg.weight_decay_rate,
            "exclude_from_weight_decay": cfg.exclude_from_weight_decay,
            "exclude_from_layer_adaptation": cfg.exclude_from_layer_adaptation}


_SGD = OptimizerEntry(optimizers.SGD, ema_optimizer.SGDWithEMASchedule,
                      lambda cfg: {"momentum": cfg.momentum, "nesterov": cfg.nesterov})
_ADAM = OptimizerEntry(optimizers.Adam, ema_optimizer.AdamWithEMASchedule,
                       _adam_arguments)

# optimizer.type -> how it is built. TFM's `*_experimental` became Keras 3's optimizers.
OPTIMIZERS_CLS: Dict[str, OptimizerEntry] = {
    "sgd": _SGD,
    "sgd_experimental": _SGD,
    "adam": _ADAM,
    "adam_experimental": _ADAM,
    # TFM's AdamWeightDecay: decoupled decay with regex include / exclude lists.
    "adamw": OptimizerEntry(
        optimizers.AdamW, ema_optimizer.AdamWWithEMASchedule,
        lambda cfg: {**_adam_arguments(cfg), "weight_decay": cfg.weight_decay_rate},
        lambda cfg: _weight_decay_pattern(cfg.include_in_weight_decay,
                                          cfg.exclude_from_weight_decay)),
    "adamw_experimental": OptimizerEntry(
        optimizers.AdamW, ema_optimizer.AdamWWithEMASchedule,
        lambda cfg: {**_adam_arguments(cfg), "weight_decay": cfg.weight_decay}),
    "lamb": OptimizerEntry(
        optimizers.LAMB, ema_optimizer.LAMBWithEMASchedule,
        lambda cfg: {"beta_1": cfg.beta_1, "beta_2": cfg.beta_2, "epsilon": cfg.epsilon,
                     **_layer_adaptive_arguments(cfg)}),
    "rmsprop": OptimizerEntry(
        optimizers.RMSprop, ema_optimizer.RMSpropWithEMASchedule,
        lambda cfg: {"rho": cfg.rho, "momentum": cfg.momentum, "epsilon": cfg.epsilon,
                     "centered": cfg.centered}),
    "adagrad": OptimizerEntry(
        keras.optimizers.Adagrad, ema_optimizer.AdagradWithEMASchedule,
        lambda cfg: {"initial_accumulator_value": cfg.initial_accumulator_value,
                     "epsilon": cfg.epsilon}),
    "lars": OptimizerEntry(
        optimizers.LARS, ema_optimizer.LARSWithEMASchedule,
        lambda cfg: {"momentum": cfg.momentum, "eeta": cfg.eeta, "nesterov": cfg.nesterov,
                     "classic_momentum": cfg.classic_momentum,
                     **_layer_adaptive_arguments(cfg)}),
    "lion": OptimizerEntry(
        optimizers.Lion, ema_optimizer.LionWithEMASchedule,
        lambda cfg: {"beta_1": cfg.beta_1, "beta_2": cfg.beta_2,
                     "weight_decay": cfg.weight_decay_rate or None},
        lambda cfg: _weight_decay_pattern(None, cfg.exclude_from_weight_decay)),
}

# learning_rate.type -> schedule class, built from the branch's fields (`constant` is a float).
LR_CLS: Dict[str, type] = {
    "stepwise": lr_schedule.PiecewiseConstantDecayWithOffset,
    "exponential": lr_schedule.ExponentialDecayWithOffset,
    "polynomial": lr_schedule.PolynomialDecayWithOffset,
    "cosine": lr_schedule.CosineDecayWithOffset,
    "power": lr_schedule.DirectPowerDecay,
    "power_linear": lr_schedule.PowerAndLinearDecay,
    "power_with_offset": lr_schedule.PowerDecayWithOffset,
    "step_cosine_with_offset": lr_schedule.StepCosineDecayWithOffset,
}

# warmup.type -> warmup class, built from the schedule and the branch's fields.
WARMUP_CLS: Dict[str, type] = {
    "linear": lr_schedule.LinearWarmup,
    "polynomial": lr_schedule.PolynomialWarmUp,
}


def _check_new_key(table: dict, key: str, what: str) -> None:
    if key in table:
        raise ValueError(f"{what} {key!r} is already registered (as {table[key]!r}).")


def register_optimizer_cls(key: str, optimizer_cls: type,
                           ema_cls: Optional[type] = None) -> None:
    """Registers a Keras optimizer class for `optimizer.type: key` (TFM's function).

    The optimizer is built as `optimizer_cls(learning_rate=lr, **fields)`, the fields of the
    `optimizer.<key>` config (subclass `OptimizerConfig` to add that field, and
    `BaseOptimizerConfig` for its config, as in TFM). `ema_cls` is the class built when `ema`
    is set: `optimizer_cls` with `ema_optimizer.ExponentialMovingAverage` first among its
    bases (by default `optimizer_cls` itself when it has the mixin, else one the factory
    derives). Registering a key twice
    is a `ValueError`, as in TFM.
    """
    _check_new_key(OPTIMIZERS_CLS, key, "Optimizer")
    if ema_cls is None and issubclass(optimizer_cls, ema_optimizer.ExponentialMovingAverage):
        ema_cls = optimizer_cls
    OPTIMIZERS_CLS[key] = OptimizerEntry(
        optimizer_cls, ema_cls,
        lambda cfg: {k: v for k, v in _fields(cfg).items() if k not in ("name", *_CLIP_FIELDS)})


def register_learning_rate_cls(key: str, schedule_cls: type) -> None:
    """Registers a `LearningRateSchedule` class for `learning_rate.type: key`, built as
    `schedule_cls(**fields)` of the `learning_rate.<key>` config (add the field to a
    `LrConfig` subclass). Registering a key twice is a `ValueError`."""
    _check_new_key(LR_CLS, key, "Learning-rate schedule")
    LR_CLS[key] = schedule_cls


def register_warmup_cls(key: str, warmup_cls: type) -> None:
    """Registers a warmup schedule class for `warmup.type: key`, built as
    `warmup_cls(schedule, **fields)` of the `warmup.<key>` config (add the field to a
    `WarmupConfig` subclass). Registering a key twice is a `ValueError`."""
    _check_new_key(WARMUP_CLS, key, "Warmup")
    WARMUP_CLS[key] = warmup_cls


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
                f"{', '.join(config.optimizer.choices())} (e.g. "
                f"trainer.optimizer_config.optimizer.type=sgd).")
        if config.learning_rate.type is None:
            raise ConfigError(
                f"learning_rate.type is not set; set it to one of: "
                f"{', '.join(config.learning_rate.choices())} (e.g. "
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
        if self._lr_type == "constant":
            lr = float(self._lr_config.learning_rate)
        elif self._lr_type in LR_CLS:
            lr = LR_CLS[self._lr_type](**_fields(self._lr_config))
        else:
            raise ConfigError(f"learning_rate.type {self._lr_type!r} has no schedule class; "
                              f"register one with register_learning_rate_cls.")
        if self._warmup_type is not None:
            if self._warmup_type not in WARMUP_CLS:
                raise ConfigError(f"warmup.type {self._warmup_type!r} has no warmup class; "
                                  f"register one with register_warmup_cls.")
            lr = WARMUP_CLS[self._warmup_type](lr, **_fields(self._warmup_config))

        # Only TFM's `sgd` has the legacy `decay` argument, which Keras 3 optimizers dropped.
        decay = self._optimizer_config.decay if self._optimizer_type == "sgd" else 0.0
        if decay < 0:
            raise ConfigError(f"optimizer.sgd.decay must be >= 0, got {decay}.")
        if decay > 0:
            lr = lr_schedule.LegacyDecay(lr, decay)
        return lr

    @gin.configurable  # as TFM's: a gin file may set `build_optimizer.postprocessor`
    def build_optimizer(self, lr, postprocessor=None):
        """Returns the Keras 3 optimizer with learning rate `lr` (float or schedule).

        `postprocessor` (TFM's argument): a function given the built optimizer that returns
        the optimizer to use (a wrapped or modified one); it must return a Keras optimizer.

        With `ema` set, the optimizer is an `ExponentialMovingAverage` (TFM's class: its
        `swap_weights()` / `shadow_copy(model)`) keeping moving averages of the variables it
        trains (Keras `use_ema=True`, `ema_momentum=average_decay`, TFM's `dynamic_decay`
        and `start_step`): `entry.ema_cls`, else the class with the mixin added. Read or
        swap them also with `ema_variables` / `swap_ema_weights`.
        """
        kind, cfg = self._optimizer_type, self._optimizer_config
        entry = OPTIMIZERS_CLS.get(kind)
        if entry is None:  # a field added to OptimizerConfig without registering a class
            raise ConfigError(f"optimizer.type {kind!r} has no Keras optimizer class; register "
                              f"one with register_optimizer_cls.")
        if getattr(cfg, "jit_compile", False):
            logging.warning("optimizer.%s.jit_compile has no effect with Keras 3 optimizers; "
                            "the train step's compilation decides.", kind)
        cls = entry.cls
        kwargs = {**clip_kwargs(self._config.optimizer), **entry.arguments(cfg)}
        if getattr(cfg, "name", None):
            kwargs["name"] = cfg.name
        if not isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) and \
                not callable(lr):
            lr = float(lr)  # Keras accepts only a Python float here
        ema = self._ema_config
        if ema is not None:
            # Always an `ExponentialMovingAverage` (TFM's check in eval_begin / eval_end);
            # with a fixed decay from step 0 it averages exactly as Keras's own `use_ema`.
            cls = entry.ema_cls or ema_optimizer.with_ema_schedule(cls)
            kwargs.update(use_ema=True, ema_momentum=float(ema.average_decay),
                          ema_dynamic_decay=ema.dynamic_decay, ema_start_step=ema.start_step,
                          ema_trainable_weights_only=ema.trainable_weights_only)
        try:
            optimizer = cls(learning_rate=lr, **kwargs)
        except ValueError as e:
            raise ConfigError(f"optimizer.{kind}: {e}") from e
        pattern = entry.weight_decay_exclusion(cfg)
        if pattern is not None:
            optimizer.exclude_from_weight_decay(var_names=[pattern])
        if postprocessor is not None:
            optimizer = postprocessor(optimizer)
            if not isinstance(optimizer, keras.optimizers.Optimizer):
                raise TypeError(f"build_optimizer's postprocessor returned "
                                f"{type(optimizer).__name__} ({optimizer!r}), not a Keras "
                                f"optimizer.")
        return optimizer


def _multi_optimizer(optimizer):
    """The `keras.optimizers.MultiOptimizer` `optimizer` is or wraps (loss scaling), or None."""
    inner = loss_scale.unwrap_loss_scale(optimizer)
    return inner if isinstance(inner, keras.optimizers.MultiOptimizer) else None


def optimizers_by_name(optimizer) -> Dict[str, object]:
    """The optimizer(s) by name, as the Trainer logs their learning rates.

    `{"": opt}` for one; for a `keras.optimizers.MultiOptimizer` its inner optimizers named
    as TFM's RankingTrainer logs them, `<OptimizerClass>_<i>` (`SGD_0`, `Adam_1`); the
    entries of a dict or list of optimizers (a multi-optimizer Trainer subclass); `{}` for
    None.
    """
    if optimizer is None:
        return {}
    if isinstance(optimizer, dict):
        return dict(optimizer)
    if isinstance(optimizer, (list, tuple)):
        return {getattr(o, "name", None) or f"optimizer_{i}": o for i, o in enumerate(optimizer)}
    multi = _multi_optimizer(optimizer)
    if multi is not None:
        return {f"{type(o).__name__}_{i}": o for i, o in enumerate(multi.optimizers)}
    return {"": optimizer}


def track_inner_optimizers(optimizer) -> None:
    """Makes a `MultiOptimizer`'s inner optimizers checkpoint dependencies of it.

    Keras 3 keeps them in a list TensorFlow's checkpoints do not follow: without this a
    checkpoint of the model's optimizer holds none of their state (iterations, moments), and
    a resumed run restarts each at step 0. They are saved as `inner_optimizer_<i>`, in the
    order of `optimizer.optimizers`. Other optimizers are left alone.
    """
    multi = _multi_optimizer(optimizer)
    if multi is None:
        return
    for i, inner in enumerate(multi.optimizers):
        # An attribute holding a trackable is a checkpoint dependency (TF's AutoTrackable).
        setattr(multi, f"inner_optimizer_{i}", inner)


def create_optimizer_variables(optimizer, model) -> None:
    """Creates the optimizer(s)' slot and EMA variables for `model`, now.

    Call it eagerly in the strategy scope: under a MirroredStrategy a variable created inside
    the replica context of a traced step fails. With `ema.trainable_weights_only: false` the
    averages also cover the model's non-trainable variables (BatchNorm statistics). A
    `MultiOptimizer` is built whole (each inner optimizer on its own variables) and its inner
    optimizers are tracked for checkpoints (`track_inner_optimizers`).
    """
    trainable = model.trainable_variables if model is not None else []
    if not trainable:
        return
    if isinstance(optimizer, dict):
        top_level = list(optimizer.values())
    elif isinstance(optimizer, (list, tuple)):
        top_level = list(optimizer)
    else:
        top_level = [optimizer]
    for each in top_level:
        if isinstance(each, keras.optimizers.Optimizer) and not each.built:
            each.build(trainable)
        track_inner_optimizers(each)
        ema_optimizer.average_non_trainable_variables(each, model.non_trainable_variables)


def _keras_optimizers(optimizer) -> List[object]:
    """Every Keras optimizer in `optimizer`: itself, a dict's or list's entries, a
    `MultiOptimizer`'s inner ones and a wrapper's `inner_optimizer` (loss scaling, EMA)."""
    found, pending = [], [optimizer]
    while pending:
        each = pending.pop()
        if isinstance(each, dict):
            pending.extend(each.values())
        elif isinstance(each, (list, tuple)):
            pending.extend(each)
        elif isinstance(each, keras.optimizers.Optimizer) and \
                not any(each is seen for seen in found):
            found.append(each)
            pending.extend(getattr(each, "optimizers", None) or [])
            if getattr(each, "inner_optimizer", None) is not None:
                pending.append(each.inner_optimizer)
    return found


def make_step_counts_atomic(optimizer) -> None:
    """Makes each Keras optimizer count its steps with one atomic variable op.

    Keras 3's `BaseOptimizer.apply` counts with `iterations.assign_add(1)`, which a Keras
    variable runs as `assign(self + 1)`: a read, then a write. Parameter-server workers apply
    updates concurrently, each read and write a separate call to the parameter server, so
    increments are lost (measured: `iterations` 1,883 after 3,000 steps of 2 workers) and
    learning-rate schedules, which read `iterations`, fall behind `global_step`. Here the
    increment goes to the `tf.Variable`'s own `assign_add` (one op on the parameter server),
    as in TFM's tf_keras optimizers. The weight updates need nothing: Keras applies them with
    the `tf.Variable` ops already.
    """
    for each in _keras_optimizers(optimizer):
        counter = getattr(each, "_iterations", None)
        if isinstance(counter, keras.Variable):
            counter.assign_add = _atomic_assign_add(counter)


def _atomic_assign_add(variable):
    def assign_add(value):
        return variable.value.assign_add(value)  # Keras passes a Python int

    return assign_add
