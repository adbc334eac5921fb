"""Image preprocessing ops the vision input pipelines and serving signatures share (TFM's
official/vision/ops/preprocess_ops.py): decoding, crops, the normalisation, resize-and-crop
with its `image_info` (and its box counterpart, `box_ops.resize_and_crop_boxes`, re-exported
here under TFM's name), flips, padding to a stride and to a fixed number of instances.

Functions marked `do_not_convert` are graph-safe as written (no Python control flow on
tensors, no user code called): AutoGraph's conversion would only add time to the first trace
(issue 31).
"""

from __future__ import annotations

import math
from typing import Sequence

import tensorflow as tf

from lite_launcher.vision.configs.common import MEAN_RGB, STDDEV_RGB
from lite_launcher.vision.ops.box_ops import (  # noqa: F401  (TFM's preprocess_ops names)
    horizontal_flip_boxes, resize_and_crop_boxes, vertical_flip_boxes)

CENTER_CROP_FRACTION = 0.875
ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)
# The `dtype` names a data config may give the images it feeds.
IMAGE_DTYPES = {"float32": tf.float32, "float16": tf.float16, "bfloat16": tf.bfloat16}


@tf.autograph.experimental.do_not_convert
def decode_image(image_bytes, channels: int = 3):
    """A JPEG / PNG / GIF (first frame) / BMP as uint8 [h, w, channels]."""
    image = tf.io.decode_image(image_bytes, channels=channels, expand_animations=False)
    image.set_shape([None, None, channels])
    return image


@tf.autograph.experimental.do_not_convert
def normalize_image(image, mean: Sequence[float] = MEAN_RGB,
                    stddev: Sequence[float] = STDDEV_RGB):
    """(image - mean) / stddev per channel, `mean` and `stddev` on the 0..255 scale.

    Computed as TFM's two callers round it: an integer image is converted to 0..1 first
    ((image / 255 - mean / 255) / (stddev / 255), TFM's segmentation parser); a float image in
    0..255 is normalised directly (TFM's classification parser).
    """
    if image.dtype.is_integer:
        image = tf.image.convert_image_dtype(image, tf.float32)
        image -= tf.constant([m / 255.0 for m in mean], tf.float32)
        return image / tf.constant([s / 255.0 for s in stddev], tf.float32)
    image = tf.cast(image, tf.float32)
    return (image - tf.constant(mean, tf.float32)) / tf.constant(stddev, tf.float32)


@tf.autograph.experimental.do_not_convert
def _crop_window(offset, size):
    offset_y, offset_x, _ = tf.unstack(offset)
    height, width, _ = tf.unstack(size)
    return tf.stack([offset_y, offset_x, height, width])


@tf.autograph.experimental.do_not_convert
def _sample_crop(image_shape, area_range):
    """A random box of `area_range` of the image area and aspect 3/4..4/3 (offset, size)."""
    # Op seed 1, as TFM's random_crop_image: the op refuses to run unseeded under
    # runtime.deterministic_ops (tf.config.experimental.enable_op_determinism).
    offset, size, _ = tf.image.sample_distorted_bounding_box(
        image_shape, tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, shape=[1, 1, 4]),
        min_object_covered=area_range[0], aspect_ratio_range=ASPECT_RATIO_RANGE,
        area_range=area_range, max_attempts=10, seed=1)
    return offset, size


@tf.autograph.experimental.do_not_convert
def _center_box(image_shape, fraction):
    """Offset (y, x) and side of the centred square `fraction` of the short side."""
    shape = tf.cast(image_shape[:2], tf.float32)
    side = fraction * tf.minimum(shape[0], shape[1])
    offset = tf.cast((shape - side) / 2.0, tf.int32)
    return offset, tf.cast(side, tf.int32)


@tf.autograph.experimental.do_not_convert
def center_crop(image, fraction: float = CENTER_CROP_FRACTION):
    """The centred square of side `fraction` x the short side of a decoded image."""
    offset, side = _center_box(tf.shape(image), fraction)
    return image[offset[0]:offset[0] + side, offset[1]:offset[1] + side, :]


@tf.autograph.experimental.do_not_convert
def decode_and_center_crop_jpeg(image_bytes, fraction: float = CENTER_CROP_FRACTION):
    """`center_crop` of a JPEG, decoding only the crop window."""
    offset, side = _center_box(tf.image.extract_jpeg_shape(image_bytes), fraction)
    window = tf.stack([offset[0], offset[1], side, side])
    return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)


