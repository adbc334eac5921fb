"""Serving signatures of image classification (TFM's official/vision/serving/image_classification.py).

`lite-export --input_type` for an image classification task, with TFM's names and dtypes:

| input_type | `inputs` | preprocessing in the SavedModel |
|---|---|---|
| `image_tensor` | uint8 [batch, height, width, 3], decoded images of any size | centre crop, resize, normalise |
| `image_bytes` | string [batch], encoded images (JPEG, PNG, GIF, BMP) | decode, centre crop, resize, normalise |
| `tf_example`, `serve_examples` | string [batch], serialized `tf.train.Example`s holding the image under `train_data.image_field_key` | parse, then as `image_bytes` |
| `tflite` | float32 [batch, h, w, 3], images already preprocessed | none |

Every signature returns `logits` and `probs` (float32; softmax, or sigmoid for multi-label
data). The preprocessing is the evaluation parser's (`classification_input.Parser` with
`validation_data`'s `aug_crop`, `center_crop_fraction`, `tf_resize_method`, ImageNet mean/std),
at `input_image_size`, so a served image gets the prediction the evaluation gave it. Where TFM
differs: its bytes and tf.Example paths round the resized image to uint8 before normalising,
and decode a JPEG whole before cropping; lite decodes a JPEG as the evaluation does (only the
crop window when `decode_jpeg_only`) and keeps the resized image in float32.
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.base_config import ConfigError
from lite_launcher.vision import classification_input

INPUT_TYPES = ("image_tensor", "image_bytes", "tf_example", "serve_examples", "tflite")


def serving_model(task, model: keras.Model, input_image_size: Sequence[int]) -> keras.Model:
    """`model`, or, when `input_image_size` differs from `task.model.input_size`, the same
    architecture built at that size holding `model`'s weights (TFM builds its export model at
    `--input_image_size`; convolutions and pooling do not depend on it)."""
    config = task.task_config
    height, width = input_image_size
    if [height, width] == list(config.model.input_size[:2]):
        return model
    resized_task = type(task)(
        config.replace(model={"input_size": [height, width, config.model.input_size[2]]}),
        logging_dir=task.logging_dir)
    resized = resized_task.build_model()
    resized.set_weights(model.get_weights())
    return resized


def _parser(task_config, input_image_size, decode_jpeg_only: bool):
    keys, evaluation = task_config.train_data, task_config.validation_data
    return classification_input.Parser(
        output_size=input_image_size, num_classes=task_config.model.num_classes,
        image_field_key=keys.image_field_key, label_field_key=keys.label_field_key,
        decode_jpeg_only=decode_jpeg_only, aug_rand_hflip=False, aug_crop=evaluation.aug_crop,
        is_multilabel=keys.is_multilabel, dtype="float32",
        center_crop_fraction=evaluation.center_crop_fraction,
        tf_resize_method=evaluation.tf_resize_method)


def build_serving_fn(task, model: keras.Model, input_type: str, batch_size: Optional[int] = None,
                     input_image_size: Optional[Sequence[int]] = None):
    """`(fn, input_spec)` of `input_type` for an image classification `task` (see the module
    docstring); `input_image_size` (height, width) defaults to `task.model.input_size`."""
    config = task.task_config
    if input_type not in INPUT_TYPES:
        raise ConfigError(f"--input_type {input_type!r} is not served by image classification; "
                          f"valid: {', '.join(INPUT_TYPES)}.")
    size = list(input_image_size or config.model.input_size[:2])
    if len(size) != 2 or min(size) < 1:
        raise ConfigError(f"--input_image_size {','.join(map(str, size))!r} must be two positive "
                          f"integers, height,width (e.g. 224,224).")
    served = serving_model(task, model, size)
    any_format = _parser(config, size, decode_jpeg_only=False)
    # A JPEG takes the evaluation's own decoding (with decode_jpeg_only, only the crop window,
    # whose pixels can differ from a whole decode); other formats are decoded whole.
    jpeg = _parser(config, size, decode_jpeg_only=config.validation_data.decode_jpeg_only)

    def image_from_bytes(encoded):
        return tf.cond(tf.io.is_jpeg(encoded), lambda: jpeg.parse_eval_image(encoded),
                       lambda: any_format.parse_eval_image(encoded))

    decode_example = classification_input.make_decoder(
        config.train_data.image_field_key, config.train_data.label_field_key,
        config.train_data.is_multilabel)

    def image_from_example(serialized):
        return image_from_bytes(decode_example(serialized)[config.train_data.image_field_key])

    per_image = {"image_tensor": any_format.parse_eval_image, "image_bytes": image_from_bytes,
                 "tf_example": image_from_example, "serve_examples": image_from_example,
                 "tflite": None}[input_type]
    if input_type == "image_tensor":
        spec = tf.TensorSpec([batch_size, None, None, 3], tf.uint8, name="inputs")
    elif input_type == "tflite":
        spec = tf.TensorSpec([batch_size] + size + [3], tf.float32, name="inputs")
    else:
        spec = tf.TensorSpec([batch_size], tf.string, name="inputs")

    def serve(inputs):
        images = inputs
        if per_image is not None:
            with tf.device("cpu:0"):  # as TFM: decoding and resizing run on the host
                images = tf.map_fn(per_image, inputs, parallel_iterations=32,
                                   fn_output_signature=tf.TensorSpec(size + [3], tf.float32))
        logits = tf.cast(task.inference_step(images, served), tf.float32)
        if config.train_data.is_multilabel:
            probs = tf.math.sigmoid(logits)
        else:
            probs = tf.nn.softmax(logits)
        return {"logits": logits, "probs": probs}

    return serve, spec
