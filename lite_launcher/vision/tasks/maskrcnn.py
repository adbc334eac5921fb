"""The two-stage detection task: Faster R-CNN, Mask R-CNN and Cascade R-CNN (TFM's
official/vision/tasks/maskrcnn.py, `MaskRCNNTask`), for the five experiments of
`configs.maskrcnn`.

It wires `maskrcnn_model.build_maskrcnn`, the records (`tf_example_decoder`, with masks when
`model.include_mask`) through `maskrcnn_input.Parser`, `maskrcnn_losses.maskrcnn_losses` (RPN
score and box, Fast R-CNN class and box averaged over the cascade stages, mask, L2) and the
COCO evaluator (boxes, and masks with `include_mask`).

Metrics, as TFM's: in training the means of `LOSS_NAMES`; in evaluation no loss (the step's
`loss` is 0, as TFM's, since inference samples no ROIs) and the COCO numbers (`AP`, ...,
`ARl`, and with masks the same twelve prefixed `mask_`). With masks and no
`annotation_file`, the evaluator reads `annotation.json` in the task's logging directory
(model_dir), written once from the validation records (`validation_data.num_examples` of them;
-1: all), as TFM's: the parser's ground-truth masks are cropped to their boxes, COCO needs
them whole.

The detection base (`tasks.detection.DetectionTask`, RetinaNet's too) holds what both do:
`init_checkpoint` ('all': the whole model; 'backbone', 'decoder'), the decoders, the gradient
step, the host-side COCO aggregation and the serving signatures (`serving.detection`, with
`detection_masks`).
"""

from __future__ import annotations

import os
from typing import List, Optional

import keras
import tensorflow as tf
from absl import logging

from lite_launcher.common.errors import ConfigError
from lite_launcher.core.base_task import _split_inputs
from lite_launcher.core.input_reader import InputReader, pick_dataset_fn
from lite_launcher.core.registry import register_task_cls
from lite_launcher.vision.configs import maskrcnn as maskrcnn_configs
from lite_launcher.vision.dataloaders import coco_groundtruth_generator, maskrcnn_input
from lite_launcher.vision.evaluation import coco_evaluator
from lite_launcher.vision.losses import maskrcnn_losses
from lite_launcher.vision.modeling import maskrcnn_model
from lite_launcher.vision.tasks import detection

LOSS_NAMES = ("total_loss", "rpn_score_loss", "rpn_box_loss", "frcnn_cls_loss",
              "frcnn_box_loss", "mask_loss", "model_loss")
# The model's inference outputs the COCO evaluator reads, when the model returns them.
_PREDICTION_KEYS = detection.DETECTION_KEYS + ("detection_outer_boxes", "detection_masks")


def refuse_records_without_masks(path: str) -> None:
    """`ConfigError` (one line) when the first record of TFRecord file `path` has boxes but no
    `image/object/mask`: records converted without masks, refused before anything is traced
    (TFM fails inside its parser). The decoder still checks every record's mask count."""
    for serialized in tf.data.TFRecordDataset(path).take(1):
        feature = tf.train.Example.FromString(serialized.numpy()).features.feature
        has_boxes = ("image/object/bbox/ymin" in feature
                     and len(feature["image/object/bbox/ymin"].float_list.value) > 0)
        if has_boxes and "image/object/mask" not in feature:
            raise ConfigError(
                f"task.model.include_mask is true but the first record of {path} has boxes "
                f"and no image/object/mask: write the masks (create_coco_tf_record "
                f"--include_masks) or train boxes only (task.model.include_mask: false).")


