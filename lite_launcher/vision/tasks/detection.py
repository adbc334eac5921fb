"""The base of the detection tasks (RetinaNet's, and Faster / Mask / Cascade R-CNN's): what
TFM's `tasks/retinanet.py` and `tasks/maskrcnn.py` both do, in one place, so that neither task
stands on the other.

Shared: `init_checkpoint` (`common.restore_init_checkpoint`: 'all', 'backbone', 'decoder'), the
record decoders (`build_decoder`: TFM's simple and label-map decoders, with masks for Mask
R-CNN), the total loss from a task's `all_losses`, the gradient step on it (replica- and
loss-scaled), the loss means, the host-side COCO aggregation (`aggregate_logs` /
`reduce_aggregated_logs` over the evaluator a task's `build_metrics` makes) and the serving
signatures (`serving.detection`). Each task builds its model, inputs, losses and metrics.
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.core.base_task import Task, is_loss_scale_optimizer
from lite_launcher.vision.dataloaders import tf_example_decoder, tf_example_label_map_decoder
from lite_launcher.vision.serving import detection as detection_serving
from lite_launcher.vision.tasks import common

# The fields of a model's detections the COCO evaluator reads.
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


class DetectionTask(Task):
    """A task that detects objects: the parts RetinaNet's and the two-stage tasks share.

    A subclass builds the model, the inputs, `all_losses` (a dict with `total_loss`) and the
    metrics (setting `coco_metric` for an evaluation with COCO numbers)."""

    def __init__(self, params, logging_dir: Optional[str] = None, name: Optional[str] = None):
        super().__init__(params, logging_dir=logging_dir, name=name)
        self.coco_metric = None

    def initialize(self, model: keras.Model) -> None:
        """Restores `init_checkpoint` (`common.restore_init_checkpoint`, as TFM's)."""
        common.restore_init_checkpoint(model, self.task_config)

    def build_losses(self, labels, model_outputs, aux_losses=None) -> tf.Tensor:
        """The total loss (`all_losses(...)['total_loss']`)."""
        return self.all_losses(labels, model_outputs, aux_losses)["total_loss"]

    def process_metrics(self, metrics, labels, model_outputs, **kwargs):
        """Adds this step's losses (`model_outputs['losses']`) to the loss means."""
        for metric in metrics:
            if metric.name in model_outputs.get("losses", {}):
                metric.update_state(model_outputs["losses"][metric.name])

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
