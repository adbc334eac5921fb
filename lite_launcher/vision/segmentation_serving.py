"""Serving signatures of semantic segmentation (TFM's official/vision/serving/semantic_segmentation.py).

`lite-export --input_type` for a segmentation task:

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

from lite_launcher.base_config import ConfigError
from lite_launcher.vision import segmentation_input

INPUT_TYPES = ("image_tensor", "image_bytes", "tf_example", "tflite")


def _served_size(config, input_image_size) -> list:
    size = list(input_image_size or [s for s in config.model.input_size[:2] if s])
    if len(size) != 2 or min(size) < 1:
        raise ConfigError(
            f"--input_image_size must be two positive integers, height,width (e.g. 512,512); "
            f"the model's input_size {list(config.model.input_size)} has no fixed size to "
            f"serve at.")
    return size


def build_serving_fn(task, model: keras.Model, input_type: str, batch_size: Optional[int] = None,
                     input_image_size: Optional[Sequence[int]] = None):
    """`(fn, input_spec)` of `input_type` for a segmentation `task` (see the module docstring)."""
    config = task.task_config
    if input_type not in INPUT_TYPES:
        raise ConfigError(f"--input_type {input_type!r} is not served by semantic "
                          f"segmentation; valid: {', '.join(INPUT_TYPES)}.")
    size = _served_size(config, input_image_size)
    rescale = config.export_config.rescale_output
    if rescale and batch_size != 1:
        raise ConfigError("task.export_config.rescale_output resizes each image's logits to "
                          "its own size: export with --batch_size 1 (as TFM).")
    feature = config.train_data.image_feature
    channels = feature.num_channels
    preserve_aspect_ratio = config.train_data.preserve_aspect_ratio

    def preprocess(image):
        """uint8 [h, w, c] -> (normalised float32 image at `size`, image_info [4, 2])."""
        image = segmentation_input.normalize_image(image, feature.mean, feature.stddev)
        if preserve_aspect_ratio:
            return segmentation_input.resize_and_crop_image(image, size, size)
        original = tf.cast(tf.shape(image)[0:2], tf.float32)
        target = tf.constant(size, tf.float32)
        image = tf.image.resize(image, size, method="bilinear")
        return image, tf.stack([original, target, target / original, tf.zeros([2])])

    def decode(encoded):
        image = tf.io.decode_image(encoded, channels=channels, expand_animations=False)
        image.set_shape([None, None, channels])
        return image

    def from_example(serialized):
        parsed = tf.io.parse_single_example(serialized, {
            feature.feature_name: tf.io.FixedLenFeature((), tf.string)})
        return decode(parsed[feature.feature_name])

    to_image = {"image_tensor": lambda x: x, "image_bytes": decode,
                "tf_example": from_example}.get(input_type)
    if input_type == "image_tensor":
        spec = tf.TensorSpec([batch_size, None, None, channels], tf.uint8, name="inputs")
    elif input_type == "tflite":
        spec = tf.TensorSpec([batch_size] + size + [channels], tf.float32, name="inputs")
    else:
        spec = tf.TensorSpec([batch_size], tf.string, name="inputs")

    def serve(inputs):
        image_info = None
        images = inputs
        if to_image is not None:
            with tf.device("cpu:0"):  # as TFM: decoding and resizing run on the host
                images, image_info = tf.map_fn(
                    lambda x: preprocess(to_image(x)), inputs, parallel_iterations=32,
                    fn_output_signature=(tf.TensorSpec(size + [channels], tf.float32),
                                         tf.TensorSpec([4, 2], tf.float32)))
        outputs = task.inference_step(images, model)
        logits = tf.cast(outputs["logits"] if isinstance(outputs, dict) else outputs,
                         tf.float32)
        if rescale and image_info is not None:
            shape = tf.cast(image_info[0, 0, :], tf.int32)
            if preserve_aspect_ratio:
                rescale_size = tf.cast(tf.math.ceil(image_info[0, 1, :] / image_info[0, 2, :]),
                                       tf.int32)
                offset = tf.cast(image_info[0, 3, :], tf.int32)
                logits = tf.image.resize(logits, rescale_size, method="bilinear")
                logits = tf.image.crop_to_bounding_box(logits, offset[0], offset[1], shape[0],
                                                       shape[1])
            else:
                logits = tf.image.resize(logits, shape, method="bilinear")
        else:
            logits = tf.image.resize(logits, size, method="bilinear")
        result = {"logits": logits,
                  "predicted_mask": tf.argmax(logits, axis=-1, output_type=tf.int32)}
        if image_info is not None:
            result["image_info"] = image_info
        return result

    return serve, spec
