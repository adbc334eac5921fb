"""Two-stage detection configs and experiments with TFM's field names and defaults: Faster
R-CNN, Mask R-CNN and Cascade R-CNN.

Mirrors official/vision/configs/maskrcnn.py of tf-models-official 2.20, so that TFM's five
Mask R-CNN YAMLs load unchanged and the five experiments (`fasterrcnn_resnetfpn_coco`,
`maskrcnn_resnetfpn_coco`, `maskrcnn_spinenet_coco`, `cascadercnn_spinenet_coco`,
`maskrcnn_mobilenet_coco`) hold TFM's values. The backbone, decoder, norm-activation and
data-decoder configs are the shared ones; the checks of backbone, decoder, levels, anchors,
NMS and `init_checkpoint_modules` are RetinaNet's (`configs.retinanet`), as both families
build the same features. A TFM field lite does not implement keeps its default; any other
value is refused by `validate()` with a `ConfigError` naming the field.

TensorFlow-free, as all of `configs/`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional, Union

from lite_launcher.core.base_config import Config, ConfigError
from lite_launcher.core.config_definitions import ExperimentConfig, RuntimeConfig, TaskConfig, TrainerConfig
from lite_launcher.core.registry import register_config_factory
from lite_launcher.vision.configs import retinanet
from lite_launcher.vision.configs.backbones import Backbone, MobileNet, ResNet, SpineNet
from lite_launcher.vision.configs.common import (Augmentation, NormActivation,
                                                 check_data_and_init_modules,
                                                 reject_unimplemented)
from lite_launcher.vision.configs.decoders import FPN, Decoder, Identity

# Cascade stages after the first: TFM's model has box-regression weights for three stages.
MAX_CASCADE_STAGES = 3


@dataclasses.dataclass
class Parser(Config):
    """The Mask R-CNN parser (TFM's maskrcnn.Parser).

    match_threshold / unmatched_threshold: TFM's, unused by its parser (RetinaNet's meaning).
    rpn_match_threshold / rpn_unmatched_threshold: an anchor whose best IoU with a box is
      >= the first is an RPN positive, < the second a negative, ignored between.
    rpn_batch_size_per_im, rpn_fg_fraction: anchors sampled per image for the RPN loss and
      the positives' share of them.
    mask_crop_size: each instance mask is cropped to its box and resized to this square.
    pad, keep_aspect_ratio: only True (as TFM).
    """

    num_channels: int = 3
    match_threshold: float = 0.5
    unmatched_threshold: float = 0.5
    aug_rand_hflip: bool = False
    aug_rand_vflip: bool = False
    aug_scale_min: float = 1.0
    aug_scale_max: float = 1.0
    aug_type: Optional[Augmentation] = None
    skip_crowd_during_training: bool = True
    max_num_instances: int = 100
    rpn_match_threshold: float = 0.7
    rpn_unmatched_threshold: float = 0.3
    rpn_batch_size_per_im: int = 256
    rpn_fg_fraction: float = 0.5
    mask_crop_size: int = 112
    pad: bool = True
    keep_aspect_ratio: bool = True


@dataclasses.dataclass
class DataConfig(retinanet.DataConfig):
    """Two-stage detection input (TFM's maskrcnn.DataConfig): RetinaNet's, with the Mask
    R-CNN parser and `num_examples` (the examples an annotation file is written for; -1:
    all)."""

    parser: Parser = dataclasses.field(default_factory=Parser)
    num_examples: int = -1

    def check(self, path: str) -> None:
        """The checks of this data config as `path` (task.train_data / validation_data)."""
        super().check(path)
        parser = self.parser
        for name in ("pad", "keep_aspect_ratio"):
            if not getattr(parser, name):
                raise ConfigError(f"{path}.parser.{name} is false; Mask R-CNN's parser only "
                                  f"supports true (as TFM's).")
        if not 0 <= parser.rpn_unmatched_threshold <= parser.rpn_match_threshold <= 1:
            raise ConfigError(f"{path}.parser: rpn_unmatched_threshold "
                              f"({parser.rpn_unmatched_threshold}) and rpn_match_threshold "
                              f"({parser.rpn_match_threshold}) must satisfy 0 <= unmatched <= "
                              f"matched <= 1.")
        if parser.rpn_batch_size_per_im < 1 or not 0 < parser.rpn_fg_fraction <= 1:
            raise ConfigError(f"{path}.parser: rpn_batch_size_per_im "
                              f"({parser.rpn_batch_size_per_im}) must be >= 1 and "
                              f"rpn_fg_fraction ({parser.rpn_fg_fraction}) in (0, 1].")
        if parser.mask_crop_size < 1:
            raise ConfigError(f"{path}.parser.mask_crop_size ({parser.mask_crop_size}) must be "
                              f">= 1.")
        aug = parser.aug_type
        if (aug is not None and aug.type == "autoaug"
                and aug.autoaug.augmentation_name == "detection_v0"):
            # Mask R-CNN's parser augments the image alone (as TFM's, which fails later on it):
            # a box-moving policy would leave the boxes and masks behind.
            raise ConfigError(f"{path}.parser.aug_type.autoaug.augmentation_name "
                              f"'detection_v0' moves boxes, which Mask R-CNN's parser does not "
                              f"carry through augmentation; use an image policy (e.g. 'v0').")


@dataclasses.dataclass
class Anchor(Config):
    """RPN anchors per feature-map cell (TFM's maskrcnn.Anchor; RetinaNet's fields, one
    scale of 8 * 2**level by default)."""

    num_scales: int = 1
    aspect_ratios: List[float] = dataclasses.field(default_factory=lambda: [0.5, 1.0, 2.0])
    anchor_size: float = 8.0


@dataclasses.dataclass
class RPNHead(Config):
    """The region proposal head: `num_convs` 3x3 convolutions shared by all levels, then a
    1x1 objectness and a 1x1 box predictor (TFM's maskrcnn.RPNHead)."""

    num_convs: int = 1
    num_filters: int = 256
    use_separable_conv: bool = False


@dataclasses.dataclass
class DetectionHead(Config):
    """The box head on each ROI's features (TFM's maskrcnn.DetectionHead).

    num_convs / num_filters: 3x3 convolutions before the fully connected layers.
    num_fcs / fc_dims: fully connected layers before the class and box predictors.
    class_agnostic_bbox_pred: one box per ROI instead of one per class (True for cascades).
    cascade_class_ensemble: with cascade stages, the class scores are the mean of all
      stages'.
    """

    num_convs: int = 4
    num_filters: int = 256
    use_separable_conv: bool = False
    num_fcs: int = 1
    fc_dims: int = 1024
    class_agnostic_bbox_pred: bool = False
    cascade_class_ensemble: bool = False


@dataclasses.dataclass
class ROIGenerator(Config):
    """Proposals from the RPN outputs: top-k per level, NMS, then the best `num_proposals`
    (TFM's maskrcnn.ROIGenerator; the `test_*` fields at inference)."""

    pre_nms_top_k: int = 2000
    pre_nms_score_threshold: float = 0.0
    pre_nms_min_size_threshold: float = 0.0
    nms_iou_threshold: float = 0.7
    num_proposals: int = 1000
    test_pre_nms_top_k: int = 1000
    test_pre_nms_score_threshold: float = 0.0
    test_pre_nms_min_size_threshold: float = 0.0
    test_nms_iou_threshold: float = 0.7
    test_num_proposals: int = 1000
    use_batched_nms: bool = False


@dataclasses.dataclass
class ROISampler(Config):
    """Training ROIs sampled from the proposals (TFM's maskrcnn.ROISampler).

    mix_gt_boxes: the ground-truth boxes join the proposals.
    foreground_iou_threshold: a ROI is foreground at IoU >= this; background in
      [background_iou_low_threshold, background_iou_high_threshold).
    cascade_iou_thresholds: one more box head per threshold (Cascade R-CNN), each stage's
      ROIs the previous stage's boxes, foreground at the stage's threshold.
    """

    mix_gt_boxes: bool = True
    num_sampled_rois: int = 512
    foreground_fraction: float = 0.25
    foreground_iou_threshold: float = 0.5
    background_iou_high_threshold: float = 0.5
    background_iou_low_threshold: float = 0.0
    cascade_iou_thresholds: Optional[List[float]] = None


@dataclasses.dataclass
class ROIAligner(Config):
    """ROI features of crop_size x crop_size, bilinear samples at `sample_offset` of each
    cell (TFM's maskrcnn.ROIAligner)."""

    crop_size: int = 7
    sample_offset: float = 0.5


@dataclasses.dataclass
class DetectionGenerator(Config):
    """Box decoding and NMS of the second stage (TFM's maskrcnn.DetectionGenerator).

    nms_version: 'v1', 'v2' or 'batched' (as RetinaNet's); soft_nms_sigma with 'v1' only.
    use_sigmoid_probability: class scores by sigmoid instead of softmax.
    """

    apply_nms: bool = True
    pre_nms_top_k: int = 5000
    pre_nms_score_threshold: float = 0.05
    nms_iou_threshold: float = 0.5
    max_num_detections: int = 100
    nms_version: str = "v2"
    use_cpu_nms: bool = False
    soft_nms_sigma: Optional[float] = None
    use_sigmoid_probability: bool = False


@dataclasses.dataclass
class MaskHead(Config):
    """The mask head (TFM's maskrcnn.MaskHead): `num_convs` 3x3 convolutions, a transposed
    convolution upsampling by `upsample_factor`, 1x1 mask logits per class (one mask for all
    classes with `class_agnostic`)."""

    upsample_factor: int = 2
    num_convs: int = 4
    num_filters: int = 256
    use_separable_conv: bool = False
    class_agnostic: bool = False


@dataclasses.dataclass
class MaskSampler(Config):
    """Foreground ROIs per image given mask targets in training (TFM's
    maskrcnn.MaskSampler)."""

    num_sampled_masks: int = 128


@dataclasses.dataclass
class MaskROIAligner(Config):
    """The mask head's ROI features (TFM's maskrcnn.MaskROIAligner)."""

    crop_size: int = 14
    sample_offset: float = 0.5


@dataclasses.dataclass
class MaskRCNN(Config):
    """backbone -> decoder (FPN or identity) -> RPN head -> ROI generator -> (ROI sampler
    in training) -> ROI aligner -> detection head(s) -> detection generator, and with
    `include_mask` the mask branch (TFM's maskrcnn.MaskRCNN).

    outer_boxes_scale: >= 1; above 1 the masks are predicted in boxes scaled up by it.
    mask_head / mask_sampler / mask_roi_aligner: null without masks (Faster R-CNN).
    """

    num_classes: int = 0
    input_size: List[int] = dataclasses.field(default_factory=list)
    min_level: int = 2
    max_level: int = 6
    anchor: Anchor = dataclasses.field(default_factory=Anchor)
    include_mask: bool = True
    outer_boxes_scale: float = 1.0
    backbone: Backbone = dataclasses.field(
        default_factory=lambda: Backbone(type="resnet", resnet=ResNet()))
    decoder: Decoder = dataclasses.field(
        default_factory=lambda: Decoder(type="fpn", fpn=FPN()))
    rpn_head: RPNHead = dataclasses.field(default_factory=RPNHead)
    detection_head: DetectionHead = dataclasses.field(default_factory=DetectionHead)
    roi_generator: ROIGenerator = dataclasses.field(default_factory=ROIGenerator)
    roi_sampler: ROISampler = dataclasses.field(default_factory=ROISampler)
    roi_aligner: ROIAligner = dataclasses.field(default_factory=ROIAligner)
    detection_generator: DetectionGenerator = dataclasses.field(
        default_factory=DetectionGenerator)
    mask_head: Optional[MaskHead] = dataclasses.field(default_factory=MaskHead)
    mask_sampler: Optional[MaskSampler] = dataclasses.field(default_factory=MaskSampler)
    mask_roi_aligner: Optional[MaskROIAligner] = dataclasses.field(
        default_factory=MaskROIAligner)
    norm_activation: NormActivation = dataclasses.field(
        default_factory=lambda: NormActivation(norm_momentum=0.997, norm_epsilon=0.0001,
                                               use_sync_bn=True))

    def cascade_stages(self) -> int:
        """Box heads: 1 + one per cascade IoU threshold."""
        return 1 + len(self.roi_sampler.cascade_iou_thresholds or [])


@dataclasses.dataclass
class Losses(Config):
    """RPN score (binary cross-entropy) and box (Huber) losses, Fast R-CNN class and box
    losses, the mask loss and L2 (TFM's maskrcnn.Losses).

    frcnn_class_use_binary_cross_entropy: sigmoid cross-entropy per class instead of softmax.
    frcnn_class_loss_top_k_percent: the share of the hardest ROIs the class loss averages.
    class_weights: per-class weights of the Fast R-CNN class loss (num_classes of them).
    """

    loss_weight: float = 1.0
    rpn_huber_loss_delta: float = 1. / 9.
    frcnn_huber_loss_delta: float = 1.
    frcnn_class_use_binary_cross_entropy: bool = False
    frcnn_class_loss_top_k_percent: float = 1.
    l2_weight_decay: float = 0.0
    rpn_score_weight: float = 1.0
    rpn_box_weight: float = 1.0
    frcnn_class_weight: float = 1.0
    frcnn_box_weight: float = 1.0
    mask_weight: float = 1.0
    class_weights: Optional[List[float]] = None


@dataclasses.dataclass
class MaskRCNNTask(TaskConfig):
    """The task config (TFM's maskrcnn.MaskRCNNTask).

    init_checkpoint_modules: 'all', 'backbone', 'decoder', or a list of 'backbone' / 'decoder'.
    annotation_file: COCO JSON of the validation images; None: the evaluator builds the
      ground truths from the records.
    allowed_mask_class_ids: only these classes' masks are learned; None: every class's.
    use_wod_metrics, use_approx_instance_metrics: TFM's Waymo Open Dataset and TPU-friendly
      approximate evaluators; not implemented (false only).
    """

    model: MaskRCNN = dataclasses.field(default_factory=MaskRCNN)
    train_data: DataConfig = dataclasses.field(default_factory=lambda: DataConfig(is_training=True))
    validation_data: DataConfig = dataclasses.field(
        default_factory=lambda: DataConfig(is_training=False, drop_remainder=False))
    losses: Losses = dataclasses.field(default_factory=Losses)
    init_checkpoint: Optional[str] = None
    init_checkpoint_modules: Union[str, List[str]] = "all"
    annotation_file: Optional[str] = None
    per_category_metrics: bool = False
    allowed_mask_class_ids: Optional[List[int]] = None
    use_coco_metrics: bool = True
    use_wod_metrics: bool = False
    use_approx_instance_metrics: bool = False
    freeze_backbone: bool = False

    # RetinaNet's: `init_checkpoint_modules` as a list.
    init_modules = retinanet.RetinaNetTask.init_modules

    def _validate(self):
        super()._validate()
        reject_unimplemented(self, "task", ("use_wod_metrics", "use_approx_instance_metrics"))
        check_data_and_init_modules(self)
        check_model(self.model)
        losses = self.losses
        for name in ("rpn_huber_loss_delta", "frcnn_huber_loss_delta", "l2_weight_decay",
                     "rpn_score_weight", "rpn_box_weight", "frcnn_class_weight",
                     "frcnn_box_weight", "mask_weight"):
            if getattr(losses, name) < 0:
                raise ConfigError(f"task.losses.{name} ({getattr(losses, name)}) must be >= 0.")
        if not 0 < losses.frcnn_class_loss_top_k_percent <= 1:
            raise ConfigError(f"task.losses.frcnn_class_loss_top_k_percent "
                              f"({losses.frcnn_class_loss_top_k_percent}) must be in (0, 1].")
        num_classes = self.model.num_classes
        if losses.class_weights is not None and num_classes and \
                len(losses.class_weights) != num_classes:
            raise ConfigError(f"task.losses.class_weights has {len(losses.class_weights)} "
                              f"values; give one per class (task.model.num_classes = "
                              f"{num_classes}).")
        bad = [i for i in self.allowed_mask_class_ids or []
               if num_classes and not 0 < i < num_classes]
        if bad:
            raise ConfigError(f"task.allowed_mask_class_ids {bad} must be class ids in 1 .. "
                              f"num_classes - 1 ({num_classes - 1}).")


def check_model(model: MaskRCNN, path: str = "task.model") -> None:
    """The checks of a Mask R-CNN model config that need no TensorFlow (the backbone type
    first: one lite does not build is refused here)."""
    retinanet.check_features(model, "Mask R-CNN", path)
    for name in ("rpn_head", "detection_head"):
        head = getattr(model, name)
        if head.num_convs < 0 or head.num_filters < 1:
            raise ConfigError(f"{path}.{name}: num_convs ({head.num_convs}) must be >= 0 and "
                              f"num_filters ({head.num_filters}) >= 1.")
    detection_head = model.detection_head
    if detection_head.num_fcs < 0 or detection_head.fc_dims < 1:
        raise ConfigError(f"{path}.detection_head: num_fcs ({detection_head.num_fcs}) must be "
                          f">= 0 and fc_dims ({detection_head.fc_dims}) >= 1.")
    sampler = model.roi_sampler
    thresholds = list(sampler.cascade_iou_thresholds or [])
    if thresholds and not detection_head.class_agnostic_bbox_pred:
        raise ConfigError(f"{path}.roi_sampler.cascade_iou_thresholds {thresholds} need "
                          f"{path}.detection_head.class_agnostic_bbox_pred: true (Cascade "
                          f"R-CNN predicts one box per ROI).")
    if model.cascade_stages() > MAX_CASCADE_STAGES:
        raise ConfigError(f"{path}.roi_sampler.cascade_iou_thresholds {thresholds}: at most "
                          f"{MAX_CASCADE_STAGES - 1} cascade stages (TFM's regression weights "
                          f"cover {MAX_CASCADE_STAGES} heads).")
    if any(not 0 < t <= 1 for t in thresholds):
        raise ConfigError(f"{path}.roi_sampler.cascade_iou_thresholds {thresholds} must be in "
                          f"(0, 1].")
    if not (0 <= sampler.background_iou_low_threshold <= sampler.background_iou_high_threshold
            <= 1 and 0 <= sampler.foreground_iou_threshold <= 1):
        raise ConfigError(f"{path}.roi_sampler: background_iou_low_threshold "
                          f"({sampler.background_iou_low_threshold}) <= "
                          f"background_iou_high_threshold "
                          f"({sampler.background_iou_high_threshold}) and "
                          f"foreground_iou_threshold ({sampler.foreground_iou_threshold}) "
                          f"must lie in [0, 1].")
    if sampler.num_sampled_rois < 1 or not 0 <= sampler.foreground_fraction <= 1:
        raise ConfigError(f"{path}.roi_sampler: num_sampled_rois ({sampler.num_sampled_rois}) "
                          f"must be >= 1 and foreground_fraction "
                          f"({sampler.foreground_fraction}) in [0, 1].")
    generator = model.roi_generator
    for name in ("pre_nms_top_k", "num_proposals", "test_pre_nms_top_k", "test_num_proposals"):
        if getattr(generator, name) < 1:
            raise ConfigError(f"{path}.roi_generator.{name} ({getattr(generator, name)}) must "
                              f"be >= 1.")
    for name in ("roi_aligner", "mask_roi_aligner"):
        aligner = getattr(model, name)
        if aligner is not None and aligner.crop_size < 1:
            raise ConfigError(f"{path}.{name}.crop_size ({aligner.crop_size}) must be >= 1.")
    retinanet.check_nms(model.detection_generator, f"{path}.detection_generator")
    if model.outer_boxes_scale < 1.0:
        raise ConfigError(f"{path}.outer_boxes_scale ({model.outer_boxes_scale}) must be "
                          f">= 1.0.")
    if model.include_mask:
        missing = [name for name in ("mask_head", "mask_sampler", "mask_roi_aligner")
                   if getattr(model, name) is None]
        if missing:
            raise ConfigError(f"{path}.include_mask is true but {path}.{missing[0]} is null; "
                              f"set it (e.g. {{}} for TFM's defaults) or include_mask: false.")
        mask_head = model.mask_head
        if mask_head.upsample_factor < 1 or mask_head.num_convs < 0 \
                or mask_head.num_filters < 1:
            raise ConfigError(f"{path}.mask_head: upsample_factor ({mask_head.upsample_factor})"
                              f" must be >= 1, num_convs ({mask_head.num_convs}) >= 0 and "
                              f"num_filters ({mask_head.num_filters}) >= 1.")
        if model.mask_sampler.num_sampled_masks < 1:
            raise ConfigError(f"{path}.mask_sampler.num_sampled_masks "
                              f"({model.mask_sampler.num_sampled_masks}) must be >= 1.")


def check_buildable(task_config: MaskRCNNTask) -> None:
    """Checks what a model needs beyond `validate()` (RetinaNet's: classes, size, no TFDS)."""
    retinanet.check_buildable(task_config)


# ---------------------------------------------------------------------------
# Experiments
# ---------------------------------------------------------------------------


def _coco_experiment(model: MaskRCNN, *, steps_per_epoch: int, train_batch: int,
                     eval_batch: int, train_steps: int, boundaries, values, warmup_steps: int,
                     aug_scale, runtime: RuntimeConfig, **task_fields) -> ExperimentConfig:
    """TFM's COCO recipe of the two-stage experiments: SGD + momentum 0.9, a stepwise rate
    at `boundaries`, linear warmup from 0.0067, L2 4e-5, random flips and scale jitter;
    loops, summaries, checkpoints and evaluations once per `steps_per_epoch`."""
    trainer = TrainerConfig(
        train_steps=train_steps,
        validation_steps=retinanet.COCO_VAL_EXAMPLES // eval_batch,
        validation_interval=steps_per_epoch, steps_per_loop=steps_per_epoch,
        summary_interval=steps_per_epoch, checkpoint_interval=steps_per_epoch)
    trainer.optimizer_config.override({
        "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
        "learning_rate": {"type": "stepwise", "stepwise": {"boundaries": list(boundaries),
                                                           "values": list(values)}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": warmup_steps,
                                                "warmup_learning_rate": 0.0067}},
    })
    base = retinanet.COCO_INPUT_PATH_BASE
    task = MaskRCNNTask(
        annotation_file=os.path.join(base, "instances_val2017.json"), model=model,
        losses=Losses(l2_weight_decay=0.00004),
        train_data=DataConfig(
            input_path=os.path.join(base, "train*"), is_training=True,
            global_batch_size=train_batch,
            parser=Parser(aug_rand_hflip=True, aug_scale_min=aug_scale[0],
                          aug_scale_max=aug_scale[1])),
        validation_data=DataConfig(
            input_path=os.path.join(base, "val*"), is_training=False,
            global_batch_size=eval_batch, drop_remainder=False),
        **task_fields)
    return ExperimentConfig(runtime=runtime, task=task, trainer=trainer)


def _resnet_experiment(include_mask: bool, runtime: RuntimeConfig) -> ExperimentConfig:
    """Faster / Mask R-CNN ResNet-50 FPN at 1024x1024, 22,500 steps of 64 images from TFM's
    ImageNet backbone checkpoint."""
    masks = {} if include_mask else dict(mask_head=None, mask_sampler=None,
                                         mask_roi_aligner=None)
    model = MaskRCNN(num_classes=91, input_size=[1024, 1024, 3], include_mask=include_mask,
                     **masks)
    return _coco_experiment(
        model, steps_per_epoch=500, train_batch=64, eval_batch=8, train_steps=22500,
        boundaries=[15000, 20000], values=[0.12, 0.012, 0.0012], warmup_steps=500,
        aug_scale=(0.8, 1.25), runtime=runtime,
        init_checkpoint=retinanet.RESNET50_IMAGENET_CHECKPOINT,
        init_checkpoint_modules="backbone")


@register_config_factory("fasterrcnn_resnetfpn_coco")
def fasterrcnn_resnetfpn_coco() -> ExperimentConfig:
    """Faster R-CNN ResNet-50 FPN on COCO (91 classes), no masks (TFM's)."""
    return _resnet_experiment(False, RuntimeConfig(mixed_precision_dtype="bfloat16"))


@register_config_factory("maskrcnn_resnetfpn_coco")
def maskrcnn_resnetfpn_coco() -> ExperimentConfig:
    """Mask R-CNN ResNet-50 FPN on COCO (91 classes), bfloat16 with XLA (TFM's)."""
    return _resnet_experiment(True, RuntimeConfig(mixed_precision_dtype="bfloat16",
                                                  enable_xla=True))


def _spinenet_experiment(epochs: int, decay_epochs, activation: str, aug_scale,
                         **model_fields) -> ExperimentConfig:
    """Mask / Cascade R-CNN on SpineNet-49 (identity decoder, levels 3-7) at 640x640, 256
    images a step, 463 steps an epoch."""
    steps_per_epoch = 463
    model = MaskRCNN(
        backbone=Backbone(type="spinenet", spinenet=SpineNet(model_id="49", min_level=3,
                                                             max_level=7)),
        decoder=Decoder(type="identity", identity=Identity()), anchor=Anchor(anchor_size=3.0),
        norm_activation=NormActivation(use_sync_bn=True, activation=activation),
        num_classes=91, input_size=[640, 640, 3], min_level=3, max_level=7, include_mask=True,
        **model_fields)
    return _coco_experiment(
        model, steps_per_epoch=steps_per_epoch, train_batch=256, eval_batch=8,
        train_steps=steps_per_epoch * epochs,
        boundaries=[steps_per_epoch * e for e in decay_epochs], values=[0.32, 0.032, 0.0032],
        warmup_steps=2000, aug_scale=aug_scale,
        runtime=RuntimeConfig(mixed_precision_dtype="bfloat16"))


@register_config_factory("maskrcnn_spinenet_coco")
def maskrcnn_spinenet_coco() -> ExperimentConfig:
    """Mask R-CNN SpineNet-49 on COCO, 350 epochs (TFM's)."""
    return _spinenet_experiment(350, (320, 340), "relu", (0.5, 2.0))


@register_config_factory("cascadercnn_spinenet_coco")
def cascadercnn_spinenet_coco() -> ExperimentConfig:
    """Cascade R-CNN-RS SpineNet-49 on COCO: two more box heads at IoU 0.6 and 0.7, class
    scores averaged over the three, swish, 500 epochs (TFM's)."""
    return _spinenet_experiment(
        500, (475, 490), "swish", (0.1, 2.5),
        roi_sampler=ROISampler(cascade_iou_thresholds=[0.6, 0.7]),
        detection_head=DetectionHead(class_agnostic_bbox_pred=True,
                                     cascade_class_ensemble=True))


@register_config_factory("maskrcnn_mobilenet_coco")
def maskrcnn_mobilenet_coco() -> ExperimentConfig:
    """Mask R-CNN MobileNetV2 with a separable FPN and heads of half width, levels 3-6 at
    512x512, relu6 (TFM's)."""
    steps_per_epoch = 232
    model = MaskRCNN(
        backbone=Backbone(type="mobilenet", mobilenet=MobileNet(model_id="MobileNetV2")),
        decoder=Decoder(type="fpn", fpn=FPN(num_filters=128, use_separable_conv=True)),
        rpn_head=RPNHead(use_separable_conv=True, num_filters=128),
        detection_head=DetectionHead(use_separable_conv=True, num_filters=128, fc_dims=512),
        mask_head=MaskHead(use_separable_conv=True, num_filters=128),
        anchor=Anchor(anchor_size=3.0),
        norm_activation=NormActivation(activation="relu6", norm_momentum=0.99,
                                       norm_epsilon=0.001, use_sync_bn=True),
        num_classes=91, input_size=[512, 512, 3], min_level=3, max_level=6, include_mask=True)
    return _coco_experiment(
        model, steps_per_epoch=steps_per_epoch, train_batch=512, eval_batch=512,
        train_steps=steps_per_epoch * 350,
        boundaries=[steps_per_epoch * 320, steps_per_epoch * 340],
        values=[0.32, 0.032, 0.0032], warmup_steps=2000, aug_scale=(0.5, 2.0),
        runtime=RuntimeConfig(mixed_precision_dtype="bfloat16"))
