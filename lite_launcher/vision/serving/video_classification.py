"""Serving signatures of video classification (TFM's official/vision/serving/
video_classification.py).

`lite-export --input_type` for a video classification task, with TFM's names and dtypes:

| input_type | `inputs` | preprocessing in the SavedModel |
|---|---|---|
| `image_tensor` | uint8 [batch, frames, height, width, 3], decoded clips (`--input_image_size frames,height,width`; any size when left out) | sample, resize, crop, normalise |
| `tf_example`, `serve_examples` | string [batch], serialized `tf.train.SequenceExample`s with the encoded frames in the feature list `image/encoded` | parse, decode the sampled frames, then as `image_tensor` |

Each clip is preprocessed on the host as TFM's export module does it: the evaluation path of
`video_input.process_image` with `train_data`'s `feature_shape` frames, `temporal_stride`,
`min_image_size` and crop, one centred clip and one centred crop; then the model's `logits`
and `probs` (float32; softmax, or sigmoid for multi-label data) are returned, with no
averaging over views. Where TFM differs: its export ignores `zero_centering_image` (it
always scales to [0, 1]); lite normalises as training did.
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from lite_launcher.core.base_config import ConfigError
from lite_launcher.vision.serving import export_base

INPUT_TYPES = ("image_tensor", "tf_example", "serve_examples")
# The feature list TFM's export parses (video_input.IMAGE_KEY, whatever the data config names).
IMAGE_KEY = "image/encoded"


class VideoClassificationModule(export_base.ExportModule):
    """TFM's VideoClassificationModule: a centred clip of each served video; `logits`,
    `probs`."""

    family = "video classification"
    input_types = INPUT_TYPES
    size_example = "16,224,224"

    def __init__(self, task, model: keras.Model, input_type: str, batch_size=None,
                 input_image_size: Optional[Sequence[int]] = None):
        if input_type not in self.input_types:
            raise ConfigError(f"--input_type {input_type!r} is not served by {self.family}; "
                              f"valid: {', '.join(self.input_types)}.")
        self.task, self.model, self.config = task, model, task.task_config
        self.input_type, self.batch_size = input_type, batch_size
        if input_image_size is None:
            self.size = [None, None, None]
        else:
            self.size = list(input_image_size)
            if len(self.size) != 3 or min(self.size) < 1:
                raise ConfigError(
                    f"--input_image_size {','.join(map(str, self.size))!r} must be three "
                    f"positive integers for video, frames,height,width of the served clips "
                    f"(e.g. {self.size_example}), or left out for any size.")
        data = self.config.train_data
        self.num_frames, self.crop_height, self.crop_width = data.feature_shape[:3]

    def input_spec(self) -> tf.TensorSpec:
        if self.input_type == "image_tensor":
            return tf.TensorSpec([self.batch_size] + self.size + [self.channels], tf.uint8,
                                 name="inputs")
        return tf.TensorSpec([self.batch_size], tf.string, name="inputs")

    def preprocessed_signature(self):
        return tf.TensorSpec([self.num_frames, self.crop_height, self.crop_width,
                              self.channels], tf.float32)

    def preprocess(self, clip):
        """One clip (uint8 frames, or encoded frames) -> the model's input clip."""
        from lite_launcher.vision.dataloaders import video_input  # pylint: disable=import-outside-toplevel
        data = self.config.train_data
        crop = (self.crop_height if self.crop_height == self.crop_width
                else (self.crop_height, self.crop_width))
        clip = video_input.process_image(
            clip, is_training=False, num_frames=self.num_frames,
            stride=data.temporal_stride, num_test_clips=1, min_resize=data.min_image_size,
            crop_size=crop, num_channels=self.channels, num_crops=1,
            zero_centering_image=data.zero_centering_image,
            input_image_format=data.input_image_format)
        return tf.ensure_shape(tf.cast(clip, tf.float32), self.preprocessed_signature().shape)

    def _from_example(self, serialized):
        _, sequence = tf.io.parse_single_sequence_example(
            serialized, sequence_features={IMAGE_KEY: tf.io.FixedLenSequenceFeature(
                (), tf.string)})
        return self.preprocess(sequence[IMAGE_KEY])

    def per_image_fn(self):
        return self.preprocess if self.input_type == "image_tensor" else self._from_example

    def outputs(self, images, preprocessed_extras) -> dict:
        del preprocessed_extras
        return export_base.classifier_outputs(self.model({"image": images}, training=False),
                                              self.config.train_data.is_multilabel)


def build_serving_fn(task, model: keras.Model, input_type: str, batch_size: Optional[int] = None,
                     input_image_size: Optional[Sequence[int]] = None):
    """`(fn, input_spec)` of `input_type` for a video classification `task` (see the module
    docstring); `input_image_size` is frames,height,width of the served clips."""
    return VideoClassificationModule(task, model, input_type, batch_size,
                                     input_image_size).serving_fn()
