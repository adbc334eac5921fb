"""Image classification configs with TFM's field names and defaults.

Mirrors official/vision/configs/{image_classification,backbones,common}.py of
tf-models-official 2.20, so that a TFM YAML for `image_classification`, `resnet_imagenet` or
`mobilenet_imagenet` loads unchanged. A TFM field that lite_launcher does not implement is kept
(so a YAML naming it with its default still loads) but any other value is rejected by
`validate()` with a `ConfigError` naming the field, never silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence, Tuple, Union

from lite_launcher.base_config import Config, ConfigError, OneOfConfig
from lite_launcher.config import DataConfig as BaseDataConfig
from lite_launcher.config import ExperimentConfig, RuntimeConfig, TaskConfig, TrainerConfig
from lite_launcher.registry import register_config_factory

IMAGENET_TRAIN_EXAMPLES = 1281167
IMAGENET_VAL_EXAMPLES = 50000
IMAGENET_INPUT_PATH_BASE = "imagenet-2012-tfrecord"

RESNET_MODEL_IDS = (10, 18, 26, 34, 50, 101, 152, 200, 270, 350, 420)
MOBILENET_MODEL_IDS = (
    "MobileNetV1", "MobileNetV2", "MobileNetV3Large", "MobileNetV3Small", "MobileNetMultiAVG",
    "MobileNetMultiAVGSeg", "MobileNetV4ConvSmall", "MobileNetV4ConvMedium",
    "MobileNetV4ConvLarge", "MobileNetV4ConvMediumSeg", "MobileNetV4HybridMedium",
    "MobileNetV4HybridLarge")
DILATED_RESNET_MODEL_IDS = (50, 101, 152, 200)


def _reject_unimplemented(config: Config, path: str, names: Sequence[str]) -> None:
    """Raises ConfigError if a field in `names` differs from its (TFM) default."""
    defaults = type(config)()
    for name in names:
        value, default = getattr(config, name), getattr(defaults, name)
        if value != default and not (not value and not default):
            raise ConfigError(
                f"{path}.{name} = {value!r} is not implemented by lite_launcher; remove it "
                f"or set it back to {default!r}.")


# ---------------------------------------------------------------------------
# common.py
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# backbones.py
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class ResNet(Config):
    """TFM's ResNet / ResNet-RS backbone (backbones.ResNet)."""

    model_id: int = 50
    depth_multiplier: float = 1.0
    stem_type: str = "v0"
    se_ratio: float = 0.0
    stochastic_depth_drop_rate: float = 0.0
    scale_stem: bool = True
    resnetd_shortcut: bool = False
    replace_stem_max_pool: bool = False
    bn_trainable: bool = True

    def _validate(self):
        if self.model_id not in RESNET_MODEL_IDS:
            raise ConfigError(
                f"task.model.backbone.resnet.model_id {self.model_id} is not one of "
                f"{', '.join(map(str, RESNET_MODEL_IDS))}.")
        if self.stem_type not in ("v0", "v1"):
            raise ConfigError(
                f"task.model.backbone.resnet.stem_type {self.stem_type!r} must be 'v0' or 'v1'.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(
                f"task.model.backbone.resnet.stochastic_depth_drop_rate "
                f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")


@dataclasses.dataclass
class DilatedResNet(Config):
    """TFM's DeepLab ResNet backbone (backbones.DilatedResNet, `type: dilated_resnet`)."""

    model_id: int = 50
    output_stride: int = 16
    multigrid: Optional[List[int]] = None
    stem_type: str = "v0"
    last_stage_repeats: int = 1
    se_ratio: float = 0.0
    stochastic_depth_drop_rate: float = 0.0
    resnetd_shortcut: bool = False
    replace_stem_max_pool: bool = False

    def _validate(self):
        path = "task.model.backbone.dilated_resnet"
        if self.model_id not in DILATED_RESNET_MODEL_IDS:
            raise ConfigError(
                f"{path}.model_id {self.model_id} is not one of "
                f"{', '.join(map(str, DILATED_RESNET_MODEL_IDS))}.")
        if self.output_stride not in (8, 16, 32):
            raise ConfigError(f"{path}.output_stride ({self.output_stride}) must be 8, 16 "
                              f"or 32.")
        if self.stem_type not in ("v0", "v1"):
            raise ConfigError(f"{path}.stem_type {self.stem_type!r} must be 'v0' or 'v1'.")
        if self.last_stage_repeats < 1:
            raise ConfigError(f"{path}.last_stage_repeats ({self.last_stage_repeats}) must be "
                              f">= 1.")
        if self.multigrid is not None and len(self.multigrid) != 3:
            # TFM: one factor per block of the last (3-block) stage.
            raise ConfigError(f"{path}.multigrid {list(self.multigrid)} must have 3 entries, "
                              f"one per block of the last stage.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(f"{path}.stochastic_depth_drop_rate "
                              f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")


@dataclasses.dataclass
class MobileNet(Config):
    """TFM's MobileNet backbone (backbones.MobileNet): V1, V2, V3, MultiAVG and V4 models."""

    model_id: str = "MobileNetV2"
    filter_size_scale: float = 1.0
    stochastic_depth_drop_rate: float = 0.0
    flat_stochastic_depth_drop_rate: bool = True
    output_stride: Optional[int] = None
    output_intermediate_endpoints: bool = False

    def _validate(self):
        path = "task.model.backbone.mobilenet"
        if self.model_id not in MOBILENET_MODEL_IDS:
            raise ConfigError(
                f"{path}.model_id {self.model_id!r} is not implemented; "
                f"use one of {', '.join(MOBILENET_MODEL_IDS)}.")
        if not self.filter_size_scale > 0:
            raise ConfigError(f"{path}.filter_size_scale ({self.filter_size_scale}) must be "
                              f"> 0.")
        stride = self.output_stride
        if stride is not None:
            if self.model_id == "MobileNetV1" and stride not in (8, 16, 32):
                raise ConfigError(f"{path}.output_stride ({stride}) must be 8, 16 or 32 for "
                                  f"MobileNetV1.")
            if stride < 1 or (stride > 1 and stride % 2):
                raise ConfigError(f"{path}.output_stride ({stride}) must be null, 1 or a "
                                  f"multiple of 2.")
        if not 0.0 <= self.stochastic_depth_drop_rate <= 1.0:
            raise ConfigError(f"{path}.stochastic_depth_drop_rate "
                              f"({self.stochastic_depth_drop_rate}) must be within [0, 1].")


@dataclasses.dataclass
class Backbone(OneOfConfig):
    """`type`: 'resnet', 'dilated_resnet', 'mobilenet' or 'vit' (TFM's other backbones are
    not implemented)."""

    type: Optional[str] = None
    resnet: ResNet = dataclasses.field(default_factory=ResNet)
    dilated_resnet: DilatedResNet = dataclasses.field(default_factory=DilatedResNet)
    mobilenet: MobileNet = dataclasses.field(default_factory=MobileNet)
    vit: "VisionTransformer" = dataclasses.field(default_factory=lambda: VisionTransformer())


# ---------------------------------------------------------------------------
# image_classification.py
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class DataConfig(BaseDataConfig):
    """Image classification input (TFM's image_classification.DataConfig)."""

    input_path: Union[Sequence[str], str] = ""
    weights: Optional[Config] = None
    global_batch_size: int = 0
    is_training: bool = True
    dtype: str = "float32"
    shuffle_buffer_size: int = 10000
    cycle_length: int = 10
    is_multilabel: bool = False
    aug_rand_hflip: bool = True
    aug_crop: Optional[bool] = True
    crop_area_range: Optional[Tuple[float, float]] = (0.08, 1.0)
    aug_type: Optional[Augmentation] = None
    three_augment: bool = False
    color_jitter: float = 0.
    random_erasing: Optional[RandomErasing] = None
    file_type: str = "tfrecord"
    image_field_key: str = "image/encoded"
    label_field_key: str = "image/class/label"
    decode_jpeg_only: bool = True
    mixup_and_cutmix: Optional[MixupAndCutmix] = None
    decoder: Optional[DataDecoder] = dataclasses.field(default_factory=DataDecoder)
    aug_policy: Optional[str] = None
    randaug_magnitude: Optional[int] = 10
    center_crop_fraction: Optional[float] = 0.875
    tf_resize_method: str = "bilinear"
    repeated_augment: Optional[int] = None

    # TFM fields that lite_launcher does not implement (their defaults are accepted).
    # `aug_policy` and `randaug_magnitude` are not here: TFM's classification code never
    # reads them (`aug_type` chooses the policy), so any value is accepted and ignored, as there.
    UNIMPLEMENTED = ("weights", "three_augment", "repeated_augment")

    def _validate(self):
        super()._validate()
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ConfigError(
                f"data dtype {self.dtype!r} must be 'float32', 'float16' or 'bfloat16'.")
        if self.crop_area_range is not None:
            low, high = self.crop_area_range
            if not 0.0 < low <= high <= 1.0:
                raise ConfigError(
                    f"data crop_area_range {list(self.crop_area_range)} must satisfy "
                    f"0 < min <= max <= 1.")
        if self.center_crop_fraction is not None and not 0.0 < self.center_crop_fraction <= 1.0:
            raise ConfigError(
                f"data center_crop_fraction ({self.center_crop_fraction}) must be in (0, 1].")
        if self.aug_type is not None and self.aug_type.type not in (None, "randaug", "autoaug"):
            raise ConfigError(
                f"data aug_type.type {self.aug_type.type!r} must be 'randaug' or 'autoaug'.")
        if self.color_jitter < 0:
            raise ConfigError(f"data color_jitter ({self.color_jitter}) must be >= 0.")
        if self.decoder is not None and self.decoder.type not in (None, "simple_decoder"):
            raise ConfigError(
                f"data decoder.type {self.decoder.type!r} is not implemented; use "
                f"'simple_decoder'.")


@dataclasses.dataclass
class ImageClassificationModel(Config):
    """The classifier: a backbone and TFM's head (pool, optional BN, dropout, dense)."""

    num_classes: int = 0
    input_size: List[int] = dataclasses.field(default_factory=list)
    backbone: Backbone = dataclasses.field(
        default_factory=lambda: Backbone(type="resnet", resnet=ResNet()))
    dropout_rate: float = 0.0
    norm_activation: NormActivation = dataclasses.field(
        default_factory=lambda: NormActivation(use_sync_bn=False))
    add_head_batch_norm: bool = False
    kernel_initializer: str = "random_uniform"
    output_softmax: bool = False


@dataclasses.dataclass
class Losses(Config):
    """Loss options (TFM's image_classification.Losses)."""

    loss_weight: float = 1.0
    one_hot: bool = True
    label_smoothing: float = 0.0
    l2_weight_decay: float = 0.0
    soft_labels: bool = False
    use_binary_cross_entropy: bool = False


@dataclasses.dataclass
class Evaluation(Config):
    """Evaluation metrics options (TFM's image_classification.Evaluation)."""

    top_k: int = 5
    precision_and_recall_thresholds: Optional[List[float]] = None
    report_per_class_precision_and_recall: bool = False


@dataclasses.dataclass
class ImageClassificationTask(TaskConfig):
    """The task config (TFM's image_classification.ImageClassificationTask)."""

    model: ImageClassificationModel = dataclasses.field(default_factory=ImageClassificationModel)
    train_data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(is_training=True))
    validation_data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(is_training=False))
    losses: Losses = dataclasses.field(default_factory=Losses)
    evaluation: Evaluation = dataclasses.field(default_factory=Evaluation)
    train_input_partition_dims: Optional[List[int]] = dataclasses.field(default_factory=list)
    eval_input_partition_dims: Optional[List[int]] = dataclasses.field(default_factory=list)
    init_checkpoint: Optional[str] = None
    init_checkpoint_modules: str = "all"
    model_output_keys: Optional[List[int]] = dataclasses.field(default_factory=list)
    freeze_backbone: bool = False

    def _validate(self):
        super()._validate()
        _reject_unimplemented(self, "task", (
            "train_input_partition_dims", "eval_input_partition_dims", "model_output_keys"))
        for name in ("train_data", "validation_data"):
            _reject_unimplemented(getattr(self, name), f"task.{name}", DataConfig.UNIMPLEMENTED)
        if self.init_checkpoint_modules not in ("all", "backbone"):
            raise ConfigError(
                f"task.init_checkpoint_modules {self.init_checkpoint_modules!r} must be 'all' "
                f"or 'backbone'.")
        if self.model.backbone.type not in Backbone().choices():
            raise ConfigError(
                f"task.model.backbone.type {self.model.backbone.type!r} must be one of "
                f"{', '.join(Backbone().choices())}.")
        losses = self.losses
        if not 0.0 <= losses.label_smoothing < 1.0:
            raise ConfigError(
                f"task.losses.label_smoothing ({losses.label_smoothing}) must be in [0, 1).")
        if losses.l2_weight_decay < 0:
            raise ConfigError(
                f"task.losses.l2_weight_decay ({losses.l2_weight_decay}) must be >= 0.")
        if self.evaluation.top_k < 1:
            raise ConfigError(f"task.evaluation.top_k ({self.evaluation.top_k}) must be >= 1.")


