"""The serving base of the vision families (TFM's official/vision/serving/export_base.py).

`ExportModule` owns what every family serves alike: the `--input_type` check, the served
`--input_image_size` check, the input signature of each type and the host-side decoding.

| input_type | `inputs` | per image, on the host |
|---|---|---|
| `image_tensor` | uint8 [batch, height, width, channels], decoded images of any size | `preprocess` |
| `image_bytes` | string [batch], encoded images (JPEG, PNG, GIF, BMP) | `preprocess_bytes` (decode, `preprocess`) |
| `tf_example` | string [batch], serialized `tf.train.Example`s with the image under `image_key` | parse, then as `image_bytes` |
| `tflite` | float32 [batch, h, w, channels], images already preprocessed | none |

A family adds only its outputs (`outputs`) and its preprocessing (`preprocess`, with
`preprocessed_signature` when it returns more than the image, e.g. segmentation's
`image_info`).
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.ops.preprocess_ops import decode_image

INPUT_TYPES = ("image_tensor", "image_bytes", "tf_example", "tflite")


class ExportModule:
    """One serving signature of `task` and `model` for `input_type` (see the module docstring).

    Subclasses set `family` (named in errors), may widen `input_types`, and implement
    `preprocess` and `outputs`; `serving_fn()` returns `(fn, input_spec)` for `lite-export`.
    """

    family = "this task"
    input_types = INPUT_TYPES
    size_example = "224,224"

    def __init__(self, task, model: keras.Model, input_type: str,
                 batch_size: Optional[int] = None,
                 input_image_size: Optional[Sequence[int]] = None):
        if input_type not in self.input_types:
            raise ConfigError(f"--input_type {input_type!r} is not served by {self.family}; "
                              f"valid: {', '.join(self.input_types)}.")
        self.task, self.model, self.config = task, model, task.task_config
        self.input_type, self.batch_size = input_type, batch_size
        model_size = [s for s in self.config.model.input_size[:2] if s]
        self.size = list(input_image_size or model_size)
        if len(self.size) != 2 or min(self.size) < 1:
            where = (f"{','.join(map(str, self.size))!r} " if input_image_size else "")
            model_has_none = ("" if input_image_size else
                              f"; the model's input_size {list(self.config.model.input_size)} "
                              f"has no fixed size to serve at")
            raise ConfigError(f"--input_image_size {where}must be two positive integers, "
                              f"height,width (e.g. {self.size_example}){model_has_none}.")

    # ----- what a family provides -----------------------------------------------------

    @property
    def channels(self) -> int:
        """Channels of a served image."""
        return 3

    @property
    def image_key(self) -> str:
        """The `tf.train.Example` feature holding the encoded image."""
        return "image/encoded"

    def preprocess(self, image):
        """A decoded uint8 image [h, w, channels] -> the model's input image at `self.size`
        (or a tuple of it and more, as `preprocessed_signature` says)."""
        raise NotImplementedError

    def preprocess_bytes(self, encoded):
        """An encoded image -> as `preprocess`; a family may decode its own way."""
        return self.preprocess(decode_image(encoded, self.channels))

    def preprocessed_signature(self):
        """The `tf.map_fn` output signature of `preprocess`."""
        return tf.TensorSpec(self.size + [self.channels], tf.float32)

    def outputs(self, images, preprocessed_extras) -> dict:
        """The named outputs of a batch of model-input `images` (`preprocessed_extras`: the
        rest of what `preprocess` returned, batched; None for `tflite`)."""
        raise NotImplementedError

    # ----- the input types ------------------------------------------------------------

    def _from_example(self, serialized):
        parsed = tf.io.parse_single_example(
            serialized, {self.image_key: tf.io.FixedLenFeature((), tf.string)})
        return self.preprocess_bytes(parsed[self.image_key])

    def input_spec(self) -> tf.TensorSpec:
        """The signature's `inputs` for `input_type`."""
        if self.input_type == "image_tensor":
            return tf.TensorSpec([self.batch_size, None, None, self.channels], tf.uint8,
                                 name="inputs")
        if self.input_type == "tflite":
            return tf.TensorSpec([self.batch_size] + self.size + [self.channels], tf.float32,
                                 name="inputs")
        return tf.TensorSpec([self.batch_size], tf.string, name="inputs")

    def per_image_fn(self):
        """The host-side function of one input of `input_type` (None: `tflite`, none)."""
        if self.input_type == "image_tensor":
            return self.preprocess
        if self.input_type == "image_bytes":
            return self.preprocess_bytes
        if self.input_type == "tflite":
            return None
        return self._from_example  # tf_example and the types a family adds as its aliases

    def serving_fn(self):
        """`(fn, input_spec)`: `fn(inputs)` preprocesses each input on the host (as TFM) and
        returns `outputs`."""
        per_image = self.per_image_fn()

        def serve(inputs):
            images, extras = inputs, None
            if per_image is not None:
                with tf.device("cpu:0"):  # as TFM: decoding and resizing run on the host
                    images = tf.map_fn(per_image, inputs, parallel_iterations=32,
                                       fn_output_signature=self.preprocessed_signature())
                if isinstance(images, tuple):
                    images, extras = images[0], images[1:]
            return self.outputs(images, extras)

        return serve, self.input_spec()
