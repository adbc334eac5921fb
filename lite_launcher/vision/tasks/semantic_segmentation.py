"""The semantic segmentation task (TFM's official/vision/tasks/semantic_segmentation.py).

It wires the pieces: the model (`modeling.segmentation_model`: backbone -> decoder -> head),
the input (`segmentation_input`: TFM's TFRecord format and parser), the loss
(`segmentation_losses`), the train `mean_iou` (`segmentation_metrics.MeanIoU`) and the
evaluation's per-class IoU.

Evaluation: each step adds its batch to one `PerClassIoU` confusion matrix (variables summed
over replicas); `aggregate_logs` / `reduce_aggregated_logs` turn it into `iou/<class>` and
`mean_iou` at the end of the evaluation, which the best-checkpoint exporter can then rank.
Where TFM differs: TFM resets that metric in `aggregate_logs` after the first eval step has
already been added, so its IoUs leave each evaluation's first batch out; lite resets it after
reading it, so every batch counts. With `resize_eval_groundtruth: false` the masks keep their
original size: the IoU rescales the predictions to them, and no validation loss is reported
(TFM reports 0). The per-class IoU needs the Python eval loop (`trainer.eval_tf_while_loop:
false`, the default), as in TFM.
"""

from __future__ import annotations

from typing import List, Optional

import keras
import numpy as np
import tensorflow as tf

from lite_launcher.core.base_task import Task, _split_inputs
from lite_launcher.core.registry import register_task_cls
from lite_launcher.vision.configs import semantic_segmentation as segmentation_configs
from lite_launcher.vision.dataloaders import segmentation_input
from lite_launcher.vision.evaluation import segmentation_metrics
from lite_launcher.vision.losses import segmentation_losses
from lite_launcher.vision.modeling import segmentation_model
from lite_launcher.vision.serving import semantic_segmentation as segmentation_serving
from lite_launcher.vision.tasks import common


def _float32_outputs(model_outputs) -> dict:
    """The model's outputs as {'logits': float32} (a bare tensor is the logits, as TFM)."""
    if not isinstance(model_outputs, dict):
        model_outputs = {"logits": model_outputs}
    return {k: tf.cast(v, tf.float32) for k, v in model_outputs.items()}


@register_task_cls(segmentation_configs.SemanticSegmentationTask)
class SemanticSegmentationTask(Task):
    """Labels every pixel of images read from TFM's segmentation TFRecords."""

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None):
        super().__init__(params, logging_dir=logging_dir, name=name)
        self.iou_metric = None

    def build_model(self) -> keras.Model:
        config = self.task_config
        segmentation_configs.check_buildable(config)
        model = segmentation_model.build_segmentation_model(
            config.model, config.losses.l2_weight_decay)
        if config.freeze_backbone:  # newer TFM's field: Keras then runs its BatchNorm frozen
            model.backbone.trainable = False
        return model

    def initialize(self, model: keras.Model) -> None:
        """Restores `init_checkpoint` (`common.restore_init_checkpoint`, as TFM's)."""
        common.restore_init_checkpoint(model, self.task_config)

    def build_inputs(self, params, input_context: Optional[tf.distribute.InputContext] = None):
        """TFM's segmentation records, parsed for training or evaluation by `params`."""
        return segmentation_input.build_dataset(params, self.task_config, input_context)

    # ----- loss and metrics ------------------------------------------------------------

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        """TFM's segmentation loss of the logits against `labels['masks']`, plus
        `aux_losses` (L2), times `loss_weight`."""
        losses = self.task_config.losses
        loss_fn = segmentation_losses.SegmentationLoss(
            losses.label_smoothing, losses.class_weights, losses.ignore_label,
            use_groundtruth_dimension=losses.use_groundtruth_dimension,
            use_binary_cross_entropy=losses.use_binary_cross_entropy,
            top_k_percent_pixels=losses.top_k_percent_pixels,
            gt_is_matting_map=losses.gt_is_matting_map)
        total = tf.cast(loss_fn(_float32_outputs(model_outputs)["logits"], labels["masks"]),
                        tf.float32)
        if aux_losses:
            total += tf.add_n([tf.cast(l, tf.float32) for l in aux_losses])
        return losses.loss_weight * total

    def build_metrics(self, training: bool = True) -> List[keras.metrics.Metric]:
        """Training: `mean_iou` (with `report_train_mean_iou`). Evaluation: none in the list;
        the per-class IoU is kept as `self.iou_metric` and reported by
        `reduce_aggregated_logs`."""
        config = self.task_config
        num_classes = config.model.num_classes
        if training:
            if not config.evaluation.report_train_mean_iou:
                return []
            return [segmentation_metrics.MeanIoU(num_classes=num_classes,
                                                 rescale_predictions=False, name="mean_iou",
                                                 dtype=tf.float32)]
        self.iou_metric = segmentation_metrics.PerClassIoU(
            num_classes=num_classes,
            rescale_predictions=not config.validation_data.resize_eval_groundtruth,
            name="per_class_iou", dtype=tf.float32)
        return []

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        logits = _float32_outputs(model_outputs)["logits"]
        for metric in metrics:
            metric.update_state(labels, logits)

    # ----- evaluation ------------------------------------------------------------------

    def validation_step(self, inputs, model: keras.Model, metrics=None):
        features, labels = _split_inputs(inputs)
        outputs = _float32_outputs(self.inference_step(features, model))
        logs = {}
        if self.task_config.validation_data.resize_eval_groundtruth:
            logs[self.loss] = self.build_losses(labels, outputs, aux_losses=model.losses)
        if self.iou_metric is not None:
            self.iou_metric.update_state(labels, outputs["logits"])
        if metrics:
            self.process_metrics(metrics, labels, outputs)
        return logs

    def aggregate_logs(self, state=None, step_outputs=None):
        """The IoU lives in `iou_metric`; the state only marks that steps ran."""
        del step_outputs
        return True if state is None else state

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        """`iou/<class>` (with `report_per_class_iou`) and `mean_iou` of this evaluation; the
        metric is then reset for the next one."""
        del aggregated_logs, global_step
        if self.iou_metric is None:
            return {}
        ious = np.asarray(self.iou_metric.result(), dtype=np.float32)
        self.iou_metric.reset_state()
        logs = {}
        if self.task_config.evaluation.report_per_class_iou:
            logs.update({f"iou/{i}": float(v) for i, v in enumerate(ious)})
        logs["mean_iou"] = float(np.mean(ious))
        return logs

    # ----- export ----------------------------------------------------------------------

    serving_input_types = segmentation_serving.INPUT_TYPES

    def build_serving_fn(self, model: keras.Model, input_type: str, batch_size=None,
                         input_image_size=None):
        """`inputs` (image_tensor, image_bytes, tf_example, tflite) -> `logits` (resized to
        the served size, or to the image with `export_config.rescale_output`),
        `predicted_mask` and `image_info` (TFM's SegmentationModule)."""
        return segmentation_serving.build_serving_fn(self, model, input_type, batch_size,
                                                     input_image_size)