def check_buildable(task_config: ImageClassificationTask) -> None:
    """Checks what a model needs (TFM's defaults leave num_classes and input_size empty)."""
    model = task_config.model
    if model.num_classes < 1:
        raise ConfigError(
            f"task.model.num_classes ({model.num_classes}) must be set to the number of "
            f"classes (e.g. --params_override task.model.num_classes=10).")
    if len(model.input_size) != 3 or model.input_size[2] != 3 or min(model.input_size) < 1:
        raise ConfigError(
            f"task.model.input_size {model.input_size} must be [height, width, 3] "
            f"(e.g. task.model.input_size=[224,224,3]).")


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------


@register_config_factory("image_classification")
def image_classification() -> ExperimentConfig:
    """Image classification, general: set num_classes, input_size, data and trainer."""
    return ExperimentConfig(task=ImageClassificationTask(), trainer=TrainerConfig())


def _imagenet_data(batch_size: int) -> Tuple[DataConfig, DataConfig]:
    return (DataConfig(input_path=os.path.join(IMAGENET_INPUT_PATH_BASE, "train*"),
                       is_training=True, global_batch_size=batch_size),
            DataConfig(input_path=os.path.join(IMAGENET_INPUT_PATH_BASE, "valid*"),
                       is_training=False, global_batch_size=batch_size))


