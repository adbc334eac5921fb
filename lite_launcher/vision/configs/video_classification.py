"""Video classification configs with TFM's field names and defaults.

Mirrors official/vision/configs/video_classification.py of tf-models-official 2.20 (the 3D
backbones are `configs.backbones_3d`), so that a TFM YAML for one of the six
`video_classification*` experiments loads unchanged. A TFM field that lite_launcher does not
implement is kept (a YAML naming it with its default still loads) but any other value is
refused by `validate()` with a `ConfigError` naming the field, never silently ignored.
TensorFlow-free.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple, Union

from lite_launcher.core.base_config import Config, ConfigError
from lite_launcher.core.config_definitions import DataConfig as BaseDataConfig
from lite_launcher.core.config_definitions import (
    ExperimentConfig, RuntimeConfig, TaskConfig, TrainerConfig)
from lite_launcher.core.registry import register_config_factory
from lite_launcher.vision.configs.backbones_3d import (  # noqa: F401  (re-exported)
    RESNET_3D_MODEL_IDS, RESNET_3D_REPEATS, Backbone3D, ResNet3D, ResNet3D50, ResNet3DBlock,
    ResNet3DRS)
from lite_launcher.vision.configs.common import (
    Augmentation, MixupAndCutmix, NormActivation, check_data_config, init_modules)


@dataclasses.dataclass
class DataConfig(BaseDataConfig):
    """Video input (TFM's video_classification.DataConfig): SequenceExample clips of
    `feature_shape` (frames, height, width, channels) read every `temporal_stride` frames."""

    name: Optional[str] = None
    file_type: Optional[str] = "tfrecord"
    compressed_input: bool = False
    split: str = "train"
    variant_name: Optional[str] = None
    feature_shape: Tuple[int, ...] = (64, 224, 224, 3)
    temporal_stride: int = 1
    random_stride_range: int = 0
    num_test_clips: int = 1
    num_test_crops: int = 1
    num_classes: int = -1
    num_examples: int = -1
    global_batch_size: int = 128
    data_format: str = "channels_last"
    dtype: str = "float32"
    label_dtype: str = "int32"
    one_hot: bool = True
    shuffle_buffer_size: int = 64
    cache: bool = False
    input_path: Union[Sequence[str], str] = ""
    is_training: bool = True
    cycle_length: int = 10
    drop_remainder: bool = True
    min_image_size: int = 256
    zero_centering_image: bool = False
    is_multilabel: bool = False
    output_audio: bool = False
    audio_feature: str = ""
    audio_feature_shape: Tuple[int, ...] = (-1,)
    aug_min_aspect_ratio: float = 0.5
    aug_max_aspect_ratio: float = 2.0
    aug_min_area_ratio: float = 0.49
    aug_max_area_ratio: float = 1.0
    aug_random_rotation: bool = False
    aug_type: Optional[Augmentation] = None
    mixup_and_cutmix: Optional[MixupAndCutmix] = None
    image_field_key: str = "image/encoded"
    label_field_key: str = "clip/label/index"
    input_image_format: str = "jpeg"

    # TFM fields that lite_launcher does not implement (their defaults are accepted):
    # compressed (GZIP) records.
    UNIMPLEMENTED = ("compressed_input",)

    def check(self, path: str) -> None:
        """Raises ConfigError naming `path` (task.train_data, ...) for a value TFM's input
        would stop on or lite does not implement."""
        check_data_config(self, path)
        if self.file_type != "tfrecord":
            # TFM's task: `Unknown input file type`.
            raise ConfigError(f"{path}.file_type {self.file_type!r} must be 'tfrecord' (TFM's "
                              f"video input reads TFRecords of SequenceExamples).")
        if self.data_format != "channels_last":
            raise ConfigError(f"{path}.data_format {self.data_format!r} is not implemented; "
                              f"use 'channels_last'.")
        if len(self.feature_shape) != 4 or min(self.feature_shape[:3]) < 1:
            raise ConfigError(f"{path}.feature_shape {list(self.feature_shape)} must be "
                              f"(frames, height, width, channels), each >= 1.")
        if self.feature_shape[3] not in (1, 3):
            raise ConfigError(f"{path}.feature_shape[3] ({self.feature_shape[3]}) must be 3 "
                              f"(RGB) or 1.")
        for name in ("temporal_stride", "num_test_clips", "num_test_crops", "min_image_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{path}.{name} ({getattr(self, name)}) must be >= 1.")
        if self.num_test_crops not in (1, 3):
            raise ConfigError(f"{path}.num_test_crops ({self.num_test_crops}) must be 1 "
                              f"(centre) or 3 (TFM's three crops).")
        if self.random_stride_range < 0:
            raise ConfigError(f"{path}.random_stride_range ({self.random_stride_range}) must "
                              f"be >= 0.")
        if not 0 < self.aug_min_area_ratio <= self.aug_max_area_ratio <= 1.0:
            raise ConfigError(f"{path}.aug_min_area_ratio / aug_max_area_ratio "
                              f"({self.aug_min_area_ratio}, {self.aug_max_area_ratio}) must "
                              f"satisfy 0 < min <= max <= 1.")
        if not 0 < self.aug_min_aspect_ratio <= self.aug_max_aspect_ratio:
            raise ConfigError(f"{path}.aug_min_aspect_ratio / aug_max_aspect_ratio "
                              f"({self.aug_min_aspect_ratio}, {self.aug_max_aspect_ratio}) "
                              f"must satisfy 0 < min <= max.")
        if self.aug_type is not None and self.aug_type.type not in (None, "randaug",
                                                                    "autoaug"):
            raise ConfigError(f"{path}.aug_type.type {self.aug_type.type!r} must be 'randaug' "
                              f"or 'autoaug'.")
        if self.label_dtype not in ("int32", "int64"):
            raise ConfigError(f"{path}.label_dtype {self.label_dtype!r} must be 'int32' or "
                              f"'int64'.")
        if self.input_image_format not in ("jpeg", "png"):
            raise ConfigError(f"{path}.input_image_format {self.input_image_format!r} must be "
                              f"'jpeg' or 'png'.")


def kinetics400(is_training: bool) -> DataConfig:
    """Kinetics-400 (TFM's: 215,570 train / 17,706 validation clips)."""
    return _kinetics("kinetics400", 400, is_training, 215570, 17706)


def kinetics600(is_training: bool) -> DataConfig:
    """Kinetics-600 (TFM's: 366,016 train / 27,780 validation clips)."""
    return _kinetics("kinetics600", 600, is_training, 366016, 27780)


def kinetics700(is_training: bool) -> DataConfig:
    """Kinetics-700 (TFM's: 522,883 train / 33,441 validation clips)."""
    return _kinetics("kinetics700", 700, is_training, 522883, 33441)


def kinetics700_2020(is_training: bool) -> DataConfig:
    """Kinetics-700-2020 (TFM's: 535,982 train / 33,640 validation clips; named
    'kinetics700' as in TFM)."""
    return _kinetics("kinetics700", 700, is_training, 535982, 33640)


def _kinetics(name, num_classes, is_training, train_examples, valid_examples) -> DataConfig:
    # TFM's: 64-frame training clips, 250-frame evaluation clips.
    return DataConfig(
        name=name, num_classes=num_classes, is_training=is_training,
        split="train" if is_training else "valid", drop_remainder=is_training,
        num_examples=train_examples if is_training else valid_examples,
        feature_shape=(64, 224, 224, 3) if is_training else (250, 224, 224, 3))


@dataclasses.dataclass
class VideoClassificationModel(Config):
    """The model: a 3D backbone, global average pooling of its last (or the required, or all)
    endpoints, dropout and a dense layer (TFM's VideoClassificationModel)."""

    model_type: str = "video_classification"
    backbone: Backbone3D = dataclasses.field(
        default_factory=lambda: Backbone3D(type="resnet_3d", resnet_3d=ResNet3D50()))
    norm_activation: NormActivation = dataclasses.field(
        default_factory=lambda: NormActivation(use_sync_bn=False))
    dropout_rate: float = 0.2
    aggregate_endpoints: bool = False
    require_endpoints: Optional[Tuple[str, ...]] = None


@dataclasses.dataclass
class Losses(Config):
    """Loss options (TFM's video_classification.Losses)."""

    one_hot: bool = True
    label_smoothing: float = 0.0
    l2_weight_decay: float = 0.0


@dataclasses.dataclass
class Metrics(Config):
    """Metric options (TFM's video_classification.Metrics): per-class recall of multi-label
    evaluation."""

    use_per_class_recall: bool = False


@dataclasses.dataclass
class VideoClassificationTask(TaskConfig):
    """The task config (TFM's video_classification.VideoClassificationTask)."""

    model: VideoClassificationModel = dataclasses.field(
        default_factory=VideoClassificationModel)
    train_data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(is_training=True, drop_remainder=True))
    validation_data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(is_training=False, drop_remainder=False))
    losses: Losses = dataclasses.field(default_factory=Losses)
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    init_checkpoint: Optional[str] = None
    init_checkpoint_modules: str = "all"
    freeze_backbone: bool = False
    train_input_partition_dims: Optional[Tuple[int, ...]] = None
    eval_input_partition_dims: Optional[Tuple[int, ...]] = None

    INIT_CHECKPOINT_MODULES = ("all", "backbone")

    def init_modules(self) -> List[str]:
        """`init_checkpoint_modules` as a list (`configs.common.init_modules`)."""
        return init_modules(self)

    def _validate(self):
        super()._validate()
        if self.train_input_partition_dims or self.eval_input_partition_dims:
            raise ConfigError("task.train_input_partition_dims / eval_input_partition_dims "
                              "(TPU spatial partitioning) are not implemented by "
                              "lite_launcher; remove them.")
        self.train_data.check("task.train_data")
        self.validation_data.check("task.validation_data")
        init_modules(self)
        model = self.model
        if model.model_type != "video_classification":
            raise ConfigError(f"task.model.model_type {model.model_type!r} must be "
                              f"'video_classification'.")
        model.backbone.check_built()
        if not 0.0 <= model.dropout_rate < 1.0:
            raise ConfigError(f"task.model.dropout_rate ({model.dropout_rate}) must be in "
                              f"[0, 1).")
        if model.require_endpoints and model.aggregate_endpoints:
            raise ConfigError("task.model.require_endpoints is ignored with "
                              "aggregate_endpoints (every endpoint is pooled); set one.")
        for endpoint in model.require_endpoints or ():
            if endpoint not in ("2", "3", "4", "5"):
                raise ConfigError(f"task.model.require_endpoints names {endpoint!r}; the 3D "
                                  f"ResNet's endpoints are '2', '3', '4', '5'.")
        if not 0.0 <= self.losses.label_smoothing < 1.0:
            raise ConfigError(f"task.losses.label_smoothing ({self.losses.label_smoothing}) "
                              f"must be in [0, 1).")
        if self.losses.l2_weight_decay < 0:
            raise ConfigError(f"task.losses.l2_weight_decay ({self.losses.l2_weight_decay}) "
                              f"must be >= 0.")
        if self.train_data.is_multilabel and not self.losses.one_hot:
            raise ConfigError("task.losses.one_hot must be true for multi-label data "
                              "(train_data.is_multilabel); TFM's sparse metrics take one "
                              "class per clip.")
        # TFM's restrictions of these experiments.
        if self.train_data.num_classes != self.validation_data.num_classes:
            raise ConfigError(
                f"task.train_data.num_classes ({self.train_data.num_classes}) and "
                f"task.validation_data.num_classes ({self.validation_data.num_classes}) "
                f"must be equal (TFM's restriction).")


