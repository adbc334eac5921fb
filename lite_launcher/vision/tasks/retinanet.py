"""The RetinaNet task (TFM's official/vision/tasks/retinanet.py).

It wires the pieces: the model (`retinanet_model.build_retinanet`: backbone -> decoder -> dense
prediction head -> detection generator), the input (`tf_example_decoder` or its label-map
variant, then `retinanet_input.Parser`), the loss (`retinanet_losses`: focal + Huber box loss,
plus the model's L2) and the COCO evaluator (`coco_evaluator`, through pycocotools).

Metrics, as TFM's: `total_loss`, `cls_loss`, `box_loss`, `model_loss` (means over the steps),
in training and evaluation. Evaluation: each step hands its detections and ground truths to
the host (`coco_metric` in the step's logs); `aggregate_logs` adds them to the evaluator and
`reduce_aggregated_logs` reports its 12 numbers (`AP`, `AP50`, `AP75`, `APs`, `APm`, `APl`,
`ARmax1`, `ARmax10`, `ARmax100`, `ARs`, `ARm`, `ARl`; per category with
`per_category_metrics`), which `best_checkpoint_eval_metric: AP` can rank. That needs the
Python eval loop (`trainer.eval_tf_while_loop: false`, the default), as in TFM.

The parts shared with the two-stage tasks (init_checkpoint, decoders, the gradient step, the
COCO aggregation, serving) are `tasks.detection.DetectionTask`'s.

pycocotools is the `[detection]` extra: without it the evaluator is refused in one line
naming `pip install 'lite_launcher[detection]'` when the trainer builds the metrics, before the
first training step.
"""

from __future__ import annotations

from typing import List, Optional

import keras
import tensorflow as tf

from lite_launcher.core.base_task import _split_inputs
from lite_launcher.core.input_reader import InputReader, pick_dataset_fn
from lite_launcher.core.registry import register_task_cls
from lite_launcher.vision.configs import retinanet as retinanet_configs
from lite_launcher.vision.dataloaders import retinanet_input
from lite_launcher.vision.evaluation import coco_evaluator
from lite_launcher.vision.losses import retinanet_losses
from lite_launcher.vision.modeling import retinanet_model
from lite_launcher.vision.tasks import detection
from lite_launcher.vision.tasks.detection import DETECTION_KEYS, build_decoder, float32

LOSS_NAMES = ("total_loss", "cls_loss", "box_loss", "model_loss")


@register_task_cls(retinanet_configs.RetinaNetTask)
class RetinaNetTask(detection.DetectionTask):
    """Detects objects in images read from TFM's detection TFRecords."""

    def build_model(self) -> keras.Model:
        config = self.task_config
        retinanet_configs.check_buildable(config)
        model = retinanet_model.build_retinanet(config.model, config.losses.l2_weight_decay)
        if config.freeze_backbone:
            model.backbone.trainable = False
        return model

    def build_inputs(self, params, input_context: Optional[tf.distribute.InputContext] = None):
        """TFM's detection records, parsed for training or evaluation by `params`."""
        retinanet_configs.check_buildable(self.task_config)
        model = self.task_config.model
        parser_config = params.parser
        parser = retinanet_input.Parser(
            output_size=model.input_size[:2], min_level=model.min_level,
            max_level=model.max_level, num_scales=model.anchor.num_scales,
            aspect_ratios=model.anchor.aspect_ratios, anchor_size=model.anchor.anchor_size,
            dtype=params.dtype, match_threshold=parser_config.match_threshold,
            unmatched_threshold=parser_config.unmatched_threshold,
            box_coder_weights=model.detection_generator.box_coder_weights,
            aug_type=parser_config.aug_type, aug_rand_hflip=parser_config.aug_rand_hflip,
            aug_rand_jpeg=getattr(parser_config, "aug_rand_jpeg", None),
            aug_scale_min=parser_config.aug_scale_min,
            aug_scale_max=parser_config.aug_scale_max,
            skip_crowd_during_training=parser_config.skip_crowd_during_training,
            max_num_instances=parser_config.max_num_instances, pad=parser_config.pad,
            keep_aspect_ratio=parser_config.keep_aspect_ratio, num_classes=model.num_classes)
        reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type),
                             decoder_fn=build_decoder(params).decode,
                             parser_fn=parser.parse_fn(params.is_training))
        return reader.read(input_context)

    # ----- loss and metrics ------------------------------------------------------------

    def all_losses(self, labels, model_outputs, aux_losses=None) -> dict:
        """TFM's four losses (`LOSS_NAMES`) of one replica's batch."""
        config = self.task_config
        losses = config.losses
        heads = [retinanet_losses.AttributeHead(h.name, h.type, h.size)
                 for h in config.model.head.attribute_heads]
        return retinanet_losses.retinanet_losses(
            float32(model_outputs), labels, num_classes=config.model.num_classes,
            focal_loss_alpha=losses.focal_loss_alpha, focal_loss_gamma=losses.focal_loss_gamma,
            huber_loss_delta=losses.huber_loss_delta, box_loss_weight=losses.box_loss_weight,
            loss_weight=losses.loss_weight,
            aux_losses=[tf.cast(l, tf.float32) for l in aux_losses or []],
            attribute_heads=heads)

    def build_metrics(self, training: bool = True) -> List[keras.metrics.Metric]:
        """Means of `LOSS_NAMES`; for evaluation also the COCO evaluator (`coco_metric`,
        refused in one line without pycocotools)."""
        metrics = [keras.metrics.Mean(name, dtype=tf.float32) for name in LOSS_NAMES]
        config = self.task_config
        if not training and config.use_coco_metrics:
            self.coco_metric = coco_evaluator.COCOEvaluator(
                annotation_file=config.annotation_file, include_mask=False,
                per_category_metrics=config.per_category_metrics,
                max_num_eval_detections=config.max_num_eval_detections)
        return metrics

    def compute_gradients(self, inputs, model: keras.Model, optimizer):
        """As `Task.compute_gradients`; the outputs returned for the metrics carry the four
        losses under 'losses'."""
        features, labels = _split_inputs(inputs)
        return self.loss_gradients(model, optimizer, labels,
                                   lambda: model(features, training=True))

    # ----- evaluation ------------------------------------------------------------------

    def validation_step(self, inputs, model: keras.Model, metrics=None):
        """Losses on the parser's anchors and the detections for COCO (TFM's)."""
        features, labels = _split_inputs(inputs)
        outputs = self.inference_step_with_anchors(features, model, labels["anchor_boxes"],
                                                   labels["image_info"][:, 1, :])
        losses = self.all_losses(labels, outputs, aux_losses=model.losses)
        logs = {self.loss: losses["total_loss"]}
        if self.coco_metric is not None:
            detections = {key: outputs[key] for key in DETECTION_KEYS}
            detections["source_id"] = labels["groundtruths"]["source_id"]
            detections["image_info"] = labels["image_info"]
            logs[self.coco_metric.name] = (labels["groundtruths"], detections)
        if metrics:
            self.process_metrics(metrics, labels, {"losses": losses})
        return logs
