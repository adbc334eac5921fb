"""Semantic segmentation input: TFM's `tf.train.Example` decoder and parser.

Records are in TFM's segmentation format: `image/encoded` (JPEG/PNG bytes), `image/height`,
`image/width` and `image/segmentation/class/encoded`, a 1-channel PNG of class ids (255 for
"ignore"). `python -m lite_launcher.vision.data.make_tfrecords --mask_dir ...` writes them.

The parser returns `(image, labels)` with `labels = {'masks': [h, w, 1] float32,
'valid_masks': [h, w, 1] bool, 'image_info': [4, 2] float32}`, as TFM's:

- training: mean/std normalisation, optional resize to `output_size` + random crop to
  `crop_size`, optional horizontal flip (image and mask together), resize (random scale jitter
  in `aug_scale_min..aug_scale_max`, then a random crop) and pad to the training size; padded
  mask pixels get `ignore_label`.
- evaluation: normalisation, aspect-preserving resize and pad to `output_size`; the ground
  truth resized the same way (`resize_eval_groundtruth`), or kept at its size and padded to
  `groundtruth_padded_size` (the metric then rescales predictions with `image_info`).

`image_info` rows: [original height, width], [desired height, width], [y scale, x scale],
[y offset, x offset].
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

from lite_launcher.common.errors import BAD_RECORD_MARKER, ConfigError
from lite_launcher.core.input_reader import InputReader, pick_dataset_fn
from lite_launcher.vision.configs.common import MEAN_RGB, STDDEV_RGB
from lite_launcher.vision.dataloaders.utils import record_assert
from lite_launcher.vision.ops.preprocess_ops import (  # noqa: F401  (the old path's names)
    IMAGE_DTYPES, binarize_matting_map, normalize_image, pad_image, random_horizontal_flip,
    resize_and_crop_image, resize_and_crop_masks)
from lite_launcher.vision.dataloaders import decoder
from lite_launcher.vision.dataloaders import parser

MASK_KEY = "image/segmentation/class/encoded"


@dataclasses.dataclass(frozen=True)
class DenseFeature:
    """An encoded 8-bit image feature of the records and its normalisation (TFM's
    `DenseFeatureConfig`; any object with these four attributes, e.g. that config, works).

    `mean` and `stddev` are per channel, in 0..255.
    """
    feature_name: str = "image/encoded"
    num_channels: int = 3
    mean: Tuple[float, ...] = MEAN_RGB
    stddev: Tuple[float, ...] = STDDEV_RGB


class Decoder(decoder.Decoder):
    """Parses a serialized `tf.train.Example` into TFM's segmentation feature dict.

    `image/filename` is read too (empty when absent) so that a bad record can be named.
    """

    def __init__(self, image_feature=None, additional_dense_features=None):
        image_feature = image_feature or DenseFeature()
        string = tf.io.FixedLenFeature((), tf.string, default_value="")
        integer = tf.io.FixedLenFeature((), tf.int64, default_value=0)
        self._keys_to_features = {
            "image/encoded": string, "image/height": integer, "image/width": integer,
            MASK_KEY: string, "image/filename": string, image_feature.feature_name: string}
        for feature in additional_dense_features or ():
            self._keys_to_features[feature.feature_name] = string

    def decode(self, serialized_example):
        """{feature name: tensor} of one serialized example."""
        return tf.io.parse_single_example(serialized_example, self._keys_to_features)


class Parser(parser.Parser):
    """Turns decoded records into `(image, labels)` for training or evaluation, as TFM's
    segmentation `Parser` (same arguments and defaults)."""

    def __init__(self, output_size, crop_size=None, resize_eval_groundtruth: bool = True,
                 gt_is_matting_map: bool = False, groundtruth_padded_size=None,
                 ignore_label: int = 255, aug_rand_hflip: bool = False,
                 preserve_aspect_ratio: bool = True, aug_scale_min: float = 1.0,
                 aug_scale_max: float = 1.0, dtype: str = "float32", image_feature=None,
                 additional_dense_features=None, centered_crop: bool = False):
        if not resize_eval_groundtruth and not groundtruth_padded_size:
            raise ValueError("groundtruth_padded_size ([height, width]) must be set when "
                             "resize_eval_groundtruth is False.")
        if centered_crop and not resize_eval_groundtruth:
            raise ValueError("centered_crop needs resize_eval_groundtruth=True.")
        if dtype not in IMAGE_DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {', '.join(IMAGE_DTYPES)}.")
        self._output_size = list(output_size) if output_size else None
        self._crop_size = list(crop_size) if crop_size else None
        self._resize_eval_groundtruth = resize_eval_groundtruth
        self._gt_is_matting_map = gt_is_matting_map
        self._groundtruth_padded_size = (list(groundtruth_padded_size)
                                         if groundtruth_padded_size else None)
        self._ignore_label = ignore_label
        self._aug_rand_hflip = aug_rand_hflip
        self._preserve_aspect_ratio = preserve_aspect_ratio
        self._aug_scale_min = aug_scale_min
        self._aug_scale_max = aug_scale_max
        self._dtype = IMAGE_DTYPES[dtype]
        self._image_feature = image_feature or DenseFeature()
        self._additional_dense_features = list(additional_dense_features or ())
        self._centered_crop = centered_crop

    @staticmethod
    def _decode_feature(data, feature, height, width):
        pixels = tf.io.decode_image(data[feature.feature_name], channels=feature.num_channels,
                                    dtype=tf.uint8, expand_animations=False)
        pixels = tf.reshape(pixels, (height, width, feature.num_channels))
        return normalize_image(pixels, feature.mean, feature.stddev)

    def _decode_mask(self, data, height, width):
        """The mask [1, h, w] float32, after checking the record has one of the image's size."""
        name = data.get("image/filename", "")
        encoded = data[MASK_KEY]
        has_mask = record_assert(
            tf.strings.length(encoded) > 0,
            [BAD_RECORD_MARKER, "A record has no", MASK_KEY, "feature (image/filename:", name,
             "); write masks with make_tfrecords --mask_dir."])
        with tf.control_dependencies([has_mask]):
            mask = tf.io.decode_image(encoded, channels=1, expand_animations=False)
        same_size = record_assert(
            tf.reduce_all(tf.equal(tf.shape(mask)[:2], tf.cast(tf.stack([height, width]),
                                                             tf.int32))),
            [BAD_RECORD_MARKER, "The mask of record", name, "is", tf.shape(mask)[:2],
             "but its image/height, image/width are", height, width])
        with tf.control_dependencies([same_size]):
            mask = tf.reshape(mask, (1, height, width))
        return tf.cast(mask, tf.float32)

    def _prepare_image_and_label(self, data):
        """Normalised image (with the additional dense features as extra channels) [h, w, c]
        and mask [1, h, w]; both resized to output_size when the aspect is not preserved."""
        height, width = data["image/height"], data["image/width"]
        label = self._decode_mask(data, height, width)
        features = [self._decode_feature(data, self._image_feature, height, width)]
        features += [self._decode_feature(data, f, height, width)
                     for f in self._additional_dense_features]
        image = tf.concat(features, axis=2) if len(features) > 1 else features[0]
        if not self._preserve_aspect_ratio:
            image = tf.image.resize(image, self._output_size, method="bilinear")
            label = tf.image.resize(tf.transpose(label, [1, 2, 0]), self._output_size,
                                    method="nearest")
            label = tf.reshape(label, [1] + self._output_size)
        return image, label

    def _finish_label(self, label):
        """Labels dict of a mask [1, h, w, 1] that was offset by +1 before padding: padding
        (0, now -1) becomes ignore_label."""
        label -= 1
        label = tf.where(tf.equal(label, -1), tf.cast(self._ignore_label, label.dtype), label)
        label = tf.squeeze(label, axis=0)
        return label, tf.not_equal(label, self._ignore_label)

    def parse_train_data(self, data):
        """(augmented training image, labels)."""
        image, label = self._prepare_image_and_label(data)
        if self._gt_is_matting_map:
            label = label / 255.0
        if self._crop_size:
            label = tf.transpose(label, [1, 2, 0])
            if self._output_size:
                image = tf.image.resize(image, self._output_size, method="bilinear")
                label = tf.image.resize(label, self._output_size, method="nearest")
            # Image and mask cropped as one tensor, so they stay aligned.
            image_mask = tf.image.random_crop(tf.concat([image, label], axis=2),
                                              self._crop_size + [tf.shape(image)[-1] + 1])
            image = image_mask[:, :, :-1]
            label = tf.reshape(image_mask[:, :, -1], [1] + self._crop_size)
        if self._aug_rand_hflip:
            image, label = random_horizontal_flip(image, label)
        train_size = self._crop_size or self._output_size
        image, image_info = resize_and_crop_image(
            image, train_size, train_size, aug_scale_min=self._aug_scale_min,
            aug_scale_max=self._aug_scale_max, centered_crop=self._centered_crop)
        # +1 so that the zero padding is told apart from class 0.
        label = resize_and_crop_masks(label[..., tf.newaxis] + 1, image_info[2, :], train_size,
                                      image_info[3, :], centered_crop=self._centered_crop)
        label, valid_mask = self._finish_label(label)
        labels = {"masks": label, "valid_masks": valid_mask, "image_info": image_info}
        return tf.cast(image, self._dtype), labels

    def parse_eval_data(self, data):
        """(evaluation image, labels)."""
        image, label = self._prepare_image_and_label(data)
        if self._gt_is_matting_map:
            label = binarize_matting_map(label / 255.0)
        label = label[..., tf.newaxis] + 1
        image, image_info = resize_and_crop_image(image, self._output_size, self._output_size,
                                                  centered_crop=self._centered_crop)
        if self._resize_eval_groundtruth:
            label = resize_and_crop_masks(label, image_info[2, :], self._output_size,
                                          image_info[3, :], centered_crop=self._centered_crop)
        else:
            label = pad_image(self._check_fits_padded_size(data, label),
                         self._groundtruth_padded_size, centered=False)
        label, valid_mask = self._finish_label(label)
        labels = {"masks": label, "valid_masks": valid_mask, "image_info": image_info}
        return tf.cast(image, self._dtype), labels

    def _check_fits_padded_size(self, data, label):
        """`label` [1, h, w, 1], after checking it fits in groundtruth_padded_size."""
        size = tf.shape(label)[1:3]
        fits = record_assert(
            tf.reduce_all(size <= self._groundtruth_padded_size),
            [BAD_RECORD_MARKER, "The ground truth of record", data.get("image/filename", ""),
             "is", size,
             "larger than groundtruth_padded_size", self._groundtruth_padded_size,
             "; raise groundtruth_padded_size to the largest evaluation image."])
        with tf.control_dependencies([fits]):
            return tf.identity(label)