def check_buildable(task_config: VideoClassificationTask) -> None:
    """What a model needs beyond TFM's defaults: the number of classes (TFM leaves it -1)."""
    if task_config.train_data.num_classes < 1:
        raise ConfigError(
            f"task.train_data.num_classes ({task_config.train_data.num_classes}) must be set "
            f"to the number of classes, with validation_data.num_classes (e.g. "
            f"--params_override task.train_data.num_classes=10,"
            f"task.validation_data.num_classes=10).")


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------

# TFM's restrictions on these experiments: train_data.is_training set (get_exp_config marks
# it) and equal num_classes (VideoClassificationTask._validate).


def add_trainer(experiment: ExperimentConfig, train_batch_size: int, eval_batch_size: int,
                learning_rate: float = 1.6, train_epochs: int = 44,
                warmup_epochs: int = 5) -> ExperimentConfig:
    """TFM's video trainer: SGD with Nesterov momentum 0.9, cosine decay over `train_epochs`
    after a linear warmup of `warmup_epochs`; one loop, summary, checkpoint and validation per
    epoch of `train_data.num_examples`."""
    task = experiment.task
    if task.train_data.num_examples <= 0 or task.validation_data.num_examples <= 0:
        raise ValueError("add_trainer needs train_data and validation_data num_examples.")
    task.train_data.global_batch_size = train_batch_size
    task.validation_data.global_batch_size = eval_batch_size
    steps_per_epoch = task.train_data.num_examples // train_batch_size
    experiment.trainer = TrainerConfig(
        steps_per_loop=steps_per_epoch, summary_interval=steps_per_epoch,
        checkpoint_interval=steps_per_epoch, train_steps=train_epochs * steps_per_epoch,
        validation_steps=task.validation_data.num_examples // eval_batch_size,
        validation_interval=steps_per_epoch)
    experiment.trainer.optimizer_config.override({
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9, "nesterov": True}},
        "learning_rate": {"type": "cosine", "cosine": {
            "initial_learning_rate": learning_rate,
            "decay_steps": train_epochs * steps_per_epoch}},
        "warmup": {"type": "linear", "linear": {
            "warmup_steps": warmup_epochs * steps_per_epoch, "warmup_learning_rate": 0}},
    })
    return experiment


