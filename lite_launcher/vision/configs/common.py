"""Configs every vision task family shares (TFM's official/vision/configs/common.py): norm and
activation, the augmentation policies, the data decoder, and ImageNet's mean / stddev.

TensorFlow-free, as all of `configs/`: the driver validates a config before TensorFlow loads.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

from lite_launcher.core.base_config import Config, ConfigError, OneOfConfig

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


DATA_DTYPES = ("float32", "float16", "bfloat16")


def check_data_config(data: Config, path: str) -> None:
    """The checks every vision DataConfig shares, as `path` (task.train_data, ...): its
    `UNIMPLEMENTED` fields keep their defaults and `dtype` is one of `DATA_DTYPES`."""
    reject_unimplemented(data, path, data.UNIMPLEMENTED)
    if data.dtype not in DATA_DTYPES:
        raise ConfigError(f"{path}.dtype {data.dtype!r} must be 'float32', 'float16' or "
                          f"'bfloat16'.")


# What `task.init_checkpoint_modules` may name (TFM's detection and segmentation tasks). A task
# config class whose model has fewer parts names its own in `INIT_CHECKPOINT_MODULES`.
INIT_CHECKPOINT_MODULES = ("all", "backbone", "decoder")


def init_modules(task_config: Config) -> List[str]:
    """`task_config.init_checkpoint_modules` as a list, checked against what its task config
    class may restore (`INIT_CHECKPOINT_MODULES`): 'all' alone (the whole model), or parts.

    The one rule every vision family reads (`tasks.common.restore_init_checkpoint`) and
    validates (each task config's `_validate`), so a wrong name is refused before anything
    is built.

    Raises:
      ConfigError: an empty list, a name the task does not restore, or 'all' with parts.
    """
    modules = task_config.init_checkpoint_modules
    modules = [modules] if isinstance(modules, str) else list(modules or ())
    allowed = getattr(type(task_config), "INIT_CHECKPOINT_MODULES", INIT_CHECKPOINT_MODULES)
    parts = [m for m in allowed if m != "all"]
    if (not modules or any(m not in allowed for m in modules)
            or ("all" in modules and len(modules) > 1)):
        choices = (f"'all' or {parts[0]!r}" if len(parts) == 1 else
                   "'all', " + ", ".join(repr(m) for m in parts)
                   + " or a list of " + " / ".join(repr(m) for m in parts))
        raise ConfigError(f"task.init_checkpoint_modules {task_config.init_checkpoint_modules!r} "
                          f"must be {choices}.")
    return modules


def check_data_and_init_modules(task_config: Config) -> None:
    """The checks a backbone -> decoder -> head task config shares: its train and validation
    data, and `init_checkpoint_modules` within `INIT_CHECKPOINT_MODULES`."""
    task_config.train_data.check("task.train_data")
    task_config.validation_data.check("task.validation_data")
    init_modules(task_config)


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
class SSDRandomCropParam(Config):
    """One of SSD's random-crop choices (TFM's common.SSDRandomCropParam)."""

    min_object_covered: float = 0.0
    min_box_overlap: float = 0.5
    prob_to_apply: float = 0.85


@dataclasses.dataclass
class SSDRandomCrop(Config):
    """SSD's random crop (TFM's common.SSDRandomCrop; the RetinaNet parser's
    `aug_type: ssd_random_crop`)."""

    ssd_random_crop_params: Sequence[SSDRandomCropParam] = dataclasses.field(
        default_factory=lambda: tuple(SSDRandomCropParam(min_object_covered=covered)
                                      for covered in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)))
    aspect_ratio_range: Tuple[float, float] = (0.5, 2.0)
    area_range: Tuple[float, float] = (0.1, 1.0)


@dataclasses.dataclass
class Augmentation(OneOfConfig):
    """`type`: None (no policy), 'randaug', 'autoaug' or 'ssd_random_crop' (TFM's
    common.Augmentation; each family says which it implements)."""

    type: Optional[str] = None
    randaug: RandAugment = dataclasses.field(default_factory=RandAugment)
    autoaug: AutoAugment = dataclasses.field(default_factory=AutoAugment)
    ssd_random_crop: SSDRandomCrop = dataclasses.field(default_factory=SSDRandomCrop)


@dataclasses.dataclass
class RandJpegQuality(Config):
    """Re-encodes a training image as JPEG of a random quality (TFM's
    common.RandJpegQuality)."""

    min_quality: int = 20
    max_quality: int = 100
    prob_to_apply: float = 0.6


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
class TfExampleDecoderLabelMap(Config):
    """TFM's common.TfExampleDecoderLabelMap: class ids from the text labels of the records
    through `label_map` (a file of `id,name` rows); detection only."""

    regenerate_source_id: bool = False
    mask_binarize_threshold: Optional[float] = None
    label_map: str = ""


@dataclasses.dataclass
class DataDecoder(OneOfConfig):
    """TFM's common.DataDecoder: 'simple_decoder' or 'label_map_decoder' (the latter read by
    detection only)."""

    type: Optional[str] = "simple_decoder"
    simple_decoder: TfExampleDecoder = dataclasses.field(default_factory=TfExampleDecoder)
    label_map_decoder: TfExampleDecoderLabelMap = dataclasses.field(
        default_factory=TfExampleDecoderLabelMap)


@dataclasses.dataclass
class TFLitePostProcessingConfig(Config):
    """TFM's common.TFLitePostProcessingConfig (the `tflite` NMS of TFLite exports; lite
    does not implement that NMS: kept so that a config naming it loads)."""

    max_detections: int = 200
    max_classes_per_detection: int = 5
    use_regular_nms: bool = False
    nms_score_threshold: float = 0.1
    nms_iou_threshold: float = 0.5
    normalize_anchor_coordinates: Optional[bool] = False
    omit_nms: Optional[bool] = False
    detections_per_class: Optional[int] = 5
    y_scale: float = 1.0
    x_scale: float = 1.0
    w_scale: float = 1.0
    h_scale: float = 1.0
