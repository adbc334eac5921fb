"""Clip (video) preprocessing ops with TFM's names and semantics (TFM's
official/vision/ops/preprocess_ops_3d.py), on plain TensorFlow ops.

A clip is a tensor whose first dimension is time: `[T]` encoded frames (strings) before
decoding, `[T, H, W, C]` pixels after. Temporal sampling wraps around: a clip shorter than the
window asked for is read again from its start (TFM's behaviour), so `num_steps` frames always
come out; an empty clip cannot be wrapped and fails with a TensorFlow error.

Functions marked `do_not_convert` are graph-safe as written (no Python control flow on
tensors), so AutoGraph's conversion would only add time to the first trace (issue 31).
"""

from __future__ import annotations

from typing import Optional, Tuple

import tensorflow as tf

do_not_convert = tf.autograph.experimental.do_not_convert


@do_not_convert
def _wrapped_indices(sequence_length, num_steps: int, stride, offset):
    """`num_steps` frame indices from `offset` every `stride` frames, wrapping around a
    sequence of `sequence_length` frames (TFM repeats the sequence until long enough: the
    same indices)."""
    steps = offset + tf.range(num_steps) * stride
    return tf.math.floormod(steps, sequence_length)


@do_not_convert
def sample_linspace_sequence(sequence, num_windows: int, num_steps: int, stride: int):
    """`num_windows` windows of `num_steps` steps (every `stride`), their first steps linearly
    spaced from 0 to `len(sequence) - num_steps * stride` (0 when the sequence is shorter:
    then every window starts at 0 and wraps around), concatenated along the first dimension:
    `[num_windows * num_steps, ...]`. What evaluation reads to cover a whole clip."""
    sequence_length = tf.shape(sequence)[0]
    max_offset = tf.maximum(0, sequence_length - num_steps * stride)
    # float32 linspace truncated to int, as TFM: the same first frames for the same lengths.
    offsets = tf.cast(tf.linspace(0.0, tf.cast(max_offset, tf.float32), num_windows), tf.int32)
    indices = tf.reshape(
        tf.stack([_wrapped_indices(sequence_length, num_steps, stride, offsets[i])
                  for i in range(num_windows)]), [num_windows * num_steps])
    return tf.gather(sequence, indices)