@register_task_cls(maskrcnn_configs.MaskRCNNTask)
class MaskRCNNTask(detection.DetectionTask):
    """Detects (and with `model.include_mask` segments) objects in TFM's detection records."""

    def build_model(self) -> keras.Model:
        """TFM's Mask R-CNN of `task.model`, L2 of `losses.l2_weight_decay` / 2 on kernels;
        built (every weight created)."""
        config = self.task_config
        maskrcnn_configs.check_buildable(config)
        model = maskrcnn_model.build_maskrcnn(config.model, config.losses.l2_weight_decay)
        if config.freeze_backbone:
            model.backbone.trainable = False
        return model

    def build_inputs(self, params, input_context: Optional[tf.distribute.InputContext] = None):
        """TFM's detection records (with masks when `model.include_mask`), parsed for
        training or evaluation by `params`."""
        maskrcnn_configs.check_buildable(self.task_config)
        model = self.task_config.model
        parser_config = params.parser
        parser = maskrcnn_input.Parser(
            output_size=model.input_size[:2], min_level=model.min_level,
            max_level=model.max_level, num_scales=model.anchor.num_scales,
            aspect_ratios=model.anchor.aspect_ratios, anchor_size=model.anchor.anchor_size,
            rpn_match_threshold=parser_config.rpn_match_threshold,
            rpn_unmatched_threshold=parser_config.rpn_unmatched_threshold,
            rpn_batch_size_per_im=parser_config.rpn_batch_size_per_im,
            rpn_fg_fraction=parser_config.rpn_fg_fraction,
            aug_rand_hflip=parser_config.aug_rand_hflip,
            aug_rand_vflip=parser_config.aug_rand_vflip,
            aug_scale_min=parser_config.aug_scale_min,
            aug_scale_max=parser_config.aug_scale_max, aug_type=parser_config.aug_type,
            skip_crowd_during_training=parser_config.skip_crowd_during_training,
            max_num_instances=parser_config.max_num_instances,
            include_mask=model.include_mask, outer_boxes_scale=model.outer_boxes_scale,
            mask_crop_size=parser_config.mask_crop_size, dtype=params.dtype,
            num_classes=model.num_classes)
        decoder = detection.build_decoder(params, include_mask=model.include_mask)
        reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type),
                             decoder_fn=decoder.decode,
                             parser_fn=parser.parse_fn(params.is_training))
        if model.include_mask and params.file_type == "tfrecord" and reader.files:
            refuse_records_without_masks(reader.files[0])
        return reader.read(input_context)

    # ----- loss and metrics ------------------------------------------------------------

    def all_losses(self, labels, model_outputs, aux_losses=None) -> dict:
        """TFM's seven losses (`LOSS_NAMES`) of one replica's training batch."""
        config = self.task_config
        losses = config.losses
        return maskrcnn_losses.maskrcnn_losses(
            detection.float32(model_outputs), labels, include_mask=config.model.include_mask,
            cascade_iou_thresholds=config.model.roi_sampler.cascade_iou_thresholds,
            class_agnostic_bbox_pred=config.model.detection_head.class_agnostic_bbox_pred,
            loss_weight=losses.loss_weight, rpn_huber_loss_delta=losses.rpn_huber_loss_delta,
            frcnn_huber_loss_delta=losses.frcnn_huber_loss_delta,
            frcnn_class_use_binary_cross_entropy=losses.frcnn_class_use_binary_cross_entropy,
            frcnn_class_loss_top_k_percent=losses.frcnn_class_loss_top_k_percent,
            rpn_score_weight=losses.rpn_score_weight, rpn_box_weight=losses.rpn_box_weight,
            frcnn_class_weight=losses.frcnn_class_weight,
            frcnn_box_weight=losses.frcnn_box_weight, mask_weight=losses.mask_weight,
            class_weights=losses.class_weights,
            allowed_mask_class_ids=config.allowed_mask_class_ids,
            aux_losses=[tf.cast(l, tf.float32) for l in aux_losses or []])

    def build_metrics(self, training: bool = True) -> List[keras.metrics.Metric]:
        """Training: means of `LOSS_NAMES`. Evaluation: none on the device; the COCO
        evaluator (`coco_metric`) when `use_coco_metrics` (refused in one line without
        pycocotools)."""
        if training:
            return [keras.metrics.Mean(name, dtype=tf.float32) for name in LOSS_NAMES]
        if self.task_config.use_coco_metrics:
            self.coco_metric = coco_evaluator.COCOEvaluator(
                annotation_file=self._annotation_file(),
                include_mask=self.task_config.model.include_mask,
                per_category_metrics=self.task_config.per_category_metrics)
        return []

    def _annotation_file(self) -> Optional[str]:
        """`annotation_file`, or with masks and none given `annotation.json` in the logging
        directory, written from the validation records unless it exists (TFM's)."""
        config = self.task_config
        if not config.model.include_mask or config.annotation_file:
            return config.annotation_file
        path = os.path.join(self.logging_dir, "annotation.json")
        if tf.io.gfile.exists(path):
            logging.info("Reading the COCO ground truths of %s (it exists).", path)
            return path
        data = config.validation_data
        logging.info("Writing the COCO ground truths of %s to %s.", data.input_path, path)
        if self.logging_dir:  # the metrics are built before model_dir's first file
            tf.io.gfile.makedirs(self.logging_dir)
        coco_groundtruth_generator.scan_and_generator_annotation_file(
            data.input_path, data.file_type, data.num_examples, True, path,
            regenerate_source_id=data.decoder.get().regenerate_source_id)
        return path

    def compute_gradients(self, inputs, model: keras.Model, optimizer):
        """TFM's training forward pass (ground truths in, sampled ROIs and their targets
        out), the seven losses and the gradients of the total; the outputs returned for the
        metrics carry the losses under 'losses'."""
        images, labels = _split_inputs(inputs)
        model_config = self.task_config.model
        kwargs = dict(image_shape=labels["image_info"][:, 1, :],
                      anchor_boxes=labels["anchor_boxes"], gt_boxes=labels["gt_boxes"],
                      gt_classes=labels["gt_classes"])
        if model_config.include_mask:
            kwargs["gt_masks"] = labels["gt_masks"]
            if model_config.outer_boxes_scale > 1.0:
                kwargs["gt_outer_boxes"] = labels["gt_outer_boxes"]
        return self.loss_gradients(model, optimizer, labels,
                                   lambda: model(images, training=True, **kwargs))

    # ----- evaluation ------------------------------------------------------------------

    def validation_step(self, inputs, model: keras.Model, metrics=None):
        """Detections (and masks) for COCO on the parser's anchors; the loss is 0 (TFM's)."""
        del metrics  # none on the device in evaluation
        images, labels = _split_inputs(inputs)
        outputs = self.inference_step_with_anchors(images, model, labels["anchor_boxes"],
                                                   labels["image_info"][:, 1, :])
        logs = {self.loss: tf.constant(0.0, tf.float32)}
        if self.coco_metric is not None:
            predictions = {key: outputs[key] for key in _PREDICTION_KEYS if key in outputs}
            predictions["source_id"] = labels["groundtruths"]["source_id"]
            predictions["image_info"] = labels["image_info"]
            logs[self.coco_metric.name] = (labels["groundtruths"], predictions)
        return logs