def build_dataset(params, task_config,
                  input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
    """The batched dataset of `params` (a segmentation DataConfig) for a semantic segmentation
    task, as TFM's task builds it: `ignore_label` and `gt_is_matting_map` come from
    `task_config.losses`, the rest from `params` (TFM's field names)."""
    if params.tfds_name:
        raise ConfigError(f"tfds_name ({params.tfds_name!r}): lite reads TFDS for image "
                          f"classification only (TFM's segmentation TFDS decoders are "
                          f"Cityscapes'); write the data as TFRecords and set input_path.")
    losses = task_config.losses
    decoder = Decoder(image_feature=params.image_feature,
                      additional_dense_features=params.additional_dense_features)
    parser = Parser(
        output_size=params.output_size, crop_size=params.crop_size,
        ignore_label=losses.ignore_label,
        resize_eval_groundtruth=params.resize_eval_groundtruth,
        gt_is_matting_map=losses.gt_is_matting_map,
        groundtruth_padded_size=params.groundtruth_padded_size,
        aug_scale_min=params.aug_scale_min, aug_scale_max=params.aug_scale_max,
        aug_rand_hflip=params.aug_rand_hflip, preserve_aspect_ratio=params.preserve_aspect_ratio,
        dtype=params.dtype, image_feature=params.image_feature,
        additional_dense_features=params.additional_dense_features,
        centered_crop=params.centered_crop)
    reader = InputReader(params, dataset_fn=pick_dataset_fn(params.file_type),
                         decoder_fn=decoder.decode, parser_fn=parser.parse_fn(params.is_training))
    return reader.read(input_context)
