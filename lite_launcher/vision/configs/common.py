"""Configs every vision task family shares (TFM's official/vision/configs/common.py): norm and
activation, the augmentation policies, the data decoder, and ImageNet's mean / stddev.

TensorFlow-free, as all of `configs/`: the driver validates a config before TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

from lite_launcher.base_config import Config, ConfigError, OneOfConfig

# ImageNet's per-channel mean and standard deviation on the 0..255 scale (TFM's MEAN_RGB /
# STDDEV_RGB): the default image normalisation of every family.
MEAN_RGB = tuple(255 * m for m in (0.485, 0.456, 0.406))
STDDEV_RGB = tuple(255 * s for s in (0.229, 0.224, 0.225))


def reject_unimplemented(config: Config, path: str, names: Sequence[str]) -> None:
    """Raises ConfigError if a field in `names` differs from its (TFM) default."""
    defaults = type(config)()
    for name in names:
        value, default = getattr(config, name), getattr(defaults, name)
        if value != default and not (not value and not default):
            raise ConfigError(
                f"{path}.{name} = {value!r} is not implemented by lite_launcher; remove it "
                f"or set it back to {default!r}.")


@dataclasses.dataclass
class NormActivation(Config):
    """Normalisation and activation of backbone and head (TFM's common.NormActivation)."""

    activation: str = "relu"
    use_sync_bn: bool = True
    norm_momentum: float = 0.99
    norm_epsilon: float = 0.001


@dataclasses.dataclass
class RandAugment(Config):
    """RandAugment options (TFM's common.RandAugment)."""

    num_layers: int = 2
    # Float literals (TFM writes 10, 40, 10): a params.yaml then reads back as written.
    magnitude: float = 10.0
    cutout_const: float = 40.0
    translate_const: float = 10.0
    magnitude_std: float = 0.0
    prob_to_apply: Optional[float] = None
    exclude_ops: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class AutoAugment(Config):
    """AutoAugment options (TFM's common.AutoAugment)."""

    augmentation_name: str = "v0"
    cutout_const: float = 100.0
    translate_const: float = 250.0


@dataclasses.dataclass
class Augmentation(OneOfConfig):
    """`type`: None (no policy), 'randaug' or 'autoaug' (TFM's common.Augmentation)."""

    type: Optional[str] = None
    randaug: RandAugment = dataclasses.field(default_factory=RandAugment)
    autoaug: AutoAugment = dataclasses.field(default_factory=AutoAugment)


@dataclasses.dataclass
class RandomErasing(Config):
    """Random erasing after normalisation (TFM's common.RandomErasing).

    TFM leaves max_aspect .. trials unannotated (class constants); here they are fields with
    the same defaults.
    """

    probability: float = 0.25
    min_area: float = 0.02
    max_area: float = 1 / 3
    min_aspect: float = 0.3
    max_aspect: Optional[float] = None
    min_count: int = 1
    max_count: int = 1
    trials: int = 10


@dataclasses.dataclass
class MixupAndCutmix(Config):
    """MixUp and CutMix on training batches (TFM's common.MixupAndCutmix)."""

    mixup_alpha: float = .8
    cutmix_alpha: float = 1.
    prob: float = 1.0
    switch_prob: float = 0.5
    label_smoothing: float = 0.1


@dataclasses.dataclass
class TfExampleDecoder(Config):
    """TFM's common.TfExampleDecoder (detection fields; unused by classification)."""

    regenerate_source_id: bool = False
    mask_binarize_threshold: Optional[float] = None
    attribute_names: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class DataDecoder(OneOfConfig):
    """TFM's common.DataDecoder; classification reads only the simple decoder."""

    type: Optional[str] = "simple_decoder"
    simple_decoder: TfExampleDecoder = dataclasses.field(default_factory=TfExampleDecoder)