@do_not_convert
def sample_sequence(sequence, num_steps: int, random: bool, stride,
                    seed: Optional[int] = None):
    """One window of `num_steps` steps every `stride` (a Python int or an int32 tensor).

    `random`: the first step is uniform in [0, len - (num_steps - 1) * stride) (in [0, len)
    when the sequence is not longer than (num_steps - 1) * stride), as TFM's training sampler.
    Otherwise the window is centred: it starts at max(0, (len - num_steps * stride) // 2).
    A window that runs past the end wraps around to the start.
    """
    sequence_length = tf.shape(sequence)[0]
    if random:
        length = tf.cast(sequence_length, tf.float32)
        span = tf.cast(num_steps - 1, tf.float32) * tf.cast(stride, tf.float32)
        max_offset = tf.where(length > span, length - span, length)
        offset = tf.random.uniform((), maxval=tf.cast(max_offset, tf.int32), dtype=tf.int32,
                                   seed=seed)
    else:
        offset = tf.maximum(0, (sequence_length - num_steps * stride) // 2)
    indices = _wrapped_indices(sequence_length, num_steps, stride, offset)
    indices.set_shape((num_steps,))
    return tf.gather(sequence, indices)


@do_not_convert
def sample_segment_sequence(sequence, num_frames: int, is_training: bool,
                            seed: Optional[int] = None):
    """Temporal-segment-network sampling (https://arxiv.org/abs/1608.00859): the sequence cut
    into `num_frames` equal segments, one frame from each: uniformly random in training, the
    segment's middle otherwise (TFM's)."""
    sequence_length = tf.cast(tf.shape(sequence)[0], tf.float32)
    segment_length = tf.cast(sequence_length // num_frames, tf.int32)
    starts = tf.cast(tf.linspace(0.0, sequence_length, num_frames + 1), tf.int32)[:-1]
    if is_training:
        random_offsets = tf.random.uniform((num_frames,), 0, tf.maximum(segment_length, 1),
                                           dtype=tf.int32, seed=seed)
        offsets = tf.where(segment_length == 0, tf.zeros_like(random_offsets), random_offsets)
    else:
        offsets = tf.fill((num_frames,), segment_length // 2)
    indices = starts + offsets
    indices.set_shape((num_frames,))
    return tf.gather(sequence, indices)


def _decode_frames(encoded, decode_one):
    return tf.map_fn(decode_one, encoded, fn_output_signature=tf.uint8)


@do_not_convert
def decode_jpeg(image_string, channels: int = 0):
    """`[T]` JPEG strings -> uint8 `[T, H, W, C]` (`channels` 0: as encoded, no static C)."""
    return _decode_frames(image_string,
                          lambda frame: tf.io.decode_jpeg(frame, channels=channels))


@do_not_convert
def decode_image(image_string, channels: int = 0):
    """`[T]` PNG or JPEG (or GIF first frame, BMP) strings -> uint8 `[T, H, W, C]`; frames of
    different sizes fail (a clip's frames share one size)."""
    return _decode_frames(image_string, lambda frame: tf.io.decode_image(
        frame, channels=channels, expand_animations=False))


def _static_or_dynamic(frames):
    """Each dimension of `frames`: the static size where known, else the dynamic one."""
    dynamic = tf.shape(frames)
    return [dynamic[i] if size is None else size
            for i, size in enumerate(frames.shape.as_list())]


@do_not_convert
def _three_crops(frames, target_height: int, target_width: int):
    """Three crops along the long side (start, middle, end), concatenated along time."""
    seq_len, height, width, channels = _static_or_dynamic(frames)
    size = tf.stack([seq_len, target_height, target_width, channels])
    tall = tf.greater_equal(height, width)
    # TFM's middle offset: half the side (float) minus half the target (int), rounded half to
    # even; the last crop ends at the long side's end.
    middle = tf.math.round(tf.where(
        tall, tf.cast(height, tf.float32) / 2 - target_height // 2,
        tf.cast(width, tf.float32) / 2 - target_width // 2))
    end = tf.where(tall, height - target_height, width - target_width)
    zero = tf.zeros((), tf.int32)
    crops = []
    for along in (zero, tf.cast(middle, tf.int32), end):
        offset = tf.stack([zero, tf.where(tall, along, zero), tf.where(tall, zero, along), zero])
        crops.append(tf.slice(frames, offset, size))
    return tf.concat(crops, axis=0)


def crop_image(frames, target_height: int, target_width: int, random: bool = False,
               num_crops: int = 1, seed: Optional[int] = None):
    """Crops every frame of `[T, H, W, C]` `frames` at the same place.

    `random`: a uniformly placed crop (`tf.image.random_crop`). Otherwise `num_crops` 1 is the
    centre crop (zero padding where the frames are smaller), 3 the start, middle and end of the
    long side, concatenated along time (`[3 * T, ...]`).
    """
    if random:
        seq_len, _, _, channels = _static_or_dynamic(frames)
        return tf.image.random_crop(frames, (seq_len, target_height, target_width, channels),
                                    seed=seed)
    if num_crops == 1:
        return tf.image.resize_with_crop_or_pad(frames, target_height, target_width)
    if num_crops == 3:
        return _three_crops(frames, target_height, target_width)
    raise NotImplementedError(f"num_crops {num_crops!r}: only 1 (centre) and 3 crops exist.")


@do_not_convert
def resize_smallest(frames, min_resize: int):
    """Bilinear resize so that min(H, W) is `min_resize` (the other side floor-scaled, at
    least `min_resize`), back in the input dtype (truncated); no resize when the size is
    already right."""
    shape = tf.shape(frames)
    input_h, input_w = shape[1], shape[2]
    output_h = tf.maximum(min_resize, (input_h * min_resize) // input_w)
    output_w = tf.maximum(min_resize, (input_w * min_resize) // input_h)

    def resize():
        return tf.cast(tf.image.resize(frames, (output_h, output_w)), frames.dtype)

    needed = tf.logical_or(tf.not_equal(input_h, output_h), tf.not_equal(input_w, output_w))
    return tf.cond(needed, resize, lambda: frames)


@do_not_convert
def random_crop_resize(frames, output_h: int, output_w: int, num_frames: int,
                       num_channels: int, aspect_ratio: Tuple[float, float],
                       area_range: Tuple[float, float]):
    """One random box for the whole clip (`area_range` of the frame area, width/height in
    `aspect_ratio` scaled by output_w / output_h; 100 attempts, else the whole frame), cut from
    every frame and resized bilinearly to (output_h, output_w) in the input dtype."""
    shape = tf.shape(frames)
    factor = output_w / output_h
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape[1:], bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4]),
        min_object_covered=0.1,
        aspect_ratio_range=(aspect_ratio[0] * factor, aspect_ratio[1] * factor),
        area_range=area_range, max_attempts=100, use_image_if_no_bounding_boxes=True,
        # An op seed (TFM gives none): the op refuses to run unseeded under
        # runtime.deterministic_ops (tf.config.experimental.enable_op_determinism).
        seed=1)
    offset = tf.stack([0, begin[0], begin[1], 0])
    window = tf.stack([shape[0], size[0], size[1], shape[3]])
    cropped = tf.slice(frames, offset, window)
    resized = tf.cast(tf.image.resize(cropped, (output_h, output_w)), frames.dtype)
    resized.set_shape((num_frames, output_h, output_w, num_channels))
    return resized


@do_not_convert
def random_flip_left_right(frames, seed: Optional[int] = None):
    """All frames mirrored together, with probability 1/2."""
    flip = tf.random.uniform((), minval=0, maxval=2, dtype=tf.int32, seed=seed)
    return tf.cond(tf.equal(flip, 1), lambda: tf.image.flip_left_right(frames),
                   lambda: frames)


@do_not_convert
def random_rotation(frames, seed: Optional[int] = None):
    """All frames rotated together by 0, 90, 180 or 270 degrees (uniform; non-square frames
    swap H and W)."""
    quarter_turns = tf.random.uniform((), minval=0, maxval=4, dtype=tf.int32, seed=seed)
    return tf.cond(quarter_turns > 0, lambda: tf.image.rot90(frames, k=quarter_turns),
                   lambda: frames)


@do_not_convert
def normalize_image(frames, zero_centering_image: bool, dtype: tf.DType = tf.float32):
    """Pixels 0..255 -> [-1, 1] (`zero_centering_image`) or [0, 1], in `dtype`."""
    frames = tf.cast(frames, dtype)
    if zero_centering_image:
        return frames * (2.0 / 255.0) - 1.0
    return frames / 255.0

