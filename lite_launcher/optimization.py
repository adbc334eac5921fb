"""Optimizer, learning-rate and EMA configs (TFM's official/modeling/optimization/configs).

PROVISIONAL: config dataclasses only; the builders are being written.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from lite_launcher.base_config import Config, OneOfConfig


@dataclasses.dataclass
class BaseOptimizerConfig(Config):
    name: str = ""
    clipnorm: Optional[float] = None
    clipvalue: Optional[float] = None
    global_clipnorm: Optional[float] = None


@dataclasses.dataclass
class SGDConfig(BaseOptimizerConfig):
    name: str = "SGD"
    nesterov: bool = False
    momentum: float = 0.0


@dataclasses.dataclass
class AdamConfig(BaseOptimizerConfig):
    name: str = "Adam"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-07
    amsgrad: bool = False


@dataclasses.dataclass
class OptimizerConfig(OneOfConfig):
    type: Optional[str] = None
    sgd: SGDConfig = dataclasses.field(default_factory=SGDConfig)
    adam: AdamConfig = dataclasses.field(default_factory=AdamConfig)


@dataclasses.dataclass
class ConstantLrConfig(Config):
    name: str = "Constant"
    learning_rate: float = 0.1


@dataclasses.dataclass
class StepwiseLrConfig(Config):
    name: str = "PiecewiseConstantDecay"
    boundaries: Optional[List[int]] = None
    values: Optional[List[float]] = None
    offset: int = 0


@dataclasses.dataclass
class LrConfig(OneOfConfig):
    type: Optional[str] = None
    constant: ConstantLrConfig = dataclasses.field(default_factory=ConstantLrConfig)
    stepwise: StepwiseLrConfig = dataclasses.field(default_factory=StepwiseLrConfig)


@dataclasses.dataclass
class LinearWarmupConfig(Config):
    name: str = "linear"
    warmup_learning_rate: float = 0.0
    warmup_steps: Optional[int] = None


@dataclasses.dataclass
class WarmupConfig(OneOfConfig):
    type: Optional[str] = None
    linear: LinearWarmupConfig = dataclasses.field(default_factory=LinearWarmupConfig)


@dataclasses.dataclass
class EMAConfig(Config):
    average_decay: float = 0.99
    trainable_weights_only: bool = True


@dataclasses.dataclass
class OptimizationConfig(Config):
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    ema: Optional[EMAConfig] = None
    learning_rate: LrConfig = dataclasses.field(default_factory=LrConfig)
    warmup: WarmupConfig = dataclasses.field(default_factory=WarmupConfig)
