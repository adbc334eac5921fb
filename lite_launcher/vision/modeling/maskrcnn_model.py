"""TFM's MaskRCNNModel (official/vision/modeling/maskrcnn_model.py): Faster R-CNN, Mask R-CNN
and Cascade R-CNN; `build_maskrcnn` builds it from a `MaskRCNN` config (TFM's factory).

backbone -> decoder (FPN, or none for the identity decoder) -> `RPNHead` ->
`MultilevelROIGenerator` (proposals) -> per stage: `ROISampler` (training) ->
`MultilevelROIAligner` -> `DetectionHead`; then `DetectionGenerator` at inference, and with
masks `MaskSampler` (training) -> mask ROI aligner -> `MaskHead`.

The call convention is TFM's: `model(images, image_shape=None, anchor_boxes=None,
gt_boxes=None, gt_classes=None, gt_masks=None, gt_outer_boxes=None, training=None)`;
`image_shape` [B, 2] are the unpadded image sizes (None: the images' own size), anchors
{str(level): [B, h_l, w_l, 4 * A]} (None: generated from the images' static size).
Outputs (a dict, as TFM's):
- always: `backbone_features`, `decoder_features`, `rpn_scores`, `rpn_boxes` (dicts by
  `str(level)`), `class_outputs` [B, N, num_classes] and `box_outputs` [B, N, 4 * num_classes]
  (4 with class-agnostic boxes) of the first stage, `class_outputs_<i>` / `box_outputs_<i>`
  of cascade stage i.
- training with ground truths: `class_targets`, `box_targets` (and `_<i>` per stage) of the
  sampled ROIs; with masks `mask_outputs` [B, M, S, S] (logits), `mask_targets`,
  `mask_class_targets`.
- inference: `cls_outputs` (the class scores the generator read: the stages' mean with
  `cascade_class_ensemble`) and `box_outputs` (the last stage's); with NMS
  `detection_boxes` [B, D, 4], `detection_scores`, `detection_classes`, `num_detections`
  (+ `detection_outer_boxes` with `outer_boxes_scale` > 1), with masks `detection_masks`
  [B, D, S, S] (probabilities in each box); without NMS `decoded_boxes`,
  `decoded_box_scores`.

Cascade stage i encodes its box targets with TFM's regression weights
`CASCADE_REGRESSION_WEIGHTS[i]`. Raw outputs follow the Keras dtype policy; proposals, boxes
and detections are computed in float32.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import keras
import tensorflow as tf

from lite_launcher.vision.configs.maskrcnn import MaskRCNN
from lite_launcher.vision.modeling.backbones.factory import build_backbone, output_specs
from lite_launcher.vision.modeling.decoders.factory import build_decoder
from lite_launcher.vision.modeling.factory import (decoder_inputs, feature_specs,
                                                  select_init_checkpoint_items,
                                                  model_from_config, norm_settings)
from lite_launcher.vision.modeling.heads.dense_prediction_heads import build_rpn_head
from lite_launcher.vision.modeling.heads.instance_heads import (build_detection_heads,
                                                                build_mask_head)
from lite_launcher.vision.modeling.layers import (detection_generator, mask_sampler,
                                                  roi_aligner, roi_generator, roi_sampler)
from lite_launcher.vision.modeling.layers.nn_layers import register_serializable
from lite_launcher.vision.ops import anchor, box_ops

# [y, x, h, w] weights of the box encoding of each detection stage (TFM's fixed values).
CASCADE_REGRESSION_WEIGHTS = ((10.0, 10.0, 5.0, 5.0), (20.0, 20.0, 10.0, 10.0),
                              (30.0, 30.0, 15.0, 15.0))
_LAYER_KEYS = ("backbone", "decoder", "rpn_head", "detection_head", "roi_generator",
               "roi_sampler", "roi_aligner", "detection_generator", "mask_head",
               "mask_sampler", "mask_roi_aligner")


def _float32(tree):
    return tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), tree)


def _stage_key(name: str, stage: int) -> str:
    """TFM's output names: `class_outputs` for the first stage, `class_outputs_2` later."""
    return f"{name}_{stage}" if stage else name


