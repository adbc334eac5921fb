"""Semantic segmentation configs and experiments with TFM's field names and defaults.

Mirrors official/vision/configs/semantic_segmentation.py of tf-models-official 2.20,
so that TFM's segmentation YAMLs load unchanged and the eight experiments
(`semantic_segmentation`, `seg_deeplabv3_pascal`, `seg_deeplabv3plus_pascal`,
`seg_resnetfpn_pascal`, `mnv2_deeplabv3_pascal`, `seg_deeplabv3plus_cityscapes`,
`mnv2_deeplabv3_cityscapes`, `mnv2_deeplabv3plus_cityscapes`) hold TFM's values. The backbone,
norm-activation, data-decoder and decoder configs are the shared ones (`configs.backbones`,
`configs.common`, `configs.decoders`). As there, a TFM field lite does not implement keeps its
default; any other value is refused by `validate()` with a `ConfigError` naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import List, Optional, Sequence, Union

from lite_launcher.core.base_config import Config, ConfigError
from lite_launcher.core.config_definitions import DataConfig as BaseDataConfig
from lite_launcher.core.config_definitions import ExperimentConfig, TaskConfig, TrainerConfig
from lite_launcher.core.registry import register_config_factory
from lite_launcher.vision.configs.backbones import Backbone, DilatedResNet, MobileNet, ResNet
from lite_launcher.vision.configs.common import (  # noqa: F401  (MEAN_RGB, STDDEV_RGB: old path)
    INIT_CHECKPOINT_MODULES, MEAN_RGB, STDDEV_RGB, DataDecoder, NormActivation,
    check_data_and_init_modules, check_data_config, init_modules, reject_unimplemented)
from lite_launcher.vision.configs.decoders import (  # noqa: F401  (re-exported as before)
    ASPP, DECODER_TYPES, FPN, NASFPN, Decoder, Identity)

FEATURE_FUSIONS = (None, "deeplabv3plus", "deeplabv3plus_sum_to_merge", "pyramid_fusion",
                   "panoptic_fpn_fusion")


@dataclasses.dataclass
class DenseFeatureConfig(Config):
    """An encoded dense feature of the examples (TFM's DenseFeatureConfig): the image, or
    another 1-, 3- or 4-channel 8-bit PNG / JPEG; normalised by (x - mean) / stddev."""

    feature_name: str = "image/encoded"
    num_channels: int = 3
    mean: List[float] = dataclasses.field(default_factory=lambda: list(MEAN_RGB))
    stddev: List[float] = dataclasses.field(default_factory=lambda: list(STDDEV_RGB))


@dataclasses.dataclass
class DataConfig(BaseDataConfig):
    """Segmentation input (TFM's semantic_segmentation.DataConfig).

    output_size: [height, width] the image is resized to (then cropped to crop_size when
      set, in training). resize_eval_groundtruth false: evaluation keeps the original masks,
      padded to groundtruth_padded_size, and the metrics rescale the predictions to them.
    """

    image_feature: DenseFeatureConfig = dataclasses.field(default_factory=DenseFeatureConfig)
    output_size: List[int] = dataclasses.field(default_factory=list)
    crop_size: List[int] = dataclasses.field(default_factory=list)
    input_path: Optional[Union[Sequence[str], str]] = None
    weights: Optional[Config] = None
    global_batch_size: int = 0
    is_training: bool = True
    dtype: str = "float32"
    shuffle_buffer_size: int = 1000
    cycle_length: int = 10
    resize_eval_groundtruth: bool = True
    groundtruth_padded_size: List[int] = dataclasses.field(default_factory=list)
    aug_scale_min: float = 1.0
    aug_scale_max: float = 1.0
    aug_rand_hflip: bool = True
    preserve_aspect_ratio: bool = True
    aug_policy: Optional[str] = None
    drop_remainder: bool = True
    file_type: str = "tfrecord"
    decoder: Optional[DataDecoder] = dataclasses.field(default_factory=DataDecoder)
    additional_dense_features: List[DenseFeatureConfig] = dataclasses.field(
        default_factory=list)
    centered_crop: bool = False

    # `aug_policy` is not here: TFM's segmentation parser never reads it.
    UNIMPLEMENTED = ("weights",)

    def check(self, path: str) -> None:
        """The checks of this data config as `path` (task.train_data / validation_data)."""
        check_data_config(self, path)
        for name in ("output_size", "crop_size", "groundtruth_padded_size"):
            size = getattr(self, name)
            if size and (len(size) != 2 or min(size) < 1):
                raise ConfigError(f"{path}.{name} {list(size)} must be [height, width] (or "
                                  f"[] for none).")
        if not 0 < self.aug_scale_min <= self.aug_scale_max:
            raise ConfigError(f"{path}: aug_scale_min ({self.aug_scale_min}) and "
                              f"aug_scale_max ({self.aug_scale_max}) must satisfy "
                              f"0 < min <= max.")
        if (self.is_training is False and not self.resize_eval_groundtruth
                and not self.groundtruth_padded_size):
            raise ConfigError(f"{path}.groundtruth_padded_size must be set (e.g. [512, 512]) "
                              f"when resize_eval_groundtruth is false, to batch the "
                              f"original-size masks.")
        for i, feature in enumerate([self.image_feature] + list(self.additional_dense_features)):
            name = (f"{path}.image_feature" if i == 0
                    else f"{path}.additional_dense_features[{i - 1}]")
            if feature.num_channels not in (1, 3, 4):
                raise ConfigError(f"{name}.num_channels ({feature.num_channels}) must be 1, 3 "
                                  f"or 4.")
            if len(feature.mean) != feature.num_channels or (
                    len(feature.stddev) != feature.num_channels):
                raise ConfigError(f"{name}: mean and stddev need one value per channel "
                                  f"({feature.num_channels}).")
        if self.decoder is not None and self.decoder.type not in (None, "simple_decoder"):
            raise ConfigError(f"{path}.decoder.type {self.decoder.type!r} is not implemented; "
                              f"use 'simple_decoder'.")


@dataclasses.dataclass
class SegmentationHead(Config):
    """The segmentation head (TFM's SegmentationHead config).

    feature_fusion: None, 'deeplabv3plus' (concatenate the decoder output with the backbone's
      `low_level` endpoint reduced to low_level_num_filters), 'deeplabv3plus_sum_to_merge'
      (add them), 'pyramid_fusion' (sum every decoder level resized to `level`) or
      'panoptic_fpn_fusion'.
    """

    level: int = 3
    num_convs: int = 2
    num_filters: int = 256
    use_depthwise_convolution: bool = False
    prediction_kernel_size: int = 1
    upsample_factor: int = 1
    logit_activation: Optional[str] = None
    feature_fusion: Optional[str] = None
    low_level: Union[int, str] = 2
    low_level_num_filters: int = 48
    decoder_min_level: Optional[Union[int, str]] = None
    decoder_max_level: Optional[Union[int, str]] = None


@dataclasses.dataclass
class MaskScoringHead(Config):
    """TFM's mask-scoring head config (not implemented: the model config's
    `mask_scoring_head` must stay null)."""

    num_convs: int = 4
    num_filters: int = 128
    fc_input_size: List[int] = dataclasses.field(default_factory=list)
    num_fcs: int = 2
    fc_dims: int = 1024
    use_depthwise_convolution: bool = False


@dataclasses.dataclass
class SemanticSegmentationModel(Config):
    """backbone -> decoder -> head (TFM's SemanticSegmentationModel)."""

    num_classes: int = 0
    input_size: List[Optional[int]] = dataclasses.field(default_factory=list)
    min_level: int = 3
    max_level: int = 6
    head: SegmentationHead = dataclasses.field(default_factory=SegmentationHead)
    backbone: Backbone = dataclasses.field(
        default_factory=lambda: Backbone(type="resnet", resnet=ResNet()))
    decoder: Decoder = dataclasses.field(default_factory=lambda: Decoder(type="identity"))
    mask_scoring_head: Optional[MaskScoringHead] = None
    norm_activation: NormActivation = dataclasses.field(default_factory=NormActivation)


@dataclasses.dataclass
class Losses(Config):
    """The segmentation loss (TFM's semantic_segmentation.Losses)."""

    loss_weight: float = 1.0
    label_smoothing: float = 0.0
    ignore_label: int = 255
    gt_is_matting_map: bool = False
    class_weights: List[float] = dataclasses.field(default_factory=list)
    l2_weight_decay: float = 0.0
    use_groundtruth_dimension: bool = True
    use_binary_cross_entropy: bool = False
    top_k_percent_pixels: float = 1.0
    mask_scoring_weight: float = 1.0


@dataclasses.dataclass
class Evaluation(Config):
    """Which IoUs to report (TFM's semantic_segmentation.Evaluation)."""

    report_per_class_iou: bool = True
    report_train_mean_iou: bool = True


@dataclasses.dataclass
class ExportConfig(Config):
    """Export options (TFM's): rescale_output resizes `predicted_mask` to the input image."""

    rescale_output: bool = False


@dataclasses.dataclass
class SemanticSegmentationTask(TaskConfig):
    """The task config (TFM's SemanticSegmentationTask).

    init_checkpoint_modules: 'all', 'backbone', 'decoder', or a list of 'backbone' / 'decoder'.
    freeze_backbone: train the decoder and head only (newer TFM's field; not in TFM 2.20).
    """

    model: SemanticSegmentationModel = dataclasses.field(
        default_factory=SemanticSegmentationModel)
    train_data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(is_training=True))
    validation_data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(is_training=False))
    losses: Losses = dataclasses.field(default_factory=Losses)
    evaluation: Evaluation = dataclasses.field(default_factory=Evaluation)
    train_input_partition_dims: List[int] = dataclasses.field(default_factory=list)
    eval_input_partition_dims: List[int] = dataclasses.field(default_factory=list)
    init_checkpoint: Optional[str] = None
    init_checkpoint_modules: Union[str, List[str]] = "all"
    export_config: ExportConfig = dataclasses.field(default_factory=ExportConfig)
    # Newer TFM's field (TFM 2.20 has none: its tutorial's `task.freeze_backbone = True` adds a
    # key nothing reads): the backbone's weights and BatchNorm statistics stay as initialised.
    freeze_backbone: bool = False
    # TFM writes the eval images with their predicted masks as image summaries; lite does not
    # (the field is accepted either way, as for every lite task).
    allow_image_summary: bool = True

    def init_modules(self) -> List[str]:
        """`init_checkpoint_modules` as a list ('all' alone means the whole model)."""
        return init_modules(self)

    def _validate(self):
        super()._validate()
        reject_unimplemented(self, "task", (
            "train_input_partition_dims", "eval_input_partition_dims"))
        check_data_and_init_modules(self)
        model = self.model
        model.backbone.check_built()
        if model.decoder.type not in DECODER_TYPES:
            raise ConfigError(f"task.model.decoder.type {model.decoder.type!r} is not "
                              f"implemented; use one of {', '.join(DECODER_TYPES)}.")
        if model.mask_scoring_head is not None:
            raise ConfigError("task.model.mask_scoring_head is not implemented by "
                              "lite_launcher; remove it or set it to null.")
        head = model.head
        if head.feature_fusion not in FEATURE_FUSIONS:
            raise ConfigError(f"task.model.head.feature_fusion {head.feature_fusion!r} must "
                              f"be null or one of {', '.join(FEATURE_FUSIONS[1:])}.")
        if head.logit_activation not in (None, "sigmoid", "softmax"):
            raise ConfigError(f"task.model.head.logit_activation {head.logit_activation!r} "
                              f"must be null, 'sigmoid' or 'softmax'.")
        if head.feature_fusion == "panoptic_fpn_fusion" and None in (
                head.decoder_min_level, head.decoder_max_level):
            raise ConfigError("task.model.head.feature_fusion 'panoptic_fpn_fusion' needs "
                              "head.decoder_min_level and head.decoder_max_level.")
        for name in ("num_convs", "upsample_factor", "prediction_kernel_size"):
            if getattr(head, name) < (0 if name == "num_convs" else 1):
                raise ConfigError(f"task.model.head.{name} ({getattr(head, name)}) is out of "
                                  f"range.")
        losses = self.losses
        if not 0.0 <= losses.label_smoothing < 1.0:
            raise ConfigError(f"task.losses.label_smoothing ({losses.label_smoothing}) must "
                              f"be in [0, 1).")
        if not 0.0 < losses.top_k_percent_pixels <= 1.0:
            raise ConfigError(f"task.losses.top_k_percent_pixels "
                              f"({losses.top_k_percent_pixels}) must be in (0, 1].")
        if losses.l2_weight_decay < 0:
            raise ConfigError(f"task.losses.l2_weight_decay ({losses.l2_weight_decay}) must "
                              f"be >= 0.")
        if losses.class_weights and model.num_classes and (
                len(losses.class_weights) != model.num_classes):
            raise ConfigError(f"task.losses.class_weights has {len(losses.class_weights)} "
                              f"values; it needs one per class ({model.num_classes}).")


def check_buildable(task_config: SemanticSegmentationTask) -> None:
    """Checks what a model needs (TFM's general experiment leaves num_classes empty)."""
    model = task_config.model
    if model.num_classes < 1:
        raise ConfigError(
            f"task.model.num_classes ({model.num_classes}) must be set to the number of "
            f"classes (e.g. --params_override task.model.num_classes=21).")
    size = list(model.input_size)
    if len(size) != 3 or size[2] not in (1, 3, 4) or any(s is not None and s < 1
                                                          for s in size[:2]):
        raise ConfigError(
            f"task.model.input_size {size} must be [height, width, channels], height and "
            f"width null for any size (e.g. task.model.input_size=[512,512,3]).")


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------

PASCAL_TRAIN_EXAMPLES = 10582
PASCAL_VAL_EXAMPLES = 1449
PASCAL_INPUT_PATH_BASE = "gs://**/pascal_voc_seg"
CITYSCAPES_TRAIN_EXAMPLES = 2975
CITYSCAPES_VAL_EXAMPLES = 500
CITYSCAPES_INPUT_PATH_BASE = "cityscapes"
# TFM's ImageNet-pretrained checkpoints the experiments start from.
DEEPLAB_RESNET101_CHECKPOINT = (
    "gs://cloud-tpu-checkpoints/vision-2.0/deeplab/deeplab_resnet101_imagenet/ckpt-62400")
MOBILENETV2_COCO_CHECKPOINT = (
    "gs://tf_model_garden/cloud/vision-2.0/deeplab/deeplabv3_mobilenetv2_coco/best_ckpt-63")


@register_config_factory("semantic_segmentation")
def semantic_segmentation() -> ExperimentConfig:
    """Semantic segmentation, general: set num_classes, input_size, data and trainer."""
    return ExperimentConfig(task=SemanticSegmentationTask(), trainer=TrainerConfig())


def _polynomial_trainer(steps_per_epoch: int, train_steps: int, validation_steps: int,
                        initial_learning_rate: float, **fields) -> TrainerConfig:
    """TFM's segmentation schedule: SGD + momentum 0.9, polynomial decay (power 0.9) to 0
    over train_steps after 5 epochs of linear warmup from 0; loops, summaries, checkpoints
    and evaluations once per epoch."""
    trainer = TrainerConfig(
        steps_per_loop=steps_per_epoch, summary_interval=steps_per_epoch,
        checkpoint_interval=steps_per_epoch, train_steps=train_steps,
        validation_steps=validation_steps, validation_interval=steps_per_epoch, **fields)
    trainer.optimizer_config.override({
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": initial_learning_rate, "decay_steps": train_steps,
            "end_learning_rate": 0.0, "power": 0.9}},
        "warmup": {"type": "linear", "linear": {
            "warmup_steps": 5 * steps_per_epoch, "warmup_learning_rate": 0}},
    })
    return trainer


