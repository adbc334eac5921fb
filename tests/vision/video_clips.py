"""What the video input tests share: a TensorFlow-free stand-in for TFM's video DataConfig, and
the records and TFM reference outputs of tests/vision/data/make_tfm_video_input_reference.py."""

import dataclasses
import json
import os
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from lite_launcher.vision.configs import common

DATA = os.path.join(os.path.dirname(__file__), "data")
RECORDS = os.path.join(DATA, "tfm_video_input_reference.tfrecord")
REFERENCE = np.load(os.path.join(DATA, "tfm_video_input_reference.npz"))
CONFIGS = json.loads(str(REFERENCE["configs"]))
AUDIO_KEY = "audio/features"


@dataclasses.dataclass
class DataConfig:
    """TFM's video DataConfig fields the input reads, with TFM's defaults (a TensorFlow-free
    stand-in for vision.configs.video_classification.DataConfig in these tests)."""

    input_path: str = ""
    tfds_name: str = ""
    file_type: str = "tfrecord"
    is_training: bool = True
    global_batch_size: int = 2
    feature_shape: Tuple[int, ...] = (64, 224, 224, 3)
    temporal_stride: int = 1
    random_stride_range: int = 0
    num_test_clips: int = 1
    num_test_crops: int = 1
    num_classes: int = -1
    dtype: str = "float32"
    label_dtype: str = "int32"
    one_hot: bool = True
    min_image_size: int = 256
    zero_centering_image: bool = False
    is_multilabel: bool = False
    output_audio: bool = False
    audio_feature: str = ""
    audio_feature_shape: Tuple[int, ...] = (-1,)
    aug_min_aspect_ratio: float = 0.5
    aug_max_aspect_ratio: float = 2.0
    aug_min_area_ratio: float = 0.49
    aug_max_area_ratio: float = 1.0
    aug_random_rotation: bool = False
    aug_type: Optional[common.Augmentation] = None
    mixup_and_cutmix: Optional[common.MixupAndCutmix] = None
    image_field_key: str = "image/encoded"
    label_field_key: str = "clip/label/index"
    input_image_format: str = "jpeg"
    # InputReader's fields.
    shuffle_buffer_size: int = 4
    cache: bool = False
    cycle_length: Optional[int] = None
    block_length: int = 1
    deterministic: Optional[bool] = None
    drop_remainder: bool = False
    sharding: bool = True
    seed: Optional[int] = None
    prefetch_buffer_size: Optional[int] = None


def config(fields, **overrides):
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    values.update(overrides)
    return DataConfig(**values)


def records():
    return [r.numpy() for r in tf.data.TFRecordDataset(RECORDS)]