def _imagenet_trainer(steps_per_epoch: int, epochs: int, eval_batch_size: int,
                      optimizer_config: dict) -> TrainerConfig:
    trainer = TrainerConfig(
        steps_per_loop=steps_per_epoch,
        summary_interval=steps_per_epoch,
        checkpoint_interval=steps_per_epoch,
        train_steps=epochs * steps_per_epoch,
        validation_steps=IMAGENET_VAL_EXAMPLES // eval_batch_size,
        validation_interval=steps_per_epoch)
    trainer.optimizer_config.override(optimizer_config)
    return trainer


@register_config_factory("resnet_imagenet")
def resnet_imagenet() -> ExperimentConfig:
    """ResNet-50 on ImageNet: batch 4096, SGD + momentum, stepwise lr, 90 epochs (TFM's)."""
    batch = 4096
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch
    train_data, validation_data = _imagenet_data(batch)
    return ExperimentConfig(
        runtime=RuntimeConfig(enable_xla=True),
        task=ImageClassificationTask(
            model=ImageClassificationModel(
                num_classes=1001,
                input_size=[224, 224, 3],
                backbone=Backbone(type="resnet", resnet=ResNet(model_id=50)),
                norm_activation=NormActivation(
                    norm_momentum=0.9, norm_epsilon=1e-5, use_sync_bn=False)),
            losses=Losses(l2_weight_decay=1e-4),
            train_data=train_data,
            validation_data=validation_data),
        trainer=_imagenet_trainer(steps_per_epoch, 90, batch, {
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "learning_rate": {"type": "stepwise", "stepwise": {
                "boundaries": [30 * steps_per_epoch, 60 * steps_per_epoch, 80 * steps_per_epoch],
                "values": [0.1 * batch / 256, 0.01 * batch / 256, 0.001 * batch / 256,
                           0.0001 * batch / 256]}},
            "warmup": {"type": "linear", "linear": {
                "warmup_steps": 5 * steps_per_epoch, "warmup_learning_rate": 0}},
        }))