_BEST_MEAN_IOU = dict(best_checkpoint_eval_metric="mean_iou",
                      best_checkpoint_export_subdir="best_ckpt",
                      best_checkpoint_metric_comp="higher")


def _dilated_resnet101(output_stride: int) -> Backbone:
    return Backbone(type="dilated_resnet", dilated_resnet=DilatedResNet(
        model_id=101, output_stride=output_stride, multigrid=[1, 2, 4], stem_type="v1"))


def _mobilenetv2(output_stride: int) -> Backbone:
    return Backbone(type="mobilenet", mobilenet=MobileNet(
        model_id="MobileNetV2", output_stride=output_stride))


def _pascal_data(train_batch: int, eval_batch: int, output_size=(512, 512),
                 aug_scale=(0.5, 2.0)):
    """PASCAL VOC 2012 (train_aug / val); evaluation on the original masks padded to 512."""
    size = dict(output_size=list(output_size)) if output_size else {}
    return dict(
        train_data=DataConfig(
            input_path=os.path.join(PASCAL_INPUT_PATH_BASE, "train_aug*"), is_training=True,
            global_batch_size=train_batch, aug_scale_min=aug_scale[0],
            aug_scale_max=aug_scale[1], **size),
        validation_data=DataConfig(
            input_path=os.path.join(PASCAL_INPUT_PATH_BASE, "val*"), is_training=False,
            global_batch_size=eval_batch, resize_eval_groundtruth=False,
            groundtruth_padded_size=[512, 512], drop_remainder=False, **size))


