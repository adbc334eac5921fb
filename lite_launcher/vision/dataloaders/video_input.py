"""Video classification input: TFM's SequenceExample decoder, parser and post-batch step
(TFM's official/vision/dataloaders/video_input.py: same names, same outputs), and the dataset.

A record is a `tf.train.SequenceExample`: context `clip/label/index` (int64, several for
multi-label clips) and feature list `image/encoded` (one JPEG or PNG string per frame).

Training clips: one window of `feature_shape[0]` frames every `temporal_stride` frames at a
random start (the stride itself drawn from `random_stride_range` around it), one random box by
area and aspect ratio for the whole clip resized to `feature_shape[1:3]`, a flip, an optional
rotation by quarter turns, an optional AutoAugment / RandAugment (one policy draw per clip,
applied to every frame alike, as TFM's augmenter on a clip). Evaluation clips:
`num_test_clips` linearly spaced windows, the smallest side resized to `min_image_size`, the
centre crop or three crops along the long side; the views sit along time and
`PostBatchProcessor` moves them into the batch. Pixels become [0, 1] or, with
`zero_centering_image`, [-1, 1].

Unlike TFM's, a bad record fails its pipeline with one line naming the clip (its
`clip/data_path`, when the record has one) and the fix, through `utils.record_assert` and
`errors.BAD_RECORD_MARKER`: no `image/encoded` frames, a frame that is no JPEG / PNG / GIF /
BMP, a label outside [0, num_classes). A clip shorter than the window wraps around to its start,
as TFM's; a frame whose image data is truncated fails with TensorFlow's decode error, as TFM's.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Union

from absl import logging
import tensorflow as tf

from lite_launcher.common.errors import BAD_RECORD_MARKER, ConfigError
from lite_launcher.core.input_reader import InputReader, pick_dataset_fn
from lite_launcher.vision.dataloaders import decoder, parser, utils
from lite_launcher.vision.ops import preprocess_ops_3d

IMAGE_KEY = "image/encoded"
LABEL_KEY = "clip/label/index"
# Not read by TFM: the data tool writes it, and the bad-record messages name the clip by it.
PATH_KEY = "clip/data_path"
INPUT_IMAGE_FORMATS = ("jpeg", "png", "none")

do_not_convert = tf.autograph.experimental.do_not_convert


def _check_format(input_image_format: Optional[str]):
    if input_image_format not in INPUT_IMAGE_FORMATS:
        raise ConfigError(f"input_image_format {input_image_format!r} is not one of "
                          f"{', '.join(map(repr, INPUT_IMAGE_FORMATS))}.")


@do_not_convert
def _checked_frames(image, clip_name, image_key):
    """`image` ([T] encoded frames) once the record is known to have frames that are images:
    one bad-record line otherwise."""
    if image.dtype != tf.string:
        return image
    has_frames = utils.record_assert(
        tf.size(image) > 0,
        [BAD_RECORD_MARKER, "clip", clip_name, "has no frames in its", image_key,
         "feature list; write clips with python -m lite_launcher.vision.data."
         "make_video_tfrecords or set image_field_key to the frames' key."])
    # An image file starts with its format's magic number: anything else is a corrupt frame.
    head = tf.strings.substr(image, 0, 4)
    is_image = ((tf.strings.substr(image, 0, 3) == b"\xff\xd8\xff") | (head == b"\x89PNG")
                | (tf.strings.substr(image, 0, 3) == b"GIF")
                | (tf.strings.substr(image, 0, 2) == b"BM"))
    bad = tf.where(tf.logical_not(is_image))[:, 0]
    all_images = utils.record_assert(
        tf.size(bad) == 0,
        [BAD_RECORD_MARKER, "clip", clip_name, "has frames", bad, "in", image_key,
         "that are no JPEG / PNG / GIF / BMP image; re-encode the clip."], summarize=8)
    with tf.control_dependencies([has_frames, all_images]):
        return tf.identity(image)


def process_image(image, is_training: bool = True, num_frames: int = 32, stride: int = 1,
                  random_stride_range: int = 0, num_test_clips: int = 1, min_resize: int = 256,
                  crop_size: Union[int, Tuple[int, int]] = 224, num_channels: int = 3,
                  num_crops: int = 1, zero_centering_image: bool = False,
                  min_aspect_ratio: float = 0.5, max_aspect_ratio: float = 2,
                  min_area_ratio: float = 0.49, max_area_ratio: float = 1.0,
                  random_rotation: bool = False, augmenter=None, seed: Optional[int] = None,
                  input_image_format: Optional[str] = "jpeg"):
    """One clip ([T] encoded frames, or uint8 [T, H, W, C] pixels) -> float32 frames
    `[num_frames * views, crop_height, crop_width, num_channels]` (TFM's `process_image`;
    views is `num_test_clips * num_crops` in evaluation, 1 in training).

    Training samples a random window (stride drawn uniformly from
    [max(stride - random_stride_range, 1), stride + random_stride_range) when the range is
    positive: TFM's bounds, the upper one excluded), crops a random box and resizes, flips,
    optionally rotates and augments. Evaluation samples `num_test_clips` linearly spaced
    windows (the centred one when 1), resizes the smallest side to `min_resize` and crops.
    """
    if is_training and num_test_clips != 1:
        logging.warning("num_test_clips %d is ignored in training.", num_test_clips)
    if random_stride_range < 0:
        raise ConfigError(f"random_stride_range ({random_stride_range}) must be >= 0.")
    _check_format(input_image_format)
    if isinstance(crop_size, int):
        crop_size = (crop_size, crop_size)
    crop_height, crop_width = crop_size

    if is_training:
        if random_stride_range > 0:
            stride = tf.random.uniform([], tf.maximum(stride - random_stride_range, 1),
                                       stride + random_stride_range, dtype=tf.int32)
        image = preprocess_ops_3d.sample_sequence(image, num_frames, True, stride, seed)
    elif num_test_clips > 1:
        image = preprocess_ops_3d.sample_linspace_sequence(image, num_test_clips, num_frames,
                                                           stride)
    else:
        image = preprocess_ops_3d.sample_sequence(image, num_frames, False, stride)

    # Decoded after sampling: only the frames kept are decoded.
    if image.dtype == tf.string:
        image = preprocess_ops_3d.decode_image(image, num_channels)

    if is_training:
        image = preprocess_ops_3d.random_crop_resize(
            image, crop_height, crop_width, num_frames, num_channels,
            (min_aspect_ratio, max_aspect_ratio), (min_area_ratio, max_area_ratio))
        image = preprocess_ops_3d.random_flip_left_right(image, seed)
        if random_rotation:
            image = preprocess_ops_3d.random_rotation(image, seed)
        if augmenter is not None:
            image = augmenter.distort(image)
    else:
        image = preprocess_ops_3d.resize_smallest(image, min_resize)
        image = preprocess_ops_3d.crop_image(image, crop_height, crop_width, False, num_crops)
    return preprocess_ops_3d.normalize_image(image, zero_centering_image)


def postprocess_image(image, is_training: bool = True, num_frames: int = 32,
                      num_test_clips: int = 1, num_test_crops: int = 1):
    """A batch `[B, views * num_frames, H, W, C]` of evaluation clips ->
    `[B * views, num_frames, H, W, C]` (views = clips x crops, each its own example); other
    batches unchanged."""
    if num_test_clips * num_test_crops > 1 and not is_training:
        image = tf.reshape(image, [-1, num_frames] + image.shape[2:].as_list())
    return image


def process_label(label, one_hot_label: bool = True, num_classes: Optional[int] = None,
                  label_dtype: tf.DType = tf.int32):
    """A clip's label ids -> `label_dtype`; with `one_hot_label` a `[num_classes]` multi-hot
    vector (one class: the flipped `1 - one_hot` TFM uses for a single logit)."""
    if one_hot_label and not num_classes:
        raise ConfigError("num_classes must be set (> 0) for one-hot labels.")
    label = tf.cast(label, label_dtype)
    if one_hot_label:
        label = tf.one_hot(label, num_classes)
        if label.shape.rank > 1:
            label = tf.reduce_sum(label, axis=0)
        if num_classes == 1:
            label = 1 - label
    return label


@do_not_convert
def _checked_label(label, num_classes: Optional[int], clip_name, label_key):
    """`label` after checking every id lies in [0, num_classes) (no check without classes)."""
    if not num_classes or num_classes < 1:
        return label
    label = tf.convert_to_tensor(label)
    ids = tf.reshape(label, [-1])  # a TFDS label is a scalar
    bad = (ids < 0) | (ids >= num_classes)
    check = utils.record_assert(
        tf.logical_not(tf.reduce_any(bad)),
        [BAD_RECORD_MARKER, "clip", clip_name, "has label ids", tf.boolean_mask(ids, bad),
         "in", label_key, "outside 0 ..", num_classes - 1, "(num_classes", num_classes,
         "): raise num_classes or fix the labels."], summarize=8)
    with tf.control_dependencies([check]):
        return tf.identity(label)


class Decoder(decoder.Decoder):
    """Parses one serialized `tf.train.SequenceExample` into a dict: the context's `label_key`
    (int64 ids, dense), the feature list `image_key` ([T] strings), and `clip/data_path` (""
    when absent) to name the clip in errors. `add_feature` / `add_context` read more
    (e.g. an audio feature list), as TFM's."""

    def __init__(self, image_key: str = IMAGE_KEY, label_key: str = LABEL_KEY):
        self._context_description = {
            label_key: tf.io.VarLenFeature(tf.int64),
            PATH_KEY: tf.io.FixedLenFeature((), tf.string, default_value=""),
        }
        # allow_missing: a record without frames gets the parser's one-line error, not
        # TensorFlow's "Feature list ... is required".
        self._sequence_description = {
            image_key: tf.io.FixedLenSequenceFeature((), tf.string, allow_missing=True),
        }

    def add_feature(self, feature_name: str, feature_type):
        """Also parse feature list `feature_name` as `feature_type`."""
        self._sequence_description[feature_name] = feature_type

    def add_context(self, feature_name: str, feature_type):
        """Also parse context feature `feature_name` as `feature_type`."""
        self._context_description[feature_name] = feature_type

    @do_not_convert
    def decode(self, serialized_example) -> Dict[str, tf.Tensor]:
        """The record's context and feature lists, sparse ones made dense."""
        context, sequences = tf.io.parse_single_sequence_example(
            serialized_example, self._context_description, self._sequence_description)
        result = {**context, **sequences}
        return {key: tf.sparse.to_dense(value) if isinstance(value, tf.SparseTensor) else value
                for key, value in result.items()}


class VideoTfdsDecoder(decoder.Decoder):
    """A TFDS video dataset's element (`video` uint8 [T, H, W, 3], `label`; e.g. ucf101) under
    the keys the parser reads."""

    def __init__(self, image_key: str = IMAGE_KEY, label_key: str = LABEL_KEY):
        self._image_key = image_key
        self._label_key = label_key

    @do_not_convert
    def decode(self, features) -> Dict[str, tf.Tensor]:
        """{image_key: features['video'], label_key: features['label']}."""
        missing = [k for k in ("video", "label") if k not in features]
        if missing:
            raise ConfigError(f"The TFDS dataset has no {' / '.join(missing)} feature (its "
                              f"features: {', '.join(sorted(features))}); video "
                              f"classification reads 'video' and 'label'.")
        return {self._image_key: features["video"], self._label_key: features["label"]}


class Parser(parser.Parser):
    """Turns decoded clips into ({'image': frames[, 'audio': ...]}, label), as TFM's Parser,
    from a video `DataConfig` (`input_params`: feature_shape, temporal_stride,
    random_stride_range, num_test_clips, num_test_crops, min_image_size, zero_centering_image,
    one_hot, num_classes, dtype, label_dtype, output_audio / audio_feature /
    audio_feature_shape, aug_* ratios, aug_random_rotation, aug_type, input_image_format)."""

    def __init__(self, input_params, image_key: str = IMAGE_KEY, label_key: str = LABEL_KEY):
        p = input_params
        self._num_frames = p.feature_shape[0]
        self._stride = p.temporal_stride
        self._random_stride_range = p.random_stride_range
        self._num_test_clips = p.num_test_clips
        self._min_resize = p.min_image_size
        crop_height, crop_width = p.feature_shape[1], p.feature_shape[2]
        self._crop_size = crop_height if crop_height == crop_width else (crop_height,
                                                                         crop_width)
        self._num_channels = p.feature_shape[3]
        self._num_crops = p.num_test_crops
        self._zero_centering_image = p.zero_centering_image
        self._one_hot_label = p.one_hot
        self._num_classes = p.num_classes
        self._image_key = image_key
        self._label_key = label_key
        self._dtype = tf.dtypes.as_dtype(p.dtype)
        self._label_dtype = tf.dtypes.as_dtype(p.label_dtype)
        self._output_audio = p.output_audio
        self._min_aspect_ratio = p.aug_min_aspect_ratio
        self._max_aspect_ratio = p.aug_max_aspect_ratio
        self._min_area_ratio = p.aug_min_area_ratio
        self._max_area_ratio = p.aug_max_area_ratio
        self._input_image_format = p.input_image_format
        self._random_rotation = p.aug_random_rotation
        if self._output_audio:
            self._audio_feature = p.audio_feature
            self._audio_shape = p.audio_feature_shape
        _check_format(self._input_image_format)
        if self._random_stride_range < 0:
            raise ConfigError(f"random_stride_range ({self._random_stride_range}) must be "
                              f">= 0.")
        if self._num_crops not in (1, 3):
            raise ConfigError(f"num_test_crops ({self._num_crops}) must be 1 (centre crop) "
                              f"or 3.")
        if self._one_hot_label and self._num_classes < 1:
            raise ConfigError(f"num_classes ({self._num_classes}) must be set (> 0) for "
                              f"one-hot labels.")
        aug_type = p.aug_type
        if aug_type is not None and aug_type.type not in (None, "autoaug", "randaug"):
            raise ConfigError(f"aug_type.type {aug_type.type!r} is not supported for video; "
                              f"use 'autoaug' or 'randaug'.")
        # One policy draw per clip, applied to all its frames (the augmenters take clips).
        self._augmenter = utils.build_augmenter(aug_type)

    def _clip_name(self, decoded):
        return decoded.get(PATH_KEY, tf.constant("(no clip/data_path)"))

    def _frames(self, decoded, is_training: bool):
        image = _checked_frames(decoded[self._image_key], self._clip_name(decoded),
                                self._image_key)
        options = dict(num_frames=self._num_frames, stride=self._stride,
                       num_test_clips=self._num_test_clips, min_resize=self._min_resize,
                       crop_size=self._crop_size, num_channels=self._num_channels,
                       zero_centering_image=self._zero_centering_image,
                       input_image_format=self._input_image_format)
        if is_training:
            options.update(random_stride_range=self._random_stride_range,
                           min_aspect_ratio=self._min_aspect_ratio,
                           max_aspect_ratio=self._max_aspect_ratio,
                           min_area_ratio=self._min_area_ratio,
                           max_area_ratio=self._max_area_ratio,
                           random_rotation=self._random_rotation, augmenter=self._augmenter)
        else:
            options.update(num_crops=self._num_crops)
        image = process_image(image, is_training=is_training, **options)
        return tf.cast(image, self._dtype)

    def _features_and_label(self, decoded, is_training: bool):
        features = {"image": self._frames(decoded, is_training)}
        label = _checked_label(decoded[self._label_key], self._num_classes,
                               self._clip_name(decoded), self._label_key)
        label = process_label(label, self._one_hot_label, self._num_classes,
                              self._label_dtype)
        if self._output_audio:
            audio = tf.cast(decoded[self._audio_feature], self._dtype)
            # Centred, as TFM's (not synchronised with the frames' random window).
            audio = preprocess_ops_3d.sample_sequence(audio, self._audio_shape[0], random=False,
                                                      stride=1)
            features["audio"] = tf.ensure_shape(audio, self._audio_shape)
        return features, label

    def parse_train_data(self, decoded):
        """(features, label) of a training clip."""
        return self._features_and_label(decoded, True)

    def parse_eval_data(self, decoded):
        """(features, label) of an evaluation clip (all its views along time)."""
        return self._features_and_label(decoded, False)

    # TFM's names.
    _parse_train_data = parse_train_data
    _parse_eval_data = parse_eval_data


class PostBatchProcessor:
    """Maps a batch: evaluation clips with several views become one example per view."""

    def __init__(self, input_params):
        self._is_training = input_params.is_training
        self._num_frames = input_params.feature_shape[0]
        self._num_test_clips = input_params.num_test_clips
        self._num_test_crops = input_params.num_test_crops

    @do_not_convert
    def __call__(self, features: Dict[str, tf.Tensor], label):
        features = dict(features)
        if "image" in features:
            features["image"] = postprocess_image(
                features["image"], is_training=self._is_training, num_frames=self._num_frames,
                num_test_clips=self._num_test_clips, num_test_crops=self._num_test_crops)
        return features, label


def make_decoder(params, output_audio: bool = False, audio_feature: str = ""):
    """The decode function of `params`: `VideoTfdsDecoder` with `tfds_name`, else `Decoder`;
    with `output_audio` it also reads `audio_feature` (float, any length per step), as TFM's
    task does from `train_data`."""
    if getattr(params, "tfds_name", ""):
        clip_decoder = VideoTfdsDecoder(params.image_field_key, params.label_field_key)
    else:
        clip_decoder = Decoder(params.image_field_key, params.label_field_key)
    if output_audio:
        if not audio_feature:
            raise ConfigError("output_audio is set but audio_feature is empty: name the "
                              "records' audio feature list.")
        if isinstance(clip_decoder, VideoTfdsDecoder):
            raise ConfigError("output_audio reads a feature list of SequenceExample records; "
                              "it is not supported with tfds_name.")
        clip_decoder.add_feature(audio_feature, tf.io.VarLenFeature(dtype=tf.float32))
    return clip_decoder.decode


def make_mixup_and_cutmix(params):
    """The batch-level MixUp / CutMix of `params.mixup_and_cutmix` (None when unset), as TFM's
    video task builds it (`num_classes` from `params`)."""
    config = getattr(params, "mixup_and_cutmix", None)
    if config is None:
        return None
    from lite_launcher.vision.ops import augment  # pylint: disable=import-outside-toplevel
    return augment.MixupAndCutmix(
        mixup_alpha=config.mixup_alpha, cutmix_alpha=config.cutmix_alpha, prob=config.prob,
        switch_prob=config.switch_prob, label_smoothing=config.label_smoothing,
        num_classes=params.num_classes)


def build_dataset(params, input_context: Optional[tf.distribute.InputContext] = None,
                  train_data=None) -> tf.data.Dataset:
    """The batched dataset of `params` (a video DataConfig), as TFM's task builds it: the
    decoder, `Parser`, then `PostBatchProcessor` and, with `mixup_and_cutmix`, MixUp / CutMix
    on each batch of clips, through lite's `InputReader`. `train_data` (default `params`)
    gives `output_audio` / `audio_feature`, which TFM reads from the task's train_data for
    both splits."""
    train_data = params if train_data is None else train_data
    decoder_fn = make_decoder(params, train_data.output_audio, train_data.audio_feature)
    clip_parser = Parser(params, image_key=params.image_field_key,
                    label_key=params.label_field_key)
    post_batch = PostBatchProcessor(params)
    mixer = make_mixup_and_cutmix(params)
    if mixer is None:
        batch_fn = post_batch
    else:
        @do_not_convert
        def batch_fn(features, label):
            features, label = post_batch(features, label)
            features["image"], label = mixer(features["image"], label)
            return features, label
    reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type),
                         decoder_fn=decoder_fn, parser_fn=clip_parser.parse_fn(params.is_training),
                         postprocess_fn=batch_fn)
    return reader.read(input_context)