def _resnet3d50_task(train_data: DataConfig, validation_data: DataConfig):
    return VideoClassificationTask(
        model=VideoClassificationModel(
            backbone=Backbone3D(type="resnet_3d", resnet_3d=ResNet3D50()),
            norm_activation=NormActivation(norm_momentum=0.9, norm_epsilon=1e-5,
                                           use_sync_bn=False)),
        losses=Losses(l2_weight_decay=1e-4),
        train_data=train_data, validation_data=validation_data)


def _bfloat16() -> RuntimeConfig:
    return RuntimeConfig(mixed_precision_dtype="bfloat16")


@register_config_factory("video_classification")
def video_classification() -> ExperimentConfig:
    """Video classification, general (bfloat16, TFM's): set the data, num_classes and
    trainer."""
    return ExperimentConfig(runtime=_bfloat16(), task=VideoClassificationTask(),
                            trainer=TrainerConfig())


@register_config_factory("video_classification_ucf101")
def video_classification_ucf101() -> ExperimentConfig:
    """3D ResNet-50 on UCF-101 from TFDS (32 frames, stride 2), batch 64, lr 0.8, 100 epochs
    (TFM's; its validation data keeps TFM's `is_training: true`)."""
    def ucf101(split, drop_remainder, num_examples):
        return DataConfig(name="ucf101", num_classes=101, is_training=True, split=split,
                          drop_remainder=drop_remainder, num_examples=num_examples,
                          temporal_stride=2, feature_shape=(32, 224, 224, 3),
                          tfds_name="ucf101", tfds_split=split)

    config = ExperimentConfig(runtime=_bfloat16(), task=_resnet3d50_task(
        ucf101("train", True, 9537), ucf101("test", False, 3783)))
    return add_trainer(config, train_batch_size=64, eval_batch_size=16, learning_rate=0.8,
                       train_epochs=100)


