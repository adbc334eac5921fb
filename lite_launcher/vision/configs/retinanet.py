"""RetinaNet configs and experiments with TFM's field names and defaults.

Mirrors official/vision/configs/retinanet.py of tf-models-official 2.20, so that TFM's RetinaNet
YAMLs on ResNet and MobileNet load unchanged and the four experiments (`retinanet`,
`retinanet_resnetfpn_coco`, `retinanet_spinenet_coco`, `retinanet_mobile_coco`) hold TFM's
values. The backbone, decoder, norm-activation and data-decoder configs are the shared ones.
lite builds ResNet, MobileNet, SpineNet, mobile SpineNet, MobileDet (and the other
classification backbones) under FPN or the identity decoder; any other backbone type is refused
by `validate()` in one line, before TensorFlow builds anything. As for every family, a TFM
field lite does not implement keeps its default; any other value is refused by `validate()`
with a `ConfigError` naming the field.

TensorFlow-free, as all of `configs/`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Sequence, Union

from lite_launcher.common import errors
from lite_launcher.core.base_config import Config, ConfigError
from lite_launcher.core.config_definitions import DataConfig as BaseDataConfig
from lite_launcher.core.config_definitions import ExperimentConfig, RuntimeConfig, TaskConfig, TrainerConfig
from lite_launcher.core.registry import register_config_factory
from lite_launcher.vision.configs.backbones import Backbone, ResNet, SpineNet, SpineNetMobile
from lite_launcher.vision.configs.common import (  # noqa: F401  (TFM's retinanet names)
    Augmentation, DataDecoder, NormActivation, RandJpegQuality, TfExampleDecoder,
    TfExampleDecoderLabelMap, TFLitePostProcessingConfig, INIT_CHECKPOINT_MODULES,
    check_data_and_init_modules, check_data_config, init_modules, reject_unimplemented)
from lite_launcher.vision.configs.decoders import FPN, Decoder, Identity

DECODER_TYPES = ("fpn", "identity")
NMS_VERSIONS = ("v1", "v2", "batched")
ATTRIBUTE_TYPES = ("regression", "classification")
# How a missing pycocotools is named (errors.import_extra), by the driver and the evaluator.
PYCOCOTOOLS_PURPOSE = "COCO evaluation and COCO masks need pycocotools"


@dataclasses.dataclass
class Parser(Config):
    """The RetinaNet parser (TFM's retinanet.Parser).

    match_threshold / unmatched_threshold: an anchor whose best IoU with a ground-truth box
      is >= match_threshold is positive, < unmatched_threshold negative, ignored between.
    aug_scale_min / max: random scale jitter of the output size in training.
    pad: pad the image to a multiple of 2**max_level.
    aug_policy: unused (TFM keeps it for old configs).
    """

    num_channels: int = 3
    match_threshold: float = 0.5
    unmatched_threshold: float = 0.5
    aug_rand_hflip: bool = False
    aug_rand_jpeg: Optional[RandJpegQuality] = None
    aug_scale_min: float = 1.0
    aug_scale_max: float = 1.0
    skip_crowd_during_training: bool = True
    max_num_instances: int = 100
    aug_type: Optional[Augmentation] = None
    pad: bool = True
    keep_aspect_ratio: bool = True
    aug_policy: Optional[str] = None


@dataclasses.dataclass
class DataConfig(BaseDataConfig):
    """Detection input (TFM's retinanet.DataConfig): TFM's TF Example records decoded by
    `decoder` (simple or label map) and parsed by `parser`."""

    input_path: Union[Sequence[str], str] = ""
    weights: Optional[Config] = None
    global_batch_size: int = 0
    is_training: bool = False
    dtype: str = "bfloat16"
    decoder: DataDecoder = dataclasses.field(default_factory=DataDecoder)
    parser: Parser = dataclasses.field(default_factory=Parser)
    shuffle_buffer_size: int = 10000
    file_type: str = "tfrecord"

    UNIMPLEMENTED = ("weights",)

    def check(self, path: str) -> None:
        """The checks of this data config as `path` (task.train_data / validation_data)."""
        check_data_config(self, path)
        if self.decoder.type not in ("simple_decoder", "label_map_decoder"):
            raise ConfigError(f"{path}.decoder.type {self.decoder.type!r} must be "
                              f"'simple_decoder' or 'label_map_decoder'.")
        if (self.decoder.type == "label_map_decoder"
                and not self.decoder.label_map_decoder.label_map):
            raise ConfigError(f"{path}.decoder.label_map_decoder.label_map is empty; set it to "
                              f"the label map file (one `id,name` row per class).")
        parser = self.parser
        if parser.num_channels != 3:
            raise ConfigError(f"{path}.parser.num_channels ({parser.num_channels}) must be 3 "
                              f"(RGB images).")
        if not 0 < parser.aug_scale_min <= parser.aug_scale_max:
            raise ConfigError(f"{path}.parser: aug_scale_min ({parser.aug_scale_min}) and "
                              f"aug_scale_max ({parser.aug_scale_max}) must satisfy "
                              f"0 < min <= max.")
        if not 0 <= parser.unmatched_threshold <= parser.match_threshold <= 1:
            raise ConfigError(f"{path}.parser: unmatched_threshold "
                              f"({parser.unmatched_threshold}) and match_threshold "
                              f"({parser.match_threshold}) must satisfy 0 <= unmatched <= "
                              f"matched <= 1.")
        if parser.max_num_instances < 1:
            raise ConfigError(f"{path}.parser.max_num_instances ({parser.max_num_instances}) "
                              f"must be >= 1.")
        jpeg = getattr(parser, "aug_rand_jpeg", None)  # Mask R-CNN's parser has none
        if jpeg is not None and not 0 <= jpeg.min_quality <= jpeg.max_quality <= 100:
            raise ConfigError(f"{path}.parser.aug_rand_jpeg: min_quality ({jpeg.min_quality}) "
                              f"and max_quality ({jpeg.max_quality}) must satisfy 0 <= min <= "
                              f"max <= 100.")


@dataclasses.dataclass
class Anchor(Config):
    """Anchors per feature-map cell (TFM's retinanet.Anchor): num_scales intermediate scales
    times the aspect ratios (width / height), of side anchor_size * 2**level."""

    num_scales: int = 3
    aspect_ratios: List[float] = dataclasses.field(default_factory=lambda: [0.5, 1.0, 2.0])
    anchor_size: float = 4.0


@dataclasses.dataclass
class Losses(Config):
    """Focal loss of the classes + Huber loss of the boxes (TFM's retinanet.Losses)."""

    loss_weight: float = 1.0
    focal_loss_alpha: float = 0.25
    focal_loss_gamma: float = 1.5
    huber_loss_delta: float = 0.1
    box_loss_weight: int = 50
    l2_weight_decay: float = 0.0


@dataclasses.dataclass
class AttributeHead(Config):
    """An extra per-anchor prediction (TFM's retinanet.AttributeHead).

    type: 'regression' or 'classification' (its bias starts at the focal prior).
    prediction_tower_name: heads of the same (non-empty) name share one tower (the first
      one's num_convs / num_filters).
    num_convs / num_filters: the tower's; None: the RetinaNet head's.
    """

    name: str = ""
    type: str = "regression"
    size: int = 1
    prediction_tower_name: str = ""
    num_convs: Optional[int] = None
    num_filters: Optional[int] = None


@dataclasses.dataclass
class RetinaNetHead(Config):
    """The class and box towers (TFM's retinanet.RetinaNetHead).

    share_level_convs: one set of tower convolutions and predictors for all levels (the
      normalisations are per level either way); False: one per level.
    share_classification_heads: classification attribute heads read the class tower.
    """

    num_convs: int = 4
    num_filters: int = 256
    use_separable_conv: bool = False
    attribute_heads: List[AttributeHead] = dataclasses.field(default_factory=list)
    share_classification_heads: bool = False
    share_level_convs: Optional[bool] = True


@dataclasses.dataclass
class DetectionGenerator(Config):
    """Box decoding and NMS of the inference outputs (TFM's retinanet.DetectionGenerator).

    nms_version: 'v1' (per class; soft NMS with soft_nms_sigma), 'v2' (per class, tiled;
      class-agnostic with use_class_agnostic_nms) or 'batched'; TFM's 'tflite' (a TFLite
      custom op) is not implemented.
    return_decoded: also return the decoded boxes and scores before NMS.
    box_coder_weights: [y, x, h, w] scales of the box encoding; None: no scaling.
    decode_boxes, tflite_post_processing: TFM's, unused by RetinaNet (kept to load).
    """

    apply_nms: bool = True
    decode_boxes: bool = True
    pre_nms_top_k: int = 5000
    pre_nms_score_threshold: float = 0.05
    nms_iou_threshold: float = 0.5
    max_num_detections: int = 100
    nms_version: str = "v2"
    use_cpu_nms: bool = False
    soft_nms_sigma: Optional[float] = None
    tflite_post_processing: TFLitePostProcessingConfig = dataclasses.field(
        default_factory=TFLitePostProcessingConfig)
    return_decoded: Optional[bool] = None
    use_class_agnostic_nms: Optional[bool] = False
    box_coder_weights: Optional[List[float]] = None


@dataclasses.dataclass
class RetinaNet(Config):
    """backbone -> decoder (FPN or identity) -> RetinaNet head -> detection generator, on
    levels min_level .. max_level (TFM's retinanet.RetinaNet)."""

    num_classes: int = 0
    input_size: List[int] = dataclasses.field(default_factory=list)
    min_level: int = 3
    max_level: int = 7
    anchor: Anchor = dataclasses.field(default_factory=Anchor)
    backbone: Backbone = dataclasses.field(
        default_factory=lambda: Backbone(type="resnet", resnet=ResNet()))
    decoder: Decoder = dataclasses.field(
        default_factory=lambda: Decoder(type="fpn", fpn=FPN()))
    head: RetinaNetHead = dataclasses.field(default_factory=RetinaNetHead)
    detection_generator: DetectionGenerator = dataclasses.field(
        default_factory=DetectionGenerator)
    norm_activation: NormActivation = dataclasses.field(default_factory=NormActivation)


@dataclasses.dataclass
class ExportConfig(Config):
    """Detection export options (TFM's retinanet.ExportConfig)."""

    output_normalized_coordinates: bool = False
    cast_num_detections_to_float: bool = False
    cast_detection_classes_to_float: bool = False
    output_intermediate_features: bool = False


@dataclasses.dataclass
class RetinaNetTask(TaskConfig):
    """The task config (TFM's retinanet.RetinaNetTask).

    init_checkpoint_modules: 'all', 'backbone', 'decoder', or a list of 'backbone' / 'decoder'.
    annotation_file: COCO JSON of the validation images; None: the evaluator builds the
      ground truths from the records.
    max_num_eval_detections: detections per image the COCO evaluation reads.
    use_wod_metrics: TFM's Waymo Open Dataset evaluator; not implemented (false only).
    """

    model: RetinaNet = dataclasses.field(default_factory=RetinaNet)
    train_data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(is_training=True))
    validation_data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(is_training=False))
    losses: Losses = dataclasses.field(default_factory=Losses)
    init_checkpoint: Optional[str] = None
    init_checkpoint_modules: Union[str, List[str]] = "all"
    annotation_file: Optional[str] = None
    per_category_metrics: bool = False
    export_config: ExportConfig = dataclasses.field(default_factory=ExportConfig)
    use_coco_metrics: bool = True
    use_wod_metrics: bool = False
    freeze_backbone: bool = False
    max_num_eval_detections: int = 100

    def init_modules(self) -> List[str]:
        """`init_checkpoint_modules` as a list ('all' alone means the whole model)."""
        return init_modules(self)

    def check_extras(self, mode: str) -> None:
        """A mode that evaluates with COCO metrics needs pycocotools (the `detection` extra):
        refused in one line by the driver, before anything is built."""
        if mode != "train" and self.use_coco_metrics:
            errors.import_extra("pycocotools.cocoeval", PYCOCOTOOLS_PURPOSE, "detection")

    def _validate(self):
        super()._validate()
        reject_unimplemented(self, "task", ("use_wod_metrics",))
        check_data_and_init_modules(self)
        if self.max_num_eval_detections < 1:
            raise ConfigError(f"task.max_num_eval_detections ({self.max_num_eval_detections}) "
                              f"must be >= 1.")
        check_model(self.model)
        losses = self.losses
        for name in ("focal_loss_gamma", "huber_loss_delta", "box_loss_weight",
                     "l2_weight_decay"):
            if getattr(losses, name) < 0:
                raise ConfigError(f"task.losses.{name} ({getattr(losses, name)}) must be >= 0.")
        if not 0.0 <= losses.focal_loss_alpha <= 1.0:
            raise ConfigError(f"task.losses.focal_loss_alpha ({losses.focal_loss_alpha}) must "
                              f"be in [0, 1].")


def check_features(model, family: str, path: str = "task.model") -> None:
    """The backbone (one lite builds), decoder (FPN or identity) and levels of a detection
    model config (`family` names it in the message)."""
    model.backbone.check_built(f"{path}.backbone")
    if model.decoder.type not in DECODER_TYPES:
        raise ConfigError(f"{path}.decoder.type {model.decoder.type!r} is not implemented for "
                          f"{family}; use one of {', '.join(DECODER_TYPES)}.")
    if model.decoder.type == "fpn" and model.decoder.fpn.fusion_type not in ("sum", "concat"):
        raise ConfigError(f"{path}.decoder.fpn.fusion_type {model.decoder.fpn.fusion_type!r} "
                          f"must be 'sum' or 'concat'.")
    if not 1 <= model.min_level <= model.max_level:
        raise ConfigError(f"{path}: min_level ({model.min_level}) and max_level "
                          f"({model.max_level}) must satisfy 1 <= min_level <= max_level.")
    anchor = model.anchor
    if anchor.num_scales < 1 or not anchor.aspect_ratios or min(anchor.aspect_ratios) <= 0 \
            or anchor.anchor_size <= 0:
        raise ConfigError(f"{path}.anchor: num_scales ({anchor.num_scales}) must be >= 1, "
                          f"aspect_ratios ({list(anchor.aspect_ratios)}) non-empty and > 0, "
                          f"anchor_size ({anchor.anchor_size}) > 0.")


def check_nms(generator, where: str) -> None:
    """The NMS fields both detection generators share (`where`: the config's path)."""
    if generator.nms_version not in NMS_VERSIONS:
        raise ConfigError(f"{where}.nms_version {generator.nms_version!r} is not implemented; "
                          f"use one of {', '.join(NMS_VERSIONS)}.")
    if generator.soft_nms_sigma is not None and generator.nms_version != "v1":
        raise ConfigError(f"{where}.soft_nms_sigma needs nms_version 'v1' (it is "
                          f"{generator.nms_version!r}).")
    for name in ("pre_nms_top_k", "max_num_detections"):
        if getattr(generator, name) < 1:
            raise ConfigError(f"{where}.{name} ({getattr(generator, name)}) must be >= 1.")


def check_model(model: RetinaNet, path: str = "task.model") -> None:
    """The checks of a RetinaNet model config that need no TensorFlow (the backbone type
    first: one lite does not build is refused here)."""
    check_features(model, "RetinaNet", path)
    head = model.head
    if head.num_convs < 0 or head.num_filters < 1:
        raise ConfigError(f"{path}.head: num_convs ({head.num_convs}) must be >= 0 and "
                          f"num_filters ({head.num_filters}) >= 1.")
    names = [attribute.name for attribute in head.attribute_heads]
    for i, attribute in enumerate(head.attribute_heads):
        where = f"{path}.head.attribute_heads[{i}]"
        if not attribute.name or names.count(attribute.name) > 1:
            raise ConfigError(f"{where}.name {attribute.name!r} must be set and unique.")
        if attribute.type not in ATTRIBUTE_TYPES:
            raise ConfigError(f"{where}.type {attribute.type!r} must be 'regression' or "
                              f"'classification'.")
        if attribute.size < 1:
            raise ConfigError(f"{where}.size ({attribute.size}) must be >= 1.")
        if attribute.prediction_tower_name and head.share_classification_heads:
            raise ConfigError(f"{where}.prediction_tower_name {attribute.prediction_tower_name!r}"
                              f" cannot be set with {path}.head.share_classification_heads; "
                              f"clear one of them.")
        for name in ("num_convs", "num_filters"):
            if (getattr(attribute, name) or 0) < 0:
                raise ConfigError(f"{where}.{name} ({getattr(attribute, name)}) must be >= 0.")
    generator = model.detection_generator
    where = f"{path}.detection_generator"
    check_nms(generator, where)
    if generator.use_class_agnostic_nms and generator.nms_version != "v2":
        raise ConfigError(f"{where}.use_class_agnostic_nms needs nms_version 'v2' (it is "
                          f"{generator.nms_version!r}).")
    if head.attribute_heads and generator.apply_nms and generator.nms_version != "v1":
        raise ConfigError(f"{path}.head.attribute_heads need {where}.nms_version 'v1' (it is "
                          f"{generator.nms_version!r}), as in TFM.")
    if generator.box_coder_weights is not None and len(generator.box_coder_weights) != 4:
        raise ConfigError(f"{where}.box_coder_weights {list(generator.box_coder_weights)} must "
                          f"be 4 numbers [y, x, h, w] (or null).")


def check_buildable(task_config: RetinaNetTask) -> None:
    """Checks what a model needs (TFM's general `retinanet` leaves num_classes and input_size
    empty)."""
    model = task_config.model
    if model.num_classes < 2:
        raise ConfigError(
            f"task.model.num_classes ({model.num_classes}) must be set to the number of "
            f"classes + 1 (class 0 is the background; e.g. task.model.num_classes=91 for COCO).")
    size = list(model.input_size)
    if len(size) != 3 or size[2] != 3 or any(s is None or s < 1 for s in size[:2]):
        raise ConfigError(f"task.model.input_size {size} must be [height, width, 3] (e.g. "
                          f"task.model.input_size=[640,640,3]).")
    for split in ("train_data", "validation_data"):
        name = getattr(task_config, split).tfds_name
        if name:
            raise ConfigError(
                f"task.{split}.tfds_name ({name!r}): lite reads TFDS for image classification "
                f"only; write the detection data as TFRecords (create_coco_tf_record) and set "
                f"task.{split}.input_path.")


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------

COCO_INPUT_PATH_BASE = "coco"
COCO_TRAIN_EXAMPLES = 118287
COCO_VAL_EXAMPLES = 5000
# TFM's ImageNet ResNet-50 checkpoint retinanet_resnetfpn_coco starts from.
RESNET50_IMAGENET_CHECKPOINT = "gs://cloud-tpu-checkpoints/vision-2.0/resnet50_imagenet/ckpt-28080"


@register_config_factory("retinanet")
def retinanet() -> ExperimentConfig:
    """RetinaNet, general: set num_classes, input_size, data and trainer."""
    return ExperimentConfig(task=RetinaNetTask(), trainer=TrainerConfig())


def _coco_experiment(model: RetinaNet, epochs: int, decay_epochs, warmup_steps: int,
                     l2_weight_decay: float, aug_scale, mixed_precision_dtype: str,
                     **task_fields) -> ExperimentConfig:
    """TFM's COCO recipe: batch 256 (eval 8), SGD + momentum 0.9, a stepwise rate 0.32 ->
    0.032 -> 0.0032 at `decay_epochs`, linear warmup from 0.0067; loops, summaries,
    checkpoints and evaluations once per epoch."""
    train_batch, eval_batch = 256, 8
    steps_per_epoch = COCO_TRAIN_EXAMPLES // train_batch
    trainer = TrainerConfig(
        train_steps=epochs * steps_per_epoch, validation_steps=COCO_VAL_EXAMPLES // eval_batch,
        validation_interval=steps_per_epoch, steps_per_loop=steps_per_epoch,
        summary_interval=steps_per_epoch, checkpoint_interval=steps_per_epoch)
    trainer.optimizer_config.override({
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        "learning_rate": {"type": "stepwise", "stepwise": {
            "boundaries": [e * steps_per_epoch for e in decay_epochs],
            "values": [rate * train_batch / 256.0 for rate in (0.32, 0.032, 0.0032)]}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps,
                                                "warmup_learning_rate": 0.0067}},
    })
    task = RetinaNetTask(
        annotation_file=os.path.join(COCO_INPUT_PATH_BASE, "instances_val2017.json"),
        model=model, losses=Losses(l2_weight_decay=l2_weight_decay),
        train_data=DataConfig(
            input_path=os.path.join(COCO_INPUT_PATH_BASE, "train*"), is_training=True,
            global_batch_size=train_batch,
            parser=Parser(aug_rand_hflip=True, aug_scale_min=aug_scale[0],
                          aug_scale_max=aug_scale[1])),
        validation_data=DataConfig(
            input_path=os.path.join(COCO_INPUT_PATH_BASE, "val*"), is_training=False,
            global_batch_size=eval_batch),
        **task_fields)
    return ExperimentConfig(
        runtime=RuntimeConfig(mixed_precision_dtype=mixed_precision_dtype), task=task,
        trainer=trainer)


@register_config_factory("retinanet_resnetfpn_coco")
def retinanet_resnetfpn_coco() -> ExperimentConfig:
    """RetinaNet ResNet-50 FPN on COCO (91 classes) at 640x640, 72 epochs, bfloat16, from
    TFM's ImageNet backbone checkpoint (TFM's)."""
    model = RetinaNet(num_classes=91, input_size=[640, 640, 3],
                      norm_activation=NormActivation(use_sync_bn=False), min_level=3,
                      max_level=7)
    return _coco_experiment(model, 72, (57, 67), 500, 1e-4, (0.8, 1.2), "bfloat16",
                            init_checkpoint=RESNET50_IMAGENET_CHECKPOINT,
                            init_checkpoint_modules="backbone")


@register_config_factory("retinanet_spinenet_coco")
def retinanet_spinenet_coco() -> ExperimentConfig:
    """RetinaNet SpineNet-49 on COCO at 640x640, 500 epochs (TFM's)."""
    model = RetinaNet(
        backbone=Backbone(type="spinenet", spinenet=SpineNet(
            model_id="49", stochastic_depth_drop_rate=0.2, min_level=3, max_level=7)),
        decoder=Decoder(type="identity", identity=Identity()), anchor=Anchor(anchor_size=3.0),
        norm_activation=NormActivation(use_sync_bn=True, activation="swish"),
        num_classes=91, input_size=[640, 640, 3], min_level=3, max_level=7)
    return _coco_experiment(model, 500, (475, 490), 2000, 4e-5, (0.1, 2.0), "float32")


@register_config_factory("retinanet_mobile_coco")
def retinanet_mobile_coco() -> ExperimentConfig:
    """Mobile RetinaNet on COCO: mobile SpineNet-49, separable head of 48 filters, 384x384,
    600 epochs (TFM's; TFM's MobileNet YAMLs set a MobileNet backbone over it)."""
    model = RetinaNet(
        backbone=Backbone(type="spinenet_mobile", spinenet_mobile=SpineNetMobile(
            model_id="49", stochastic_depth_drop_rate=0.2, min_level=3, max_level=7,
            use_keras_upsampling_2d=False)),
        decoder=Decoder(type="identity", identity=Identity()),
        head=RetinaNetHead(num_filters=48, use_separable_conv=True),
        anchor=Anchor(anchor_size=3.0),
        norm_activation=NormActivation(use_sync_bn=True, activation="swish"),
        num_classes=91, input_size=[384, 384, 3], min_level=3, max_level=7)
    return _coco_experiment(model, 600, (575, 590), 2000, 3e-5, (0.1, 2.0), "float32")