def _as_list(value) -> List[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@register_serializable
class MaskRCNNModel(keras.Model):
    """TFM's MaskRCNNModel: see the module docstring for the call and its outputs.

    Args (TFM's):
      backbone: images -> {str(level): features}.
      decoder: {str(level): features} -> {str(level): features}, or None.
      rpn_head: an `RPNHead`.
      detection_head: a `DetectionHead`, or one per cascade stage.
      roi_generator: a `MultilevelROIGenerator`.
      roi_sampler: a `ROISampler`, or one per cascade stage.
      roi_aligner: a `MultilevelROIAligner` (the detection heads' features).
      detection_generator: the two-stage `DetectionGenerator`.
      mask_head, mask_sampler, mask_roi_aligner: the mask branch, or None (no masks).
      class_agnostic_bbox_pred: one box per ROI (required with several stages).
      cascade_class_ensemble: inference class scores are the mean of all stages'.
      min_level, max_level, num_scales, aspect_ratios, anchor_size: the anchors generated
        when none are passed to the call.
      outer_boxes_scale: >= 1; above 1 masks are predicted in boxes scaled up by it.
    """

    def __init__(self, backbone: keras.Model, decoder: Optional[keras.layers.Layer],
                 rpn_head: keras.layers.Layer,
                 detection_head: Union[keras.layers.Layer, Sequence[keras.layers.Layer]],
                 roi_generator: keras.layers.Layer,
                 roi_sampler: Union[keras.layers.Layer, Sequence[keras.layers.Layer]],
                 roi_aligner: keras.layers.Layer, detection_generator: keras.layers.Layer,
                 mask_head: Optional[keras.layers.Layer] = None,
                 mask_sampler: Optional[keras.layers.Layer] = None,
                 mask_roi_aligner: Optional[keras.layers.Layer] = None,
                 class_agnostic_bbox_pred: bool = False, cascade_class_ensemble: bool = False,
                 min_level: Optional[int] = None, max_level: Optional[int] = None,
                 num_scales: Optional[int] = None,
                 aspect_ratios: Optional[Sequence[float]] = None,
                 anchor_size: Optional[float] = None, outer_boxes_scale: float = 1.0,
                 **kwargs):
        super().__init__(**kwargs)
        heads, samplers = _as_list(detection_head), _as_list(roi_sampler)
        if len(samplers) > 1 and not class_agnostic_bbox_pred:
            raise ValueError("class_agnostic_bbox_pred must be True with several detection "
                             "heads (Cascade R-CNN).")
        if len(samplers) != len(heads):
            raise ValueError(f"{len(heads)} detection heads for {len(samplers)} ROI samplers: "
                             f"give one head per stage.")
        if len(heads) > len(CASCADE_REGRESSION_WEIGHTS):
            raise ValueError(f"{len(heads)} detection stages; at most "
                             f"{len(CASCADE_REGRESSION_WEIGHTS)}.")
        if outer_boxes_scale < 1.0:
            raise ValueError(f"outer_boxes_scale ({outer_boxes_scale}) must be >= 1.0.")
        if mask_head is not None and (mask_sampler is None or mask_roi_aligner is None):
            raise ValueError("a mask_head needs a mask_sampler and a mask_roi_aligner.")
        self.backbone = backbone
        self.decoder = decoder
        self.rpn_head = rpn_head
        # One attribute per stage (a Keras layer held only in a list can be missing from
        # tf.train.Checkpoint); `detection_head` / `roi_sampler` give the lists, as TFM.
        self._num_stages = len(heads)
        for stage, (head, sampler) in enumerate(zip(heads, samplers)):
            setattr(self, f"_detection_head_{stage}", head)
            setattr(self, f"_roi_sampler_{stage}", sampler)
        self.roi_generator = roi_generator
        self.roi_aligner = roi_aligner
        self.detection_generator = detection_generator
        self.mask_head = mask_head
        self.mask_sampler = mask_sampler
        self.mask_roi_aligner = mask_roi_aligner
        self._options = dict(
            class_agnostic_bbox_pred=class_agnostic_bbox_pred,
            cascade_class_ensemble=cascade_class_ensemble, min_level=min_level,
            max_level=max_level, num_scales=num_scales,
            aspect_ratios=None if aspect_ratios is None else list(aspect_ratios),
            anchor_size=anchor_size, outer_boxes_scale=outer_boxes_scale)

    # ----- building ---------------------------------------------------------------------

    def build(self, input_shape):
        """Builds the heads on the symbolic features of the (Functional) backbone and
        decoder, without tracing them again (a Keras 3 subclassed model must be built before
        a checkpoint restores into it)."""
        del input_shape  # the backbone's own input fixes the features' shapes
        features = feature_specs(self.backbone, self.decoder)
        if not self.rpn_head.built:
            self.rpn_head(features)
        channels = next(iter(features.values())).shape[-1]
        crop = self.roi_aligner.get_config()["crop_size"]
        for head in self.detection_head:
            if not head.built:
                head.build((None, 1, crop, crop, channels))
        if self.mask_head is not None and not self.mask_head.built:
            crop = self.mask_roi_aligner.get_config()["crop_size"]
            self.mask_head.build(((None, 1, crop, crop, channels), (None, 1)))
        self.built = True

    # ----- call -------------------------------------------------------------------------

    def _anchors(self, images, anchor_boxes):
        if anchor_boxes is not None:
            return anchor_boxes
        config = self._options
        return anchor.batch_multilevel_boxes(
            images, config["min_level"], config["max_level"], config["num_scales"],
            config["aspect_ratios"], config["anchor_size"])

    def call(self, images, image_shape=None, anchor_boxes=None, gt_boxes=None,
             gt_classes=None, gt_masks=None, gt_outer_boxes=None, training=None):
        if image_shape is None:
            image_shape = tf.tile(tf.constant([images.shape[1:3]], tf.float32),
                                  [tf.shape(images)[0], 1])
        image_shape = tf.cast(image_shape, tf.float32)
        outputs, matched = self._call_box_outputs(images, image_shape, anchor_boxes, gt_boxes,
                                                  gt_classes, gt_outer_boxes, training)
        if self.mask_head is None:
            return outputs
        scale = self._options["outer_boxes_scale"]
        if training:
            rois, gt_boxes_key = matched["rois"], "boxes"
            if scale > 1.0:
                rois = box_ops.compute_outer_boxes(rois, image_shape[:, None, :], scale)
                gt_boxes_key = "outer_boxes"
            rois, roi_classes, roi_masks = self.mask_sampler(
                rois, matched[gt_boxes_key], matched["classes"], matched["indices"], gt_masks)
            outputs.update(mask_class_targets=roi_classes,
                           mask_targets=tf.stop_gradient(roi_masks))
        else:
            rois = outputs["detection_outer_boxes" if scale > 1.0 else "detection_boxes"]
            roi_classes = outputs["detection_classes"]
        mask_features = self.mask_roi_aligner(outputs["decoder_features"], rois)
        logits = self.mask_head([mask_features, roi_classes], training=training)
        if training:
            outputs["mask_outputs"] = logits
        else:
            outputs["detection_masks"] = tf.nn.sigmoid(logits)
        return outputs

    def _features(self, images, training):
        backbone_features = self.backbone(images, training=training)
        if self.decoder is None:
            return backbone_features, backbone_features
        return backbone_features, self.decoder(
            decoder_inputs(self.decoder, backbone_features), training=training)

    def _call_box_outputs(self, images, image_shape, anchor_boxes, gt_boxes, gt_classes,
                          gt_outer_boxes, training):
        """The box stages: outputs, and the last stage's ROIs with their matched ground
        truths (training) for the mask branch."""
        backbone_features, features = self._features(images, training)
        rpn_scores, rpn_boxes = self.rpn_head(features, training=training)
        outputs = dict(backbone_features=backbone_features, decoder_features=features,
                       rpn_boxes=rpn_boxes, rpn_scores=rpn_scores)
        anchors = self._anchors(images, anchor_boxes)
        rois, _ = self.roi_generator(_float32(rpn_boxes), _float32(rpn_scores),
                                      _float32(anchors), image_shape, training=training)
        sampling = bool(training) and gt_boxes is not None
        with_outer = self._options["outer_boxes_scale"] > 1.0
        matched: Dict[str, Any] = {}
        all_class_outputs = []
        heads, samplers = self.detection_head, self.roi_sampler
        for stage in range(self._num_stages):
            weights = list(CASCADE_REGRESSION_WEIGHTS[stage])
            if sampling:
                rois = tf.stop_gradient(rois)
                if with_outer:
                    (rois, matched_boxes, matched_outer, matched_classes,
                     matched_indices) = samplers[stage](rois, gt_boxes, gt_classes,
                                                        gt_outer_boxes)
                    matched["outer_boxes"] = matched_outer
                else:
                    rois, matched_boxes, matched_classes, matched_indices = samplers[stage](
                        rois, gt_boxes, gt_classes)
                box_targets = box_ops.encode_boxes(matched_boxes, rois, weights=weights)
                # A background ROI's box target is zero.
                box_targets = tf.where(tf.equal(matched_classes, 0)[..., None],
                                       tf.zeros_like(box_targets), box_targets)
                outputs[_stage_key("class_targets", stage)] = matched_classes
                outputs[_stage_key("box_targets", stage)] = box_targets
                matched.update(boxes=matched_boxes, classes=matched_classes,
                               indices=matched_indices)
            roi_features = self.roi_aligner(features, rois)
            class_outputs, box_outputs = heads[stage](roi_features, training=training)
            outputs[_stage_key("class_outputs", stage)] = class_outputs
            outputs[_stage_key("box_outputs", stage)] = box_outputs
            all_class_outputs.append(class_outputs)
            matched["rois"] = rois
            if stage < self._num_stages - 1:
                rois = box_ops.clip_boxes(
                    box_ops.decode_boxes(tf.cast(box_outputs, tf.float32), rois,
                                         weights=weights), image_shape[:, None, :])
        if not training:
            self._detect(outputs, all_class_outputs, box_outputs, rois, image_shape, weights)
        return outputs, matched

    def _detect(self, outputs, all_class_outputs, box_outputs, rois, image_shape, weights):
        """The detection generator's outputs on the last stage's boxes."""
        class_outputs = all_class_outputs[-1]
        if self._options["cascade_class_ensemble"]:
            class_outputs = tf.add_n(all_class_outputs) / len(all_class_outputs)
        detections = self.detection_generator(
            tf.cast(box_outputs, tf.float32), tf.cast(class_outputs, tf.float32), rois,
            image_shape, regression_weights=weights,
            bbox_per_class=not self._options["class_agnostic_bbox_pred"])
        outputs.update(cls_outputs=class_outputs, box_outputs=box_outputs)
        if self.detection_generator.get_config()["apply_nms"]:
            for key in ("detection_boxes", "detection_scores", "detection_classes",
                        "num_detections"):
                outputs[key] = detections[key]
            scale = self._options["outer_boxes_scale"]
            if scale > 1.0:
                outputs["detection_outer_boxes"] = box_ops.compute_outer_boxes(
                    detections["detection_boxes"], image_shape[:, None, :], scale)
        else:
            outputs.update(decoded_boxes=detections["decoded_boxes"],
                           decoded_box_scores=detections["decoded_box_scores"])

    # ----- parts (public attributes as TFM's; the staged ones as lists) ---------------

    @property
    def detection_head(self) -> List[keras.layers.Layer]:
        """The detection heads, one per stage (TFM's list)."""
        return [getattr(self, f"_detection_head_{i}") for i in range(self._num_stages)]

    @property
    def roi_sampler(self) -> List[keras.layers.Layer]:
        """The ROI samplers, one per stage (TFM's list)."""
        return [getattr(self, f"_roi_sampler_{i}") for i in range(self._num_stages)]

    @property
    def outer_boxes_scale(self) -> float:
        return self._options["outer_boxes_scale"]

    @property
    def checkpoint_items(self) -> Dict[str, Union[keras.layers.Layer, List]]:
        """Saved in checkpoints besides the model, as TFM's: backbone, rpn_head,
        detection_head (the list of stages), decoder (when there is one) and mask_head
        (with masks); `init_checkpoint_modules` restores them by these names."""
        items = dict(backbone=self.backbone, rpn_head=self.rpn_head,
                     detection_head=self.detection_head)
        if self.decoder is not None:
            items["decoder"] = self.decoder
        if self.mask_head is not None:
            items["mask_head"] = self.mask_head
        return items

    def init_checkpoint_items(self, modules: Sequence[str]) -> Dict[str, Any]:
        """The checkpoint items `task.init_checkpoint_modules` restores: 'all' the checkpoint's
        `model` (TFM's task reads its `model` object, not the checkpoint items), else the
        backbone and / or decoder, as RetinaNet's and segmentation's models."""
        if "all" in modules:
            return {"model": self}
        return select_init_checkpoint_items(self.checkpoint_items, modules)

    def get_config(self):
        serialize = keras.saving.serialize_keras_object
        parts = dict(backbone=self.backbone, decoder=self.decoder, rpn_head=self.rpn_head,
                     detection_head=self.detection_head, roi_generator=self.roi_generator,
                     roi_sampler=self.roi_sampler, roi_aligner=self.roi_aligner,
                     detection_generator=self.detection_generator,
                     mask_head=self.mask_head, mask_sampler=self.mask_sampler,
                     mask_roi_aligner=self.mask_roi_aligner)
        config = {"name": self.name, "trainable": self.trainable, **self._options}
        for key, value in parts.items():
            config[key] = None if value is None else (
                [serialize(v) for v in value] if isinstance(value, list) else serialize(value))
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return model_from_config(cls, config, _LAYER_KEYS, custom_objects)


def build_maskrcnn(model_config: MaskRCNN, l2_weight_decay: float = 0.0,
                   backbone: Optional[keras.Model] = None,
                   decoder: Optional[keras.layers.Layer] = None) -> MaskRCNNModel:
    """TFM's `factory.build_maskrcnn` for `model_config` at its `input_size`, the L2 of
    `l2_weight_decay` on every kernel (TFM's task passes l2(decay / 2)); `backbone` and
    `decoder` as TFM's arguments. Cascade stages after the first sample every proposal
    (`skip_subsampling`) at their IoU threshold, without the ground truths mixed in. The
    model comes back built (every weight created)."""
    settings = norm_settings(model_config, l2_weight_decay)
    input_shape = list(model_config.input_size)
    if backbone is None:
        backbone = build_backbone(input_shape, model_config.backbone, settings)
    if decoder is None:
        decoder = build_decoder(output_specs(backbone), model_config, settings)
    generator = model_config.roi_generator
    proposals = roi_generator.MultilevelROIGenerator(
        **{name: getattr(generator, name) for name in generator.field_names()},
        name="roi_generator")
    sampler = model_config.roi_sampler
    samplers = [roi_sampler.ROISampler(
        mix_gt_boxes=sampler.mix_gt_boxes, num_sampled_rois=sampler.num_sampled_rois,
        foreground_fraction=sampler.foreground_fraction,
        foreground_iou_threshold=sampler.foreground_iou_threshold,
        background_iou_high_threshold=sampler.background_iou_high_threshold,
        background_iou_low_threshold=sampler.background_iou_low_threshold,
        name="roi_sampler")]
    for stage, iou in enumerate(sampler.cascade_iou_thresholds or [], start=1):
        samplers.append(roi_sampler.ROISampler(
            mix_gt_boxes=False, num_sampled_rois=sampler.num_sampled_rois,
            foreground_iou_threshold=iou, background_iou_high_threshold=iou,
            background_iou_low_threshold=0.0, skip_subsampling=True,
            name=f"roi_sampler_{stage}"))
    detections = model_config.detection_generator
    generator_layer = detection_generator.DetectionGenerator(
        apply_nms=detections.apply_nms, pre_nms_top_k=detections.pre_nms_top_k,
        pre_nms_score_threshold=detections.pre_nms_score_threshold,
        nms_iou_threshold=detections.nms_iou_threshold,
        max_num_detections=detections.max_num_detections,
        nms_version=detections.nms_version, use_cpu_nms=detections.use_cpu_nms,
        soft_nms_sigma=detections.soft_nms_sigma,
        use_sigmoid_probability=detections.use_sigmoid_probability, dtype="float32",
        name="detection_generator")
    mask_parts = {}
    if model_config.include_mask:
        mask_aligner = model_config.mask_roi_aligner
        mask_parts = dict(
            mask_head=build_mask_head(model_config, settings),
            mask_sampler=mask_sampler.MaskSampler(
                mask_target_size=mask_aligner.crop_size * model_config.mask_head.upsample_factor,
                num_sampled_masks=model_config.mask_sampler.num_sampled_masks,
                name="mask_sampler"),
            mask_roi_aligner=roi_aligner.MultilevelROIAligner(
                crop_size=mask_aligner.crop_size, sample_offset=mask_aligner.sample_offset,
                name="mask_roi_aligner"))
    anchor_config = model_config.anchor
    model = MaskRCNNModel(
        backbone=backbone, decoder=decoder, rpn_head=build_rpn_head(model_config, settings),
        detection_head=build_detection_heads(model_config, settings),
        roi_generator=proposals, roi_sampler=samplers,
        roi_aligner=roi_aligner.MultilevelROIAligner(
            crop_size=model_config.roi_aligner.crop_size,
            sample_offset=model_config.roi_aligner.sample_offset, name="roi_aligner"),
        detection_generator=generator_layer,
        class_agnostic_bbox_pred=model_config.detection_head.class_agnostic_bbox_pred,
        cascade_class_ensemble=model_config.detection_head.cascade_class_ensemble,
        min_level=model_config.min_level, max_level=model_config.max_level,
        num_scales=anchor_config.num_scales, aspect_ratios=anchor_config.aspect_ratios,
        anchor_size=anchor_config.anchor_size,
        outer_boxes_scale=model_config.outer_boxes_scale, name="maskrcnn_model",
        **mask_parts)
    model.build([None] + input_shape)
    return model