def _cityscapes_data(batch: int):
    """Cityscapes fine (train / val) at 1024x2048; training crops 512x1024."""
    return dict(
        train_data=DataConfig(
            input_path=os.path.join(CITYSCAPES_INPUT_PATH_BASE, "train_fine**"),
            crop_size=[512, 1024], output_size=[1024, 2048], is_training=True,
            global_batch_size=batch, aug_scale_min=0.5, aug_scale_max=2.0),
        validation_data=DataConfig(
            input_path=os.path.join(CITYSCAPES_INPUT_PATH_BASE, "val_fine*"),
            output_size=[1024, 2048], is_training=False, global_batch_size=batch,
            resize_eval_groundtruth=True, drop_remainder=False))


def _resnet_deeplab(num_classes: int, dilation_rates, head: SegmentationHead,
                    norm_momentum: float, pool_kernel_size=None) -> SemanticSegmentationModel:
    """Dilated ResNet-101 (output stride 16) -> ASPP -> head, swish (TFM's DeepLab models)."""
    level = int(math.log2(16))
    return SemanticSegmentationModel(
        num_classes=num_classes, input_size=[None, None, 3],
        backbone=_dilated_resnet101(16),
        decoder=Decoder(type="aspp", aspp=ASPP(
            level=level, dilation_rates=list(dilation_rates),
            pool_kernel_size=pool_kernel_size)),
        head=head,
        norm_activation=NormActivation(activation="swish", norm_momentum=norm_momentum,
                                       norm_epsilon=1e-3, use_sync_bn=True))