@register_config_factory("mobilenet_imagenet")
def mobilenet_imagenet() -> ExperimentConfig:
    """MobileNetV2 on ImageNet: batch 4096, RMSProp, exponential lr, 500 epochs (TFM's)."""
    batch = 4096
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch
    train_data, validation_data = _imagenet_data(batch)
    return ExperimentConfig(
        task=ImageClassificationTask(
            model=ImageClassificationModel(
                num_classes=1001,
                dropout_rate=0.2,
                input_size=[224, 224, 3],
                backbone=Backbone(type="mobilenet", mobilenet=MobileNet(
                    model_id="MobileNetV2", filter_size_scale=1.0)),
                norm_activation=NormActivation(
                    norm_momentum=0.997, norm_epsilon=1e-3, use_sync_bn=False)),
            losses=Losses(l2_weight_decay=1e-5, label_smoothing=0.1),
            train_data=train_data,
            validation_data=validation_data),
        trainer=_imagenet_trainer(steps_per_epoch, 500, batch, {
            "optimizer": {"type": "rmsprop", "rmsprop": {
                "rho": 0.9, "momentum": 0.9, "epsilon": 0.002}},
            "learning_rate": {"type": "exponential", "exponential": {
                "initial_learning_rate": 0.008 * (batch // 128),
                "decay_steps": int(2.5 * steps_per_epoch),
                "decay_rate": 0.98,
                "staircase": True}},
            "warmup": {"type": "linear", "linear": {
                "warmup_steps": 5 * steps_per_epoch, "warmup_learning_rate": 0}},
        }))


@register_config_factory("resnet_rs_imagenet")
def resnet_rs_imagenet() -> ExperimentConfig:
    """ResNet-RS-50 on ImageNet at 160x160: batch 4096, SGD + momentum, cosine lr, EMA over all
    weights, RandAugment, 350 epochs (TFM's defaults; XLA off, as TFM leaves it)."""
    batch = 4096
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch
    train_data, validation_data = _imagenet_data(batch)
    train_data.aug_type = Augmentation(type="randaug", randaug=RandAugment(magnitude=10.0))
    return ExperimentConfig(
        task=ImageClassificationTask(
            model=ImageClassificationModel(
                num_classes=1001,
                input_size=[160, 160, 3],
                backbone=Backbone(type="resnet", resnet=ResNet(
                    model_id=50, stem_type="v1", resnetd_shortcut=True,
                    replace_stem_max_pool=True, se_ratio=0.25,
                    stochastic_depth_drop_rate=0.0)),
                dropout_rate=0.25,
                norm_activation=NormActivation(
                    norm_momentum=0.0, norm_epsilon=1e-5, use_sync_bn=False,
                    activation="swish")),
            losses=Losses(l2_weight_decay=4e-5, label_smoothing=0.1),
            train_data=train_data,
            validation_data=validation_data),
        trainer=_imagenet_trainer(steps_per_epoch, 350, batch, {
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
            "ema": {"average_decay": 0.9999, "trainable_weights_only": False},
            "learning_rate": {"type": "cosine", "cosine": {
                "initial_learning_rate": 1.6, "decay_steps": 350 * steps_per_epoch}},
            "warmup": {"type": "linear", "linear": {
                "warmup_steps": 5 * steps_per_epoch, "warmup_learning_rate": 0}},
        }))


# ---------------------------------------------------------------------------
# Vision Transformer (TFM's backbones.VisionTransformer, vit_specs.VIT_SPECS and the
# deit_imagenet_pretrain / vit_imagenet_pretrain / vit_imagenet_finetune experiments)
# ---------------------------------------------------------------------------

# model_name -> the sizes TFM's builder writes over the config's own (TFM's vit_specs).
VIT_SPECS = {
    "vit-ti16": dict(hidden_size=192, patch_size=16, mlp_dim=768, num_heads=3, num_layers=12),
    "vit-s16": dict(hidden_size=384, patch_size=16, mlp_dim=1536, num_heads=6, num_layers=12),
    "vit-b16": dict(hidden_size=768, patch_size=16, mlp_dim=3072, num_heads=12, num_layers=12),
    "vit-b32": dict(hidden_size=768, patch_size=32, mlp_dim=3072, num_heads=12, num_layers=12),
    "vit-l16": dict(hidden_size=1024, patch_size=16, mlp_dim=4096, num_heads=16, num_layers=24),
    "vit-l32": dict(hidden_size=1024, patch_size=32, mlp_dim=4096, num_heads=16, num_layers=24),
    "vit-h14": dict(hidden_size=1280, patch_size=14, mlp_dim=5120, num_heads=16, num_layers=32),
    "vit-g14": dict(hidden_size=1408, patch_size=14, mlp_dim=5632, num_heads=16, num_layers=40),
    "vit-G14": dict(hidden_size=1664, patch_size=14, mlp_dim=8192, num_heads=16, num_layers=48),
    "vit-e14": dict(hidden_size=1792, patch_size=14, mlp_dim=15360, num_heads=16,
                    num_layers=56),
}
VIT_POOLERS = ("token", "gap", "none")


@dataclasses.dataclass
class Transformer(Config):
    """The encoder blocks of a ViT (TFM's backbones.Transformer)."""

    mlp_dim: int = 1
    num_heads: int = 1
    num_layers: int = 1
    attention_dropout_rate: float = 0.0
    dropout_rate: float = 0.0


@dataclasses.dataclass
class VisionTransformer(Config):
    """TFM's ViT backbone (backbones.VisionTransformer), built by `vision.vit.build_vit`.

    As in TFM, a `model_name` of `VIT_SPECS` sets hidden_size, patch_size and transformer's
    mlp_dim / num_heads / num_layers, over what the config says (TFM's ViT-H YAMLs say
    patch_size 16 and get 14). `model_name: null` (not in TFM, whose builder fails on it) keeps
    the config's own sizes, for small custom models.

    pooler: 'token' (a class token, its output is `pre_logits`), 'gap' (the mean of the tokens)
      or 'none' (all tokens, as `encoded_tokens` when output_encoded_tokens).
    representation_size: > 0: a dense layer with tanh before `pre_logits`.
    init_stochastic_depth_rate: block i of n drops its residual branches at rate * i / n.
    original_init: True: lecun_normal patch / pre-logits kernels and glorot_uniform encoder
      kernels; False: he_uniform and truncated normal (stddev 0.02).
    pos_embed_shape: (rows, cols) of the learned position-embedding grid; None: the input's
      patch grid. Another input size then interpolates it bilinearly (TFM's), which is how a
      model fine-tunes at 384 from a checkpoint trained at 224: set it to the pretraining grid.
      With the token pooler, the class token's embedding is kept as it is (TFM's layer cannot
      add an interpolated grid to the class token's sequence, lite keeps TFM's 1 + rows * cols
      embedding and interpolates the grid part).
    output_2d_feature_maps: also output the patch tokens as a (rows, cols) feature map under
      the level round(log2(patch_size)).
    layer_scale_init_value: > 0: learned per-channel scales (CaiT's LayerScale) on both
      residual branches of each block.
    output_attention_scores: also output the last block's attention probabilities.
    transformer_partition_dims: TFM's TPU spatial partitioning; not implemented (null only).
    """

    model_name: Optional[str] = "vit-b16"
    pooler: str = "token"
    representation_size: int = 0
    hidden_size: int = 1
    patch_size: int = 16
    transformer: Transformer = dataclasses.field(default_factory=Transformer)
    init_stochastic_depth_rate: float = 0.0
    original_init: bool = True
    pos_embed_shape: Optional[Tuple[int, int]] = None
    output_encoded_tokens: bool = True
    output_2d_feature_maps: bool = False
    layer_scale_init_value: float = 0.0
    transformer_partition_dims: Optional[Tuple[int, int, int, int]] = None
    output_attention_scores: bool = False

    def _validate(self):
        path = "task.model.backbone.vit"
        if self.model_name is not None and self.model_name not in VIT_SPECS:
            raise ConfigError(
                f"{path}.model_name {self.model_name!r} is not one of {', '.join(VIT_SPECS)} "
                f"(or null to use hidden_size, patch_size and transformer as given).")
        if self.pooler not in VIT_POOLERS:
            raise ConfigError(f"{path}.pooler {self.pooler!r} must be one of "
                              f"{', '.join(VIT_POOLERS)}.")
        if not 0.0 <= self.init_stochastic_depth_rate <= 1.0:
            raise ConfigError(f"{path}.init_stochastic_depth_rate "
                              f"({self.init_stochastic_depth_rate}) must be within [0, 1].")
        if self.pos_embed_shape is not None and (
                len(self.pos_embed_shape) != 2 or min(self.pos_embed_shape) < 1):
            raise ConfigError(f"{path}.pos_embed_shape {list(self.pos_embed_shape)} must be "
                              f"[rows, cols] of the pretraining patch grid (e.g. [14, 14]).")
        for name in ("representation_size", "layer_scale_init_value"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{path}.{name} ({getattr(self, name)}) must be >= 0.")
        _reject_unimplemented(self, path, ("transformer_partition_dims",))
        sizes = self.sizes()
        for name, value in sizes.items():
            if value < 1:
                raise ConfigError(f"{path}: {name} ({value}) must be >= 1.")
        if sizes["hidden_size"] % sizes["num_heads"]:
            raise ConfigError(f"{path}: hidden_size {sizes['hidden_size']} must be a multiple of "
                              f"transformer.num_heads {sizes['num_heads']}.")
        for name in ("attention_dropout_rate", "dropout_rate"):
            if not 0.0 <= getattr(self.transformer, name) < 1.0:
                raise ConfigError(f"{path}.transformer.{name} "
                                  f"({getattr(self.transformer, name)}) must be in [0, 1).")

    def sizes(self) -> dict:
        """hidden_size, patch_size, mlp_dim, num_heads, num_layers: `model_name`'s, as TFM's
        builder writes them over the config, or the config's own for `model_name: null`."""
        if self.model_name is not None and self.model_name in VIT_SPECS:
            return dict(VIT_SPECS[self.model_name])
        t = self.transformer
        return dict(hidden_size=self.hidden_size, patch_size=self.patch_size,
                    mlp_dim=t.mlp_dim, num_heads=t.num_heads, num_layers=t.num_layers)


def _vit_trainer(steps_per_epoch: int, train_steps: int, eval_batch_size: int,
                 optimizer_config: dict) -> TrainerConfig:
    trainer = _imagenet_trainer(steps_per_epoch, 1, eval_batch_size, optimizer_config)
    trainer.train_steps = train_steps
    return trainer


def _vit_experiment(input_size, vit: VisionTransformer, losses: Losses, trainer: TrainerConfig,
                    train_data: DataConfig, validation_data: DataConfig,
                    **model_fields) -> ExperimentConfig:
    """A ViT classifier with 1001 classes (TFM's ImageNet head) and these parts."""
    return ExperimentConfig(
        task=ImageClassificationTask(
            model=ImageClassificationModel(
                num_classes=1001, input_size=list(input_size),
                backbone=Backbone(type="vit", vit=vit), **model_fields),
            losses=losses, train_data=train_data, validation_data=validation_data),
        trainer=trainer)


def _vit_pretrain_trainer(batch: int, weight_decay_rate: float, initial_learning_rate: float,
                          warmup_steps: int) -> TrainerConfig:
    """TFM's ViT / DeiT pretraining schedule: 300 epochs of AdamW (decay on kernels and
    weights, no gradient clipping), cosine decay after a linear warmup from 0."""
    steps_per_epoch = IMAGENET_TRAIN_EXAMPLES // batch
    return _vit_trainer(steps_per_epoch, 300 * steps_per_epoch, batch, {
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": weight_decay_rate,
            "include_in_weight_decay": r".*(kernel|weight):0$",
            "gradient_clip_norm": 0.0}},
        "learning_rate": {"type": "cosine", "cosine": {
            "initial_learning_rate": initial_learning_rate,
            "decay_steps": 300 * steps_per_epoch}},
        "warmup": {"type": "linear", "linear": {
            "warmup_steps": warmup_steps, "warmup_learning_rate": 0}},
    })


