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

The modules, as TFM's: `configs` (the dataclasses; no TensorFlow), `optimizer_factory`,
`lr_schedule`, `optimizers` (LAMB, LARS), `ema_optimizer`, `loss_scale`. Every public name is
also here; the configs are imported with this package, the Keras parts on first use, so
importing the configs stays cheap.

Where TFM and Keras 3 differ, this package does what a TFM user expects and says so:

- `learning_rate.type: null` is a `ConfigError` (a `ValueError`, as TFM's), raised when the
  factory is built: there is no silent fallback to a Keras default rate.
- Schedules hold their step-0 value before `offset` (TFM evaluates them at a negative step
  there, which for exponential or polynomial decay exceeds the initial rate).
- `sgd.decay` (the legacy optimizers' `lr / (1 + decay * step)`) is applied by wrapping the
  schedule, since Keras 3 optimizers dropped `decay`.
- `sgd` / `rmsprop` / `adam` / `adamw` build `optimization.SGD` / `RMSprop` / `Adam` / `AdamW`:
  Keras 3's optimizers with TensorFlow's fused update kernels (`ResourceApplyKerasMomentum`,
  `ResourceApplyRMSProp`, `ResourceApplyAdam`; one op per variable, as tf_keras ran them; SGD
  and RMSprop when momentum > 0, Adam without amsgrad): the same update in fewer ops.
- `adamw` is TFM's AdamWeightDecay: decoupled decay (Keras 3 `AdamW`), regex `include_in_` /
  `exclude_from_weight_decay` matched against variable paths, and `gradient_clip_norm`
  (default 1.0) as Keras 3 `global_clipnorm`.
- `lamb` is TFM's LAMB (weight decay inside the trust ratio, `exclude_from_layer_adaptation`),
  written as a subclass of Keras 3's `Lamb`; `lars` is TFM's LARS as a Keras 3 optimizer.
- TFM's `power`, `power_linear`, `power_with_offset` and `step_cosine_with_offset` schedules
  have TFM's fields and formulas (`step_cosine_with_offset` holds its last value after the
  last boundary, where TFM's divides by zero).
- `build_optimizer(lr, postprocessor=fn)` passes the built optimizer through `fn`, as TFM's.
- EMA is Keras 3's own, with TFM's `dynamic_decay` and `start_step`, and optionally over the
  non-trainable variables too; an optimizer built with `ema` is an `ExponentialMovingAverage`
  (TFM's class, with `swap_weights()` and `shadow_copy(model)`), see `ema_optimizer`.
- A fixed `runtime.loss_scale` uses `FixedLossScaleOptimizer`, a `LossScaleOptimizer` whose
  scale never changes and which, like TF2's fixed loss scale, never skips a step.
"""

import importlib

from lite_launcher.optimization.configs import (  # noqa: F401  (the public configs)
    AdagradConfig, AdamConfig, AdamExperimentalConfig, AdamWeightDecayConfig,
    AdamWeightDecayExperimentalConfig, BaseOptimizerConfig, ConstantLrConfig, CosineLrConfig,
    DirectPowerLrConfig, EMAConfig, ExponentialLrConfig, LAMBConfig, LARSConfig,
    LinearWarmupConfig, LionConfig, LrConfig, OptimizationConfig, OptimizerConfig,
    PolynomialLrConfig, PolynomialWarmupConfig, PowerAndLinearDecayLrConfig,
    PowerDecayWithOffsetLrConfig, RMSPropConfig, SGDConfig, SGDExperimentalConfig,
    StepCosineLrConfig, StepwiseLrConfig, WarmupConfig)

# Public name -> the submodule that defines it; these import TensorFlow, so only on first use.
_LAZY = {
    **dict.fromkeys(
        ("OptimizerFactory", "OptimizerEntry", "OPTIMIZERS_CLS", "LR_CLS", "WARMUP_CLS",
         "register_optimizer_cls", "register_learning_rate_cls", "register_warmup_cls",
         "optimizers_by_name", "create_optimizer_variables", "track_inner_optimizers",
         "make_step_counts_atomic"),
        "optimizer_factory"),
    **dict.fromkeys(
        ("Offset", "PiecewiseConstantDecayWithOffset", "ExponentialDecayWithOffset",
         "PolynomialDecayWithOffset", "CosineDecayWithOffset", "DirectPowerDecay",
         "PowerAndLinearDecay", "PowerDecayWithOffset", "StepCosineDecayWithOffset",
         "LinearWarmup", "PolynomialWarmUp", "LegacyDecay", "learning_rate_value"),
        "lr_schedule"),
    **dict.fromkeys(("SGD", "RMSprop", "Adam", "AdamW", "FusedAdamUpdate", "LAMB", "LARS"),
                    "optimizers"),
    **dict.fromkeys(
        ("ExponentialMovingAverage", "EMAScheduleMixin", "with_ema_schedule", "has_ema",
         "ema_variables", "swap_ema_weights", "average_non_trainable_variables"),
        "ema_optimizer"),
    **dict.fromkeys(("FixedLossScaleOptimizer", "configure_loss_scale", "unwrap_loss_scale"),
                    "loss_scale"),
}


_SUBMODULES = ("optimizer_factory", "lr_schedule", "optimizers", "ema_optimizer", "loss_scale")


def __getattr__(name):
    if name in _SUBMODULES:  # `optimization.lr_schedule` before anything imported it
        return importlib.import_module(f"{__name__}.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The factory imports every Keras module, so each class is registered with Keras
    # serialization as soon as any of them is used.
    importlib.import_module(f"{__name__}.optimizer_factory")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