def _kinetics_experiment(data_fn) -> ExperimentConfig:
    config = ExperimentConfig(runtime=_bfloat16(),
                              task=_resnet3d50_task(data_fn(True), data_fn(False)))
    return add_trainer(config, train_batch_size=1024, eval_batch_size=64)


@register_config_factory("video_classification_kinetics400")
def video_classification_kinetics400() -> ExperimentConfig:
    """3D ResNet-50 on Kinetics-400: batch 1024, SGD + Nesterov, cosine lr 1.6, 44 epochs
    (TFM's)."""
    return _kinetics_experiment(kinetics400)


@register_config_factory("video_classification_kinetics600")
def video_classification_kinetics600() -> ExperimentConfig:
    """3D ResNet-50 on Kinetics-600 (TFM's schedule as for Kinetics-400)."""
    return _kinetics_experiment(kinetics600)


@register_config_factory("video_classification_kinetics700")
def video_classification_kinetics700() -> ExperimentConfig:
    """3D ResNet-50 on Kinetics-700 (TFM's schedule as for Kinetics-400)."""
    return _kinetics_experiment(kinetics700)


@register_config_factory("video_classification_kinetics700_2020")
def video_classification_kinetics700_2020() -> ExperimentConfig:
    """3D ResNet-50 on Kinetics-700-2020 (TFM's schedule as for Kinetics-400)."""
    return _kinetics_experiment(kinetics700_2020)
