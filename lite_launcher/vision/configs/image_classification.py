"""Image classification configs with TFM's field names and defaults.

Mirrors official/vision/configs/image_classification.py of tf-models-official 2.20 (the
backbone and shared configs are `configs.backbones` and `configs.common`), so that a TFM YAML
for `image_classification`, `resnet_imagenet` or `mobilenet_imagenet` loads unchanged. A TFM field that lite_launcher does not implement is kept
(so a YAML naming it with its default still loads) but any other value is rejected by
`validate()` with a `ConfigError` naming the field, never silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence, Tuple, Union

from lite_launcher.core.base_config import Config, ConfigError
from lite_launcher.core.config_definitions import DataConfig as BaseDataConfig
from lite_launcher.core.config_definitions import ExperimentConfig, RuntimeConfig, TaskConfig, TrainerConfig
from lite_launcher.core.registry import register_config_factory
from lite_launcher.vision.configs.backbones import (  # noqa: F401  (re-exported: vision.configs)
    DILATED_RESNET_MODEL_IDS, MOBILENET_MODEL_IDS, RESNET_MODEL_IDS, VIT_POOLERS, VIT_SPECS,
    Backbone, DilatedResNet, MobileNet, ResNet, Transformer, VisionTransformer)
from lite_launcher.vision.configs.common import (  # noqa: F401
    Augmentation, AutoAugment, DataDecoder, MixupAndCutmix, NormActivation, RandAugment,
    RandomErasing, TfExampleDecoder, init_modules, reject_unimplemented)

IMAGENET_TRAIN_EXAMPLES = 1281167
IMAGENET_VAL_EXAMPLES = 50000
IMAGENET_INPUT_PATH_BASE = "imagenet-2012-tfrecord"


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

    # What `init_checkpoint_modules` may name: the whole model or its backbone.
    INIT_CHECKPOINT_MODULES = ("all", "backbone")

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

    def init_modules(self) -> List[str]:
        """`init_checkpoint_modules` as a list (`configs.common.init_modules`)."""
        return init_modules(self)

    def _validate(self):
        super()._validate()
        reject_unimplemented(self, "task", (
            "train_input_partition_dims", "eval_input_partition_dims", "model_output_keys"))
        for name in ("train_data", "validation_data"):
            reject_unimplemented(getattr(self, name), f"task.{name}", DataConfig.UNIMPLEMENTED)
        init_modules(self)
        self.model.backbone.check_built()
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
