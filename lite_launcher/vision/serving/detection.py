"""Serving signatures of object detection (TFM's official/vision/serving/detection.py).

`lite-export --input_type` for a RetinaNet or Mask R-CNN task (the inputs and their
host-side decoding are `export_base.ExportModule`'s):

| input_type | `inputs` | preprocessing in the SavedModel |
|---|---|---|
| `image_tensor` | uint8 [batch, height, width, 3], decoded images of any size | normalise, resize (aspect kept as `parser.keep_aspect_ratio`) into `input_image_size`, zero-pad to a multiple of 2**max_level |
| `image_bytes` | string [batch], encoded images (JPEG, PNG, ...) | decode, then as `image_tensor` |
| `tf_example` | string [batch], serialized `tf.train.Example`s with `image/encoded` | parse, then as `image_bytes` |
| `tflite` | float32 [batch, h, w, 3], images already preprocessed at the padded size | none |

Outputs, as TFM's: `detection_boxes` [batch, D, 4] (ymin, xmin, ymax, xmax in pixels of the
resized image, i.e. original pixels times `image_info[:, 2]`, as TFM serves them; in [0, 1] of
the original image with `task.export_config.output_normalized_coordinates`),
`detection_scores` [batch, D], `detection_classes` [batch, D] (int32, 1-based; float32 with
`cast_detection_classes_to_float`), `num_detections` [batch] (int32; float32 with
`cast_num_detections_to_float`) and `image_info` [batch, 4, 2] (original size, resized size,
scale, offset). With `detection_generator.apply_nms: false`: `decoded_boxes` and
`decoded_box_scores` instead of the four detection outputs.

Mask R-CNN adds, as TFM's: `detection_masks` [batch, D, S, S] (each detection's mask
probabilities in its box, S = mask_roi_aligner.crop_size * mask_head.upsample_factor) and
with `outer_boxes_scale` > 1 `detection_outer_boxes` (the boxes the masks fill). Two-stage
configs have no `export_config` (TFM applies none to them).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.vision.ops import anchor, box_ops
from lite_launcher.vision.ops.preprocess_ops import (compute_padded_size, normalize_image,
                                                     resize_and_crop_image)
from lite_launcher.vision.serving import export_base

INPUT_TYPES = export_base.INPUT_TYPES
# The NMS outputs served; `detection_outer_boxes` where the model has outer boxes (Mask R-CNN
# with outer_boxes_scale > 1).
_BOX_KEYS = ("detection_boxes", "detection_scores", "detection_classes", "num_detections",
             "detection_outer_boxes")
# ExportConfig's defaults: outputs as the model gives them.
_UNCHANGED = SimpleNamespace(output_normalized_coordinates=False,
                             cast_num_detections_to_float=False,
                             cast_detection_classes_to_float=False)


class DetectionModule(export_base.ExportModule):
    """TFM's DetectionModule for RetinaNet and Mask R-CNN: the evaluation parser's
    normalisation, resize and padding; TFM's detection outputs (and masks) and
    `image_info`."""

    family = "object detection"
    size_example = "640,640"

    def __init__(self, task, model: keras.Model, input_type: str, batch_size=None,
                 input_image_size=None):
        super().__init__(task, model, input_type, batch_size, input_image_size)
        model_config = self.config.model
        self.padded_size = (compute_padded_size(self.size, 2 ** model_config.max_level)
                            if self.config.train_data.parser.pad else list(self.size))
        self.anchor_boxes = anchor.build_anchor_generator(
            min_level=model_config.min_level, max_level=model_config.max_level,
            num_scales=model_config.anchor.num_scales,
            aspect_ratios=model_config.anchor.aspect_ratios,
            anchor_size=model_config.anchor.anchor_size)

    def preprocess(self, image):
        """uint8 [h, w, 3] -> (normalised float32 image at `padded_size`, image_info [4, 2])."""
        # TFM's serving normalises the image as float in 0..255.
        image = normalize_image(tf.cast(image, tf.float32))
        return resize_and_crop_image(
            image, self.size, self.padded_size,
            keep_aspect_ratio=self.config.train_data.parser.keep_aspect_ratio)

    def preprocessed_signature(self):
        return (tf.TensorSpec(self.padded_size + [3], tf.float32),
                tf.TensorSpec([4, 2], tf.float32))

    def input_spec(self) -> tf.TensorSpec:
        if self.input_type == "tflite":
            return tf.TensorSpec([self.batch_size] + self.padded_size + [3], tf.float32,
                                 name="inputs")
        return super().input_spec()

    def _normalized(self, boxes, image_info):
        """Boxes of the resized image -> [0, 1] of the original image."""
        boxes = boxes / tf.tile(image_info[:, 2:3, :], [1, 1, 2])
        return tf.clip_by_value(box_ops.normalize_boxes(boxes, image_info[:, 0:1, :]), 0.0,
                                1.0)

    def outputs(self, images, preprocessed_extras) -> dict:
        batch = tf.shape(images)[0]
        if preprocessed_extras:
            image_info = preprocessed_extras[0]
        else:  # tflite: the images are the model's input already
            size = tf.constant(self.size, tf.float32)
            image_info = tf.tile(tf.stack([size, size, [1.0, 1.0], [0.0, 0.0]])[None],
                                 [batch, 1, 1])
        anchors = {level: tf.tile(boxes[None], [batch, 1, 1, 1])
                   for level, boxes in self.anchor_boxes(self.padded_size).items()}
        detections = self.task.inference_step_with_anchors(images, self.model, anchors,
                                                           image_info[:, 1, :])
        # Two-stage configs have no export_config: TFM serves their outputs unchanged.
        export_config = getattr(self.config, "export_config", None) or _UNCHANGED
        if self.config.model.detection_generator.apply_nms:
            result = {key: detections[key] for key in _BOX_KEYS if key in detections}
            if export_config.output_normalized_coordinates:
                for key in ("detection_boxes", "detection_outer_boxes"):
                    if key in result:
                        result[key] = self._normalized(result[key], image_info)
            if export_config.cast_num_detections_to_float:
                result["num_detections"] = tf.cast(result["num_detections"], tf.float32)
            if export_config.cast_detection_classes_to_float:
                result["detection_classes"] = tf.cast(result["detection_classes"], tf.float32)
        else:
            result = {"decoded_boxes": detections["decoded_boxes"],
                      "decoded_box_scores": detections["decoded_box_scores"]}
            if export_config.output_normalized_coordinates:
                result["decoded_boxes"] = self._normalized(result["decoded_boxes"][:, :, 0],
                                                           image_info)[:, :, None]
        if "detection_masks" in detections:
            result["detection_masks"] = detections["detection_masks"]
        result["image_info"] = image_info
        return result


def build_serving_fn(task, model: keras.Model, input_type: str, batch_size: Optional[int] = None,
                     input_image_size: Optional[Sequence[int]] = None):
    """`(fn, input_spec)` of `input_type` for a RetinaNet or Mask R-CNN `task` (see the
    module docstring)."""
    return DetectionModule(task, model, input_type, batch_size, input_image_size).serving_fn()
