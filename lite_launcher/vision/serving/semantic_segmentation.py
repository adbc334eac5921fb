"""Serving signatures of semantic segmentation (TFM's official/vision/serving/semantic_segmentation.py).

`lite-export --input_type` for a segmentation task (the inputs and their host-side decoding
are `export_base.ExportModule`'s):

| input_type | `inputs` | preprocessing in the SavedModel |
|---|---|---|
| `image_tensor` | uint8 [batch, height, width, 3], decoded images of any size | normalise, resize (aspect kept, zero-padded) to `input_image_size` |
| `image_bytes` | string [batch], encoded images (JPEG, PNG, ...) | decode, then as `image_tensor` |
| `tf_example` | string [batch], serialized `tf.train.Example`s with `image/encoded` | parse, then as `image_bytes` |
| `tflite` | float32 [batch, h, w, 3], images already preprocessed | none |

Outputs (float32 unless said): `logits` [batch, h, w, classes] resized bilinearly to
`input_image_size`, or, with `task.export_config.rescale_output` (batch size 1, as TFM), to the
served image's own size; `predicted_mask` (int32 [batch, h, w], the argmax of `logits`, lite's
addition) and, except for `tflite`, `image_info` [batch, 4, 2] (TFM's: original size, scaled
size, scale, offset). The normalisation and resize are the evaluation parser's
(`segmentation_input`, `train_data.image_feature`'s mean and stddev).
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.ops.preprocess_ops import normalize_image, resize_and_crop_image
from lite_launcher.vision.serving import export_base

INPUT_TYPES = export_base.INPUT_TYPES


class SegmentationModule(export_base.ExportModule):
    """TFM's SegmentationModule: the evaluation parser's normalisation and resize; `logits`,
    `predicted_mask`, `image_info`."""

    family = "semantic segmentation"
    size_example = "512,512"

    def __init__(self, task, model: keras.Model, input_type: str, batch_size=None,
                 input_image_size=None):
        super().__init__(task, model, input_type, batch_size, input_image_size)
        self.rescale = self.config.export_config.rescale_output
        if self.rescale and batch_size != 1:
            raise ConfigError("task.export_config.rescale_output resizes each image's logits "
                              "to its own size: export with --batch_size 1 (as TFM).")
        self.feature = self.config.train_data.image_feature
        self.preserve_aspect_ratio = self.config.train_data.preserve_aspect_ratio

    @property
    def channels(self) -> int:
        return self.feature.num_channels

    @property
    def image_key(self) -> str:
        return self.feature.feature_name

    def preprocess(self, image):
        """uint8 [h, w, c] -> (normalised float32 image at `size`, image_info [4, 2])."""
        image = normalize_image(image, self.feature.mean, self.feature.stddev)
        if self.preserve_aspect_ratio:
            return resize_and_crop_image(image, self.size, self.size)
        original = tf.cast(tf.shape(image)[0:2], tf.float32)
        target = tf.constant(self.size, tf.float32)
        image = tf.image.resize(image, self.size, method="bilinear")
        return image, tf.stack([original, target, target / original, tf.zeros([2])])

    def preprocessed_signature(self):
        return (super().preprocessed_signature(), tf.TensorSpec([4, 2], tf.float32))

    def outputs(self, images, preprocessed_extras) -> dict:
        image_info = preprocessed_extras[0] if preprocessed_extras else None
        outputs = self.task.inference_step(images, self.model)
        logits = tf.cast(outputs["logits"] if isinstance(outputs, dict) else outputs,
                         tf.float32)
        if self.rescale and image_info is not None:
            shape = tf.cast(image_info[0, 0, :], tf.int32)
            if self.preserve_aspect_ratio:
                rescale_size = tf.cast(tf.math.ceil(image_info[0, 1, :] / image_info[0, 2, :]),
                                       tf.int32)
                offset = tf.cast(image_info[0, 3, :], tf.int32)
                logits = tf.image.resize(logits, rescale_size, method="bilinear")
                logits = tf.image.crop_to_bounding_box(logits, offset[0], offset[1], shape[0],
                                                       shape[1])
            else:
                logits = tf.image.resize(logits, shape, method="bilinear")
        else:
            logits = tf.image.resize(logits, self.size, method="bilinear")
        result = {"logits": logits,
                  "predicted_mask": tf.argmax(logits, axis=-1, output_type=tf.int32)}
        if image_info is not None:
            result["image_info"] = image_info
        return result


def build_serving_fn(task, model: keras.Model, input_type: str, batch_size: Optional[int] = None,
                     input_image_size: Optional[Sequence[int]] = None):
    """`(fn, input_spec)` of `input_type` for a segmentation `task` (see the module docstring)."""
    return SegmentationModule(task, model, input_type, batch_size,
                              input_image_size).serving_fn()
