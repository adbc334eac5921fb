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

pycocotools is the `[detection]` extra: without it the evaluator is refused in one line
naming `pip install 'lite_launcher[detection]'` when the trainer builds the metrics, before the
first training step.
"""

from __future__ import annotations

from typing import List, Optional

import keras
import tensorflow as tf

from lite_launcher.base_config import ConfigError
from lite_launcher.input_reader import InputReader, pick_dataset_fn
from lite_launcher.registry import register_task_cls
from lite_launcher.task import Task, _split_inputs, is_loss_scale_optimizer
from lite_launcher.vision.configs import retinanet as retinanet_configs
from lite_launcher.vision.dataloaders import retinanet_input, tf_example_decoder
from lite_launcher.vision.dataloaders import tf_example_label_map_decoder
from lite_launcher.vision.evaluation import coco_evaluator
from lite_launcher.vision.losses import retinanet_losses
from lite_launcher.vision.modeling import retinanet_model
from lite_launcher.vision.serving import detection as detection_serving
from lite_launcher.vision.tasks import common

LOSS_NAMES = ("total_loss", "cls_loss", "box_loss", "model_loss")
# The fields of the model's outputs the COCO evaluator reads.
DETECTION_KEYS = ("detection_boxes", "detection_scores", "detection_classes", "num_detections")


def float32(outputs):
    """`outputs` (any nest of tensors) cast to float32, as the losses read them."""
    return tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), outputs)


def build_decoder(params, include_mask: bool = False):
    """The record decoder of a detection DataConfig (`decoder.type`: simple or label map);
    with `include_mask` it also decodes the instance masks (Mask R-CNN), binarised at
    `mask_binarize_threshold` when that is set."""
    decoder_type = params.decoder.type
    decoder_config = params.decoder.get()
    masks = dict(include_mask=include_mask,
                 mask_binarize_threshold=decoder_config.mask_binarize_threshold)
    if decoder_type == "simple_decoder":
        return tf_example_decoder.TfExampleDecoder(
            regenerate_source_id=decoder_config.regenerate_source_id,
            attribute_names=getattr(decoder_config, "attribute_names", None), **masks)
    if decoder_type == "label_map_decoder":
        return tf_example_label_map_decoder.TfExampleDecoderLabelMap(
            label_map=decoder_config.label_map,
            regenerate_source_id=decoder_config.regenerate_source_id, **masks)
    raise ConfigError(f"decoder.type {decoder_type!r} must be 'simple_decoder' or "
                      f"'label_map_decoder'.")


@register_task_cls(retinanet_configs.RetinaNetTask)
class RetinaNetTask(Task):
    """Detects objects in images read from TFM's detection TFRecords."""

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None):
        super().__init__(params, logging_dir=logging_dir, name=name)
        self.coco_metric = None

    def build_model(self) -> keras.Model:
        config = self.task_config
        retinanet_configs.check_buildable(config)
        model = retinanet_model.build_retinanet(config.model, config.losses.l2_weight_decay)
        if config.freeze_backbone:
            model.backbone.trainable = False
        return model

    def initialize(self, model: keras.Model) -> None:
        """Restores `init_checkpoint` (`common.restore_init_checkpoint`, as TFM's)."""
        common.restore_init_checkpoint(model, self.task_config)

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

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        """The total loss: loss_weight * (focal + box_loss_weight * Huber (+ attribute
        losses) + L2)."""
        return self.all_losses(labels, model_outputs, aux_losses)["total_loss"]

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

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        """Adds this step's losses (`model_outputs['losses']`) to the loss means."""
        for metric in metrics:
            if metric.name in model_outputs.get("losses", {}):
                metric.update_state(model_outputs["losses"][metric.name])

    def compute_gradients(self, inputs, model: keras.Model, optimizer):
        """As `Task.compute_gradients`; the outputs returned for the metrics carry the four
        losses under 'losses'."""
        features, labels = _split_inputs(inputs)
        return self.loss_gradients(model, optimizer, labels,
                                   lambda: model(features, training=True))

    def loss_gradients(self, model: keras.Model, optimizer, labels, forward):
        """Gradients of `all_losses` on `forward()`'s outputs (the replica-scaled, loss-scaled
        total), the total loss and {'losses': every loss}: the detection tasks' gradient step."""
        with tf.GradientTape() as tape:
            outputs = forward()
            losses = self.all_losses(labels, outputs, aux_losses=model.losses)
            loss = losses["total_loss"]
            num_replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scaled_loss = loss / num_replicas if num_replicas > 1 else loss
            if is_loss_scale_optimizer(optimizer):
                scaled_loss = optimizer.scale_loss(scaled_loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        return grads, loss, {"losses": losses}

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

    def aggregate_logs(self, state=None, step_outputs=None):
        """Adds one step's detections and ground truths to the COCO evaluator (reset at the
        first step of an evaluation)."""
        if self.coco_metric is not None:
            if state is None:
                self.coco_metric.reset_states()
            groundtruths, detections = step_outputs[self.coco_metric.name]
            self.coco_metric.update_state(groundtruths, detections)
        return True if state is None else state

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        """The COCO numbers of this evaluation."""
        del aggregated_logs, global_step
        if self.coco_metric is None:
            return {}
        return {key: float(value) for key, value in self.coco_metric.result().items()}

    def inference_step_with_anchors(self, images, model: keras.Model, anchor_boxes,
                                    image_shape):
        """Detections of a batch of parsed images with the parser's (or serving's) anchors
        (dict `str(level)` -> [B, h_l, w_l, A * 4]); boxes are clipped to `image_shape`
        ([B, 2], the resized image's size)."""
        return model(images, anchor_boxes=anchor_boxes, image_shape=image_shape,
                     training=False)

    # ----- export ----------------------------------------------------------------------

    serving_input_types = detection_serving.INPUT_TYPES

    def build_serving_fn(self, model: keras.Model, input_type: str, batch_size=None,
                         input_image_size=None):
        """`inputs` (image_tensor, image_bytes, tf_example, tflite) -> TFM's detection
        outputs (see `serving.detection`)."""
        return detection_serving.build_serving_fn(self, model, input_type, batch_size,
                                                  input_image_size)
