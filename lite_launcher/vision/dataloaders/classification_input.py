"""Image classification input: TFM's `tf.train.Example` decoder and parser, and the dataset.

Records hold `image/encoded` (JPEG/PNG bytes) and `image/class/label` (int64; several for
multi-label data), as TFM's classification_input and ImageNet TFRecords do.

Training images: random crop (area range, aspect 3/4..4/3; JPEGs decoded only inside the crop
window), horizontal flip, optional colour jitter, resize, optional RandAugment / AutoAugment,
ImageNet mean/std normalisation, optional random erasing, cast. Evaluation images: centre crop
of `center_crop_fraction` of the short side, resize, normalisation, cast.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import tensorflow as tf

from lite_launcher.common.errors import ConfigError
from lite_launcher.core.input_reader import InputReader, pick_dataset_fn
from lite_launcher.vision.dataloaders import utils
from lite_launcher.vision.ops.preprocess_ops import (  # noqa: F401  (crops: the old path's names)
    CENTER_CROP_FRACTION, IMAGE_DTYPES, center_crop, decode_and_center_crop_jpeg,
    decode_and_random_crop_jpeg, decode_image, normalize_image, random_crop)
from lite_launcher.vision.dataloaders import parser


def make_decoder(image_field_key: str = "image/encoded",
                 label_field_key: str = "image/class/label", is_multilabel: bool = False):
    """Returns `decode(serialized) -> {image_field_key: bytes, label_field_key: label}`."""
    features = {image_field_key: tf.io.FixedLenFeature((), tf.string, default_value="")}
    if is_multilabel:
        features[label_field_key] = tf.io.VarLenFeature(tf.int64)
    else:
        features[label_field_key] = tf.io.FixedLenFeature((), tf.int64, default_value=-1)

    # do_not_convert: graph-safe as written (no Python control flow on tensors, no user code
    # called), so AutoGraph's conversion would only add time to the first trace (issue 31).
    @tf.autograph.experimental.do_not_convert
    def decode(serialized):
        return tf.io.parse_single_example(serialized, features)

    return decode


def make_tfds_decoder(image_field_key: str = "image/encoded",
                      label_field_key: str = "image/class/label"):
    """Returns `decode(element)` for a TFDS classification dataset (TFM's
    `tfds_classification_decoders`): its `image` and `label` features (or the `(image, label)`
    pair of `tfds_as_supervised`) under the record keys the parser reads. A decoded image is
    encoded as a quality-100 JPEG, as TFM's; one left encoded by `tfds_skip_decoding_feature:
    image` is passed as it is."""

    @tf.autograph.experimental.do_not_convert
    def decode(*element):
        if len(element) == 2:
            image, label = element
        else:
            features = element[0]
            missing = [k for k in ("image", "label") if k not in features]
            if missing:
                raise ConfigError(f"The TFDS dataset has no {' / '.join(missing)} feature "
                                  f"(its features: {', '.join(sorted(features))}); image "
                                  f"classification reads 'image' and 'label'.")
            image, label = features["image"], features["label"]
        if image.dtype != tf.string:
            image = tf.io.encode_jpeg(image, quality=100)
        return {image_field_key: image, label_field_key: tf.cast(label, tf.int64)}

    return decode


class Parser(parser.Parser):
    """Turns decoded tensors into (image [h, w, 3] of `dtype`, label), as TFM's Parser.

    The augmentations (`aug_type`, `color_jitter`, `random_erasing`) come from
    `lite_launcher.vision.ops.augment`, imported only when one is asked for.
    """

    def __init__(self, output_size: Sequence[int], num_classes: int,
                 image_field_key: str = "image/encoded",
                 label_field_key: str = "image/class/label",
                 decode_jpeg_only: bool = True, aug_rand_hflip: bool = True,
                 aug_crop: Optional[bool] = True, aug_type=None, color_jitter: float = 0.,
                 random_erasing=None, is_multilabel: bool = False, dtype: str = "float32",
                 crop_area_range: Optional[Tuple[float, float]] = (0.08, 1.0),
                 center_crop_fraction: Optional[float] = CENTER_CROP_FRACTION,
                 tf_resize_method: str = "bilinear"):
        if dtype not in IMAGE_DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {', '.join(IMAGE_DTYPES)}.")
        self._output_size = list(output_size)[:2]
        self._num_classes = num_classes
        self._image_key = image_field_key
        self._label_key = label_field_key
        self._decode_jpeg_only = decode_jpeg_only
        self._aug_rand_hflip = aug_rand_hflip
        self._aug_crop = aug_crop
        self._color_jitter = color_jitter
        self._is_multilabel = is_multilabel
        self._dtype = IMAGE_DTYPES[dtype]
        self._crop_area_range = tuple(crop_area_range or (0.08, 1.0))
        self._center_crop_fraction = (CENTER_CROP_FRACTION if center_crop_fraction is None
                                      else center_crop_fraction)
        self._resize_method = tf_resize_method
        self._augmenter = self._make_augmenter(aug_type)
        self._random_erasing = self._make_random_erasing(random_erasing)
        self._color_jitter_fn = None
        if color_jitter > 0:
            from lite_launcher.vision.ops import augment  # pylint: disable=import-outside-toplevel
            self._color_jitter_fn = augment.color_jitter

    _make_augmenter = staticmethod(utils.build_augmenter)

    @staticmethod
    def _make_random_erasing(config):
        if config is None:
            return None
        from lite_launcher.vision.ops import augment  # pylint: disable=import-outside-toplevel
        return augment.RandomErasing(
            probability=config.probability, min_area=config.min_area,
            max_area=config.max_area, min_aspect=config.min_aspect,
            max_aspect=config.max_aspect, min_count=config.min_count,
            max_count=config.max_count, trials=config.trials)

    @tf.autograph.experimental.do_not_convert
    def _label(self, decoded):
        label = decoded[self._label_key]
        if self._is_multilabel:
            if isinstance(label, tf.sparse.SparseTensor):
                label = tf.sparse.to_dense(label)
            # A multi-hot vector: 1 for every listed class.
            return tf.reduce_sum(tf.one_hot(tf.cast(label, tf.int32), self._num_classes), axis=0)
        return tf.cast(label, tf.int32)

    @tf.autograph.experimental.do_not_convert
    def _needs_decoding(self, image):
        return not tf.is_tensor(image) or image.dtype == tf.string

    @tf.autograph.experimental.do_not_convert
    def _resize(self, image):
        image = tf.image.resize(image, self._output_size, method=self._resize_method)
        image.set_shape(self._output_size + [3])
        return image

    def _train_image(self, decoded):
        image = decoded[self._image_key]
        if self._needs_decoding(image) and self._decode_jpeg_only and self._aug_crop:
            image = decode_and_random_crop_jpeg(image, self._crop_area_range)
        else:
            if self._needs_decoding(image):
                image = decode_image(image)
            if self._aug_crop:
                image = random_crop(image, self._crop_area_range)
        if self._aug_rand_hflip:
            image = tf.image.random_flip_left_right(image)
        if self._color_jitter_fn is not None:
            image = self._color_jitter_fn(image, self._color_jitter, self._color_jitter,
                                          self._color_jitter)
        image = self._resize(image)
        if self._augmenter is not None:
            # The augmenters work on uint8 pixels.
            pixels = tf.cast(tf.clip_by_value(image, 0.0, 255.0), tf.uint8)
            image = tf.cast(self._augmenter.distort(pixels), tf.float32)
        image = normalize_image(tf.cast(image, tf.float32))
        if self._random_erasing is not None:
            image = self._random_erasing.distort(image)
        return tf.cast(image, self._dtype)

    def _eval_image(self, decoded):
        image = decoded[self._image_key]
        if self._needs_decoding(image) and self._decode_jpeg_only and self._aug_crop:
            image = decode_and_center_crop_jpeg(image, self._center_crop_fraction)
        else:
            if self._needs_decoding(image):
                image = decode_image(image)
            if self._aug_crop:
                image = center_crop(image, self._center_crop_fraction)
        return tf.cast(normalize_image(tf.cast(self._resize(image), tf.float32)), self._dtype)

    def parse_train_data(self, decoded):
        """(augmented training image, label)."""
        return self._train_image(decoded), self._label(decoded)

    def parse_eval_data(self, decoded):
        """(centre-cropped evaluation image, label)."""
        return self._eval_image(decoded), self._label(decoded)

    def parse_eval_image(self, image):
        """The evaluation image of one encoded image (bytes) or decoded [h, w, 3] image: what
        the serving signatures of `lite-export` feed the model."""
        return self._eval_image({self._image_key: image})



def make_mixup_and_cutmix(config, num_classes: int):
    """The batch-level MixUp/CutMix function for `config` (None when `config` is None)."""
    if config is None:
        return None
    from lite_launcher.vision.ops import augment  # pylint: disable=import-outside-toplevel
    return augment.MixupAndCutmix(
        mixup_alpha=config.mixup_alpha, cutmix_alpha=config.cutmix_alpha, prob=config.prob,
        switch_prob=config.switch_prob, label_smoothing=config.label_smoothing,
        num_classes=num_classes)


def build_dataset(params, task_config,
                  input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
    """The batched dataset of `params` (a vision DataConfig) for an image classification task.

    As TFM, the field keys and `is_multilabel` come from `task_config.train_data`, so training
    and evaluation read records the same way.
    """
    keys = task_config.train_data
    model = task_config.model
    if params.tfds_name:
        decoder = make_tfds_decoder(keys.image_field_key, keys.label_field_key)
    else:
        decoder = make_decoder(keys.image_field_key, keys.label_field_key, keys.is_multilabel)
    parser = Parser(
        output_size=model.input_size[:2], num_classes=model.num_classes,
        image_field_key=keys.image_field_key, label_field_key=keys.label_field_key,
        decode_jpeg_only=params.decode_jpeg_only, aug_rand_hflip=params.aug_rand_hflip,
        aug_crop=params.aug_crop, aug_type=params.aug_type, color_jitter=params.color_jitter,
        random_erasing=params.random_erasing, is_multilabel=keys.is_multilabel,
        dtype=params.dtype, crop_area_range=params.crop_area_range,
        center_crop_fraction=params.center_crop_fraction,
        tf_resize_method=params.tf_resize_method)
    postprocess_fn = None
    if params.is_training:
        postprocess_fn = make_mixup_and_cutmix(params.mixup_and_cutmix, model.num_classes)
    reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type),
                         decoder_fn=decoder, parser_fn=parser.parse_fn(params.is_training),
                         postprocess_fn=postprocess_fn)
    return reader.read(input_context)