def _mobilenet_deeplab(num_classes: int, pool_kernel_size) -> SemanticSegmentationModel:
    """MobileNetV2 (output stride 16) -> ASPP without atrous branches -> 1x1 head, relu."""
    level = int(math.log2(16))
    return SemanticSegmentationModel(
        num_classes=num_classes, input_size=[None, None, 3], backbone=_mobilenetv2(16),
        decoder=Decoder(type="aspp", aspp=ASPP(
            level=level, dilation_rates=[], pool_kernel_size=pool_kernel_size)),
        head=SegmentationHead(level=level, num_convs=0),
        norm_activation=NormActivation(activation="relu", norm_momentum=0.99,
                                       norm_epsilon=1e-3, use_sync_bn=True))


def _deeplabv3plus_head(level: int = 4, **fields) -> SegmentationHead:
    return SegmentationHead(level=level, num_convs=2, feature_fusion="deeplabv3plus",
                            low_level=fields.pop("low_level", 2), low_level_num_filters=48,
                            **fields)


def _resnet_deeplab_pascal(dilation_rates, head: SegmentationHead) -> ExperimentConfig:
    """Dilated ResNet-101 DeepLab on PASCAL VOC: batch 16 (eval 8), 45 epochs, from TFM's
    ImageNet backbone checkpoint."""
    steps_per_epoch = PASCAL_TRAIN_EXAMPLES // 16
    return ExperimentConfig(
        task=SemanticSegmentationTask(
            model=_resnet_deeplab(21, dilation_rates, head, norm_momentum=0.9997),
            losses=Losses(l2_weight_decay=1e-4),
            init_checkpoint=DEEPLAB_RESNET101_CHECKPOINT, init_checkpoint_modules="backbone",
            **_pascal_data(16, 8)),
        trainer=_polynomial_trainer(steps_per_epoch, 45 * steps_per_epoch,
                                    PASCAL_VAL_EXAMPLES // 8, 0.007))


@register_config_factory("seg_deeplabv3_pascal")
def seg_deeplabv3_pascal() -> ExperimentConfig:
    """DeepLab v3 on PASCAL VOC: dilated ResNet-101 (os 16, multigrid 1-2-4, stem v1), ASPP
    rates 12-24-36, the 1x1 classifier on the ASPP output (TFM's)."""
    return _resnet_deeplab_pascal([12, 24, 36], SegmentationHead(level=4, num_convs=0))


@register_config_factory("seg_deeplabv3plus_pascal")
def seg_deeplabv3plus_pascal() -> ExperimentConfig:
    """DeepLab v3+ on PASCAL VOC: as seg_deeplabv3_pascal with ASPP rates 6-12-18 and the
    v3+ head (two 3x3 convolutions over the ASPP output fused with level 2) (TFM's)."""
    return _resnet_deeplab_pascal([6, 12, 18], _deeplabv3plus_head())


@register_config_factory("seg_resnetfpn_pascal")
def seg_resnetfpn_pascal() -> ExperimentConfig:
    """ResNet-50 + FPN (levels 3-7) on PASCAL VOC at 512x512, batch 256, 450 epochs (TFM's)."""
    steps_per_epoch = PASCAL_TRAIN_EXAMPLES // 256
    return ExperimentConfig(
        task=SemanticSegmentationTask(
            model=SemanticSegmentationModel(
                num_classes=21, input_size=[512, 512, 3], min_level=3, max_level=7,
                backbone=Backbone(type="resnet", resnet=ResNet(model_id=50)),
                decoder=Decoder(type="fpn", fpn=FPN()),
                head=SegmentationHead(level=3, num_convs=3),
                norm_activation=NormActivation(activation="swish", use_sync_bn=True)),
            losses=Losses(l2_weight_decay=1e-4),
            **_pascal_data(256, 32, output_size=None, aug_scale=(0.2, 1.5))),
        trainer=_polynomial_trainer(steps_per_epoch, 450 * steps_per_epoch,
                                    PASCAL_VAL_EXAMPLES // 32, 0.007))


@register_config_factory("mnv2_deeplabv3_pascal")
def mnv2_deeplabv3_pascal() -> ExperimentConfig:
    """MobileNetV2 DeepLab v3 on PASCAL VOC: ASPP of a 1x1 branch and global pooling, batch
    16, 30,000 steps, the best checkpoint kept on mean_iou, backbone and decoder restored from
    TFM's COCO checkpoint (TFM's)."""
    steps_per_epoch = PASCAL_TRAIN_EXAMPLES // 16
    return ExperimentConfig(
        task=SemanticSegmentationTask(
            model=_mobilenet_deeplab(21, pool_kernel_size=[]),
            losses=Losses(l2_weight_decay=4e-5),
            init_checkpoint=MOBILENETV2_COCO_CHECKPOINT,
            init_checkpoint_modules=["backbone", "decoder"],
            **_pascal_data(16, 16)),
        trainer=_polynomial_trainer(steps_per_epoch, 30000, PASCAL_VAL_EXAMPLES // 16,
                                    0.007 * 16 / 16, **_BEST_MEAN_IOU))


@register_config_factory("seg_deeplabv3plus_cityscapes")
def seg_deeplabv3plus_cityscapes() -> ExperimentConfig:
    """DeepLab v3+ on Cityscapes (19 classes): dilated ResNet-101, ASPP rates 6-12-18 with a
    512x1024 pooling kernel, batch 16, 500 epochs (TFM's)."""
    steps_per_epoch = CITYSCAPES_TRAIN_EXAMPLES // 16
    return ExperimentConfig(
        task=SemanticSegmentationTask(
            model=_resnet_deeplab(19, [6, 12, 18], _deeplabv3plus_head(), norm_momentum=0.99,
                                  pool_kernel_size=[512, 1024]),
            losses=Losses(l2_weight_decay=1e-4),
            init_checkpoint=DEEPLAB_RESNET101_CHECKPOINT, init_checkpoint_modules="backbone",
            **_cityscapes_data(16)),
        trainer=_polynomial_trainer(steps_per_epoch, 500 * steps_per_epoch,
                                    CITYSCAPES_VAL_EXAMPLES // 16, 0.01))


@register_config_factory("mnv2_deeplabv3_cityscapes")
def mnv2_deeplabv3_cityscapes() -> ExperimentConfig:
    """MobileNetV2 DeepLab v3 on Cityscapes: 512x1024 pooling kernel, batch 16, 100,000 steps,
    the best checkpoint kept on mean_iou (TFM's)."""
    steps_per_epoch = CITYSCAPES_TRAIN_EXAMPLES // 16
    return ExperimentConfig(
        task=SemanticSegmentationTask(
            model=_mobilenet_deeplab(19, pool_kernel_size=[512, 1024]),
            losses=Losses(l2_weight_decay=4e-5),
            init_checkpoint=MOBILENETV2_COCO_CHECKPOINT, init_checkpoint_modules="backbone",
            **_cityscapes_data(16)),
        trainer=_polynomial_trainer(steps_per_epoch, 100000, CITYSCAPES_VAL_EXAMPLES // 16,
                                    0.01, **_BEST_MEAN_IOU))


@register_config_factory("mnv2_deeplabv3plus_cityscapes")
def mnv2_deeplabv3plus_cityscapes() -> ExperimentConfig:
    """mnv2_deeplabv3_cityscapes with a depthwise v3+ head fused with MobileNetV2's level-2
    expansion ('2/depthwise', an intermediate endpoint) (TFM's)."""
    config = mnv2_deeplabv3_cityscapes()
    config.task.model.head = _deeplabv3plus_head(
        use_depthwise_convolution=True, low_level="2/depthwise")
    config.task.model.backbone.mobilenet.output_intermediate_endpoints = True
    return config