@tf.autograph.experimental.do_not_convert
def random_crop(image, area_range=(0.08, 1.0)):
    """A random crop of a decoded image; the centre crop when no box fits (TFM's fallback)."""
    offset, size = _sample_crop(tf.shape(image), area_range)
    cropped = tf.slice(image, offset, size)
    return tf.cond(tf.reduce_all(tf.equal(tf.shape(cropped), tf.shape(image))),
                   lambda: center_crop(image), lambda: cropped)


@tf.autograph.experimental.do_not_convert
def decode_and_random_crop_jpeg(image_bytes, area_range=(0.08, 1.0)):
    """`random_crop` of a JPEG, decoding only the crop window."""
    image_shape = tf.image.extract_jpeg_shape(image_bytes)
    offset, size = _sample_crop(image_shape, area_range)
    cropped = tf.image.decode_and_crop_jpeg(image_bytes, _crop_window(offset, size), channels=3)
    return tf.cond(tf.reduce_all(tf.equal(tf.shape(cropped), image_shape)),
                   lambda: decode_and_center_crop_jpeg(image_bytes), lambda: cropped)


def pad_image(image, padded_size, centered: bool):
    """`image` ([h, w, c] or [n, h, w, c]) zero-padded to `padded_size`: at the bottom right,
    or around it when `centered`."""
    if not centered:
        return tf.image.pad_to_bounding_box(image, 0, 0, padded_size[0], padded_size[1])
    size = tf.shape(image)[-3:-1]
    return tf.image.pad_to_bounding_box(
        image, tf.maximum((padded_size[0] - size[0]) // 2, 0),
        tf.maximum((padded_size[1] - size[1]) // 2, 0), padded_size[0], padded_size[1])


def resize_and_crop_image(image, desired_size, padded_size, aug_scale_min: float = 1.0,
                          aug_scale_max: float = 1.0, method: str = "bilinear",
                          keep_aspect_ratio: bool = True, centered_crop: bool = False):
    """TFM's `preprocess_ops.resize_and_crop_image`: (image, image_info).

    The image is resized to the largest size within `desired_size` (its aspect kept), the
    desired size first scaled by a random factor in [aug_scale_min, aug_scale_max) when
    jittering; a jittered image larger than `desired_size` is cropped at a random offset. The
    result is zero-padded to `padded_size` (None: no padding).
    """
    image_size = tf.cast(tf.shape(image)[0:2], tf.float32)
    desired = tf.cast(desired_size, tf.float32)
    jitter = not (math.isclose(aug_scale_min, 1.0) and math.isclose(aug_scale_max, 1.0))
    scaled_size = desired
    if jitter:
        scaled_size = tf.round(tf.random.uniform([], aug_scale_min, aug_scale_max) * desired)
    if keep_aspect_ratio:
        scale = tf.minimum(scaled_size[0] / image_size[0], scaled_size[1] / image_size[1])
        scaled_size = tf.round(image_size * scale)
    image_scale = scaled_size / image_size
    offset = tf.zeros((2,), tf.int32)
    if jitter:
        max_offset = tf.maximum(scaled_size - desired, 0.0)
        offset = tf.cast(max_offset * tf.random.uniform([2], 0, 1), tf.int32)
    output = tf.image.resize(image, tf.cast(scaled_size, tf.int32), method=method)
    if jitter:
        output = output[offset[0]:offset[0] + desired_size[0],
                        offset[1]:offset[1] + desired_size[1], :]
    if padded_size is not None:
        output = pad_image(output, padded_size, centered_crop)
    image_info = tf.stack([image_size, desired, image_scale, tf.cast(offset, tf.float32)])
    return output, image_info


def resize_and_crop_masks(masks, image_scale, output_size, offset, centered_crop: bool = False):
    """TFM's `preprocess_ops.resize_and_crop_masks` of masks [n, h, w, c]: the nearest-neighbour
    resize, crop and zero padding that `resize_and_crop_image` applied to the image.

    The scaled size is truncated (`int(scale * size)`), as TFM's, so it can be a pixel short of
    the image's rounded size; that pixel is padding.
    """
    mask_size = tf.cast(tf.shape(masks)[1:3], tf.float32)
    scaled_size = tf.cast(image_scale * mask_size, tf.int32)
    scaled = tf.image.resize(masks, scaled_size, method="nearest")
    offset = tf.cast(offset, tf.int32)
    scaled = scaled[:, offset[0]:offset[0] + output_size[0],
                    offset[1]:offset[1] + output_size[1], :]
    return pad_image(scaled, output_size, centered_crop)


def random_horizontal_flip(image, mask, prob: float = 0.5):
    """Flips image [h, w, c] and mask [1, h, w] left-right together with probability `prob`."""
    flip = tf.less(tf.random.uniform([]), prob)
    image = tf.cond(flip, lambda: tf.image.flip_left_right(image), lambda: image)
    mask = tf.cond(flip, lambda: mask[:, :, ::-1], lambda: mask)
    return image, mask


def random_horizontal_flip_with_boxes(image, normalized_boxes, prob: float = 0.5):
    """Flips image [h, w, c] and its boxes [N, 4] (yxyx in [0, 1]) left-right together with
    probability `prob` (TFM's `random_horizontal_flip` with boxes)."""
    image, boxes, _ = random_flip_with_boxes_and_masks(image, normalized_boxes, None, prob)
    return image, boxes


def random_flip_with_boxes_and_masks(image, normalized_boxes, masks, prob: float = 0.5,
                                     vertical: bool = False):
    """Flips image [h, w, c], its boxes [N, 4] (yxyx in [0, 1]) and instance masks [N, h, w]
    (or None) together, left-right (top-bottom when `vertical`), with probability `prob`
    (TFM's `random_horizontal_flip` / `random_vertical_flip` with masks)."""
    flip = tf.less(tf.random.uniform([]), prob)
    if vertical:
        flip_image, flip_boxes = tf.image.flip_up_down, vertical_flip_boxes
        flip_masks = lambda m: m[:, ::-1, :]  # noqa: E731
    else:
        flip_image, flip_boxes = tf.image.flip_left_right, horizontal_flip_boxes
        flip_masks = lambda m: m[:, :, ::-1]  # noqa: E731
    image = tf.cond(flip, lambda: flip_image(image), lambda: image)
    boxes = tf.cond(flip, lambda: flip_boxes(normalized_boxes), lambda: normalized_boxes)
    if masks is not None:
        masks = tf.cond(flip, lambda: flip_masks(masks), lambda: masks)
    return image, boxes, masks


def random_jpeg_quality(image, min_quality: int = 20, max_quality: int = 100,
                        prob_to_apply: float = 0.6):
    """With probability `prob_to_apply`, uint8 `image` re-encoded as a JPEG of a random
    quality in [min_quality, max_quality) and decoded (TFM's augmentation)."""
    quality = tf.random.uniform([], minval=min_quality, maxval=max_quality, dtype=tf.int32)
    return tf.cond(tf.random.uniform([], maxval=1.0) > prob_to_apply, lambda: image,
                   lambda: tf.image.adjust_jpeg_quality(image, quality))


def compute_padded_size(desired_size, stride: int):
    """The smallest [height, width] at or above `desired_size` that `stride` divides (a list
    of ints for a list, an int32 tensor for a tensor), as TFM's."""
    if isinstance(desired_size, (list, tuple)):
        return [int(math.ceil(d / stride) * stride) for d in desired_size]
    return tf.cast(tf.math.ceil(tf.cast(desired_size, tf.float32) / stride) * stride, tf.int32)


def clip_or_pad_to_fixed_size(tensor, size: int, constant_values=0):
    """`tensor` cut or padded with `constant_values` along its first axis to `size` rows (its
    static shape then starts with `size`)."""
    length = tf.minimum(tf.shape(tensor)[0], size)
    tensor = tensor[:length]
    rank = len(tensor.shape)  # a static rank, as the static shape set below needs
    # One op writing the result once: a filled block concatenated to the rows wrote and
    # read it twice more (Mask R-CNN's 100 x 112 x 112 mask targets: 5 MB an image).
    paddings = tf.concat([[[0, size - length]], tf.zeros([rank - 1, 2], tf.int32)], axis=0)
    padded = tf.pad(tensor, paddings, constant_values=tf.cast(constant_values, tensor.dtype))
    padded.set_shape([size] + tensor.shape.as_list()[1:])
    return padded


def binarize_matting_map(matting_map, threshold: float = 0.5):
    """1.0 where the matting map is above `threshold`, else 0.0."""
    return tf.cast(tf.greater(matting_map, threshold), tf.float32)