@register_config_factory("deit_imagenet_pretrain")
def deit_imagenet_pretrain() -> ExperimentConfig:
    """DeiT: ViT-B/16 at 224 on ImageNet, batch 4096, 300 epochs (TFM's).

    RandAugment (magnitude 9, no Cutout), MixUp / CutMix with label smoothing 0.1 and soft
    labels, stochastic depth 0.1; AdamW (decay 0.05 on every variable, as TFM's include list
    without an exclude list leaves it, no gradient clipping), cosine decay after 5 warmup
    epochs.
    """
    batch = 4096
    label_smoothing = 0.1
    train_data, validation_data = _imagenet_data(batch)
    # Floats as written to params.yaml (RandAugment's float fields have int defaults).
    train_data.aug_type = Augmentation(type="randaug", randaug=RandAugment(
        magnitude=9.0, cutout_const=40.0, translate_const=10.0, exclude_ops=["Cutout"]))
    train_data.mixup_and_cutmix = MixupAndCutmix(label_smoothing=label_smoothing)
    return _vit_experiment(
        [224, 224, 3],
        VisionTransformer(model_name="vit-b16", representation_size=768,
                          init_stochastic_depth_rate=0.1, original_init=False,
                          transformer=Transformer(dropout_rate=0.0, attention_dropout_rate=0.0)),
        Losses(l2_weight_decay=0.0, label_smoothing=label_smoothing, one_hot=False,
               soft_labels=True),
        _vit_pretrain_trainer(batch, 0.05, 0.0005 * batch / 512,
                              5 * (IMAGENET_TRAIN_EXAMPLES // batch)),
        train_data, validation_data, kernel_initializer="zeros")


@register_config_factory("vit_imagenet_pretrain")
def vit_imagenet_pretrain() -> ExperimentConfig:
    """ViT-B/16 at 224 on ImageNet, batch 4096, 300 epochs: AdamW (decay 0.3), cosine decay
    after 10,000 warmup steps, dropout 0.1, representation size 768 (TFM's)."""
    batch = 4096
    return _vit_experiment(
        [224, 224, 3], VisionTransformer(model_name="vit-b16", representation_size=768),
        Losses(l2_weight_decay=0.0), _vit_pretrain_trainer(batch, 0.3, 0.003 * batch / 4096, 10000),
        *_imagenet_data(batch), kernel_initializer="zeros")


@register_config_factory("vit_imagenet_finetune")
def vit_imagenet_finetune() -> ExperimentConfig:
    """ViT-B/16 fine-tuned at 384 on ImageNet, batch 512, 20,000 steps: SGD + momentum 0.9,
    global-norm clipping 1.0, cosine decay (TFM's). Set task.init_checkpoint to the
    pretraining run and backbone.vit.pos_embed_shape to its patch grid (e.g. [14, 14])."""
    batch = 512
    return _vit_experiment(
        [384, 384, 3], VisionTransformer(model_name="vit-b16"), Losses(l2_weight_decay=0.0),
        _vit_trainer(IMAGENET_TRAIN_EXAMPLES // batch, 20000, batch, {
            "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9, "global_clipnorm": 1.0}},
            "learning_rate": {"type": "cosine", "cosine": {
                "initial_learning_rate": 0.003, "decay_steps": 20000}},
        }),
        *_imagenet_data(batch))
