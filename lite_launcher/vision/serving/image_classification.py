"""Serving signatures of image classification (TFM's official/vision/serving/image_classification.py).

`lite-export --input_type` for an image classification task, with TFM's names and dtypes (the
inputs and their host-side decoding are `export_base.ExportModule`'s):

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

from lite_launcher.vision.dataloaders import classification_input
from lite_launcher.vision.serving import export_base

INPUT_TYPES = export_base.INPUT_TYPES[:3] + ("serve_examples",) + export_base.INPUT_TYPES[3:]


def serving_model(task, model: keras.Model, input_image_size: Sequence[int]) -> keras.Model:
    """`model`, or, when `input_image_size` differs from `task.model.input_size`, the same
    architecture built at that size holding `model`'s weights (TFM builds its export model at
    `--input_image_size`; convolutions and pooling do not depend on it). None stays None (a
    module used for its preprocessing only, as `predict_tflite`)."""
    config = task.task_config
    height, width = input_image_size
    if model is None or [height, width] == list(config.model.input_size[:2]):
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


class ClassificationModule(export_base.ExportModule):
    """TFM's ClassificationModule: the evaluation parser's preprocessing; `logits`, `probs`."""

    family = "image classification"
    input_types = INPUT_TYPES

    def __init__(self, task, model: keras.Model, input_type: str, batch_size=None,
                 input_image_size=None):
        super().__init__(task, model, input_type, batch_size, input_image_size)
        self.served = serving_model(task, model, self.size)
        self._any_format = _parser(self.config, self.size, decode_jpeg_only=False)
        # A JPEG takes the evaluation's own decoding (with decode_jpeg_only, only the crop
        # window, whose pixels can differ from a whole decode); other formats decode whole.
        self._jpeg = _parser(self.config, self.size,
                             decode_jpeg_only=self.config.validation_data.decode_jpeg_only)

    @property
    def image_key(self) -> str:
        return self.config.train_data.image_field_key

    def preprocess(self, image):
        return self._any_format.parse_eval_image(image)

    def preprocess_bytes(self, encoded):
        return tf.cond(tf.io.is_jpeg(encoded), lambda: self._jpeg.parse_eval_image(encoded),
                       lambda: self._any_format.parse_eval_image(encoded))

    def outputs(self, images, preprocessed_extras) -> dict:
        logits = tf.cast(self.task.inference_step(images, self.served), tf.float32)
        if self.config.train_data.is_multilabel:
            probs = tf.math.sigmoid(logits)
        else:
            probs = tf.nn.softmax(logits)
        return {"logits": logits, "probs": probs}


def build_serving_fn(task, model: keras.Model, input_type: str, batch_size: Optional[int] = None,
                     input_image_size: Optional[Sequence[int]] = None):
    """`(fn, input_spec)` of `input_type` for an image classification `task` (see the module
    docstring); `input_image_size` (height, width) defaults to `task.model.input_size`."""
    return ClassificationModule(task, model, input_type, batch_size,
                                input_image_size).serving_fn()
