"""Image augmentation (and its policies with boxes for detection), with TFM's semantics, on
plain TensorFlow ops.

Everything here runs in graph mode (inside `tf.data.Dataset.map`) and needs nothing beyond
TensorFlow: geometric ops use `tf.raw_ops.ImageProjectiveTransformV3`, colour ops use `tf.image`
and arithmetic. The public pieces mirror `official.vision.ops.augment` and
`preprocess_ops.color_jitter`:

* `RandAugment` / `AutoAugment`: `.distort(image)` on a uint8 `[H, W, 3]` image or a
  `[T, H, W, 3]` clip (one policy draw for the whole clip, each op on all frames alike, as
  TFM's video parser; cutout paints a box in time and space, `cutout_video`), and
  `.distort_with_boxes(image, boxes)` for detection: TFM's box-aware ops ('detection_v0',
  `RandAugment.build_for_detection`) move the normalised boxes with the image
  (`box_augment`); every other op leaves them as they are.
* `RandomErasing`: `.distort(image)` on a float `[H, W, C]` image.
* `MixupAndCutmix`: called on a float batch `[B, H, W, C]` and int labels `[B]`.
* `color_jitter`: random brightness, contrast, saturation (in that fixed order, as TFM).
* `SSDRandomCrop` (from `box_augment`): `.distort_with_boxes(image, boxes)` for detection.

Geometric ops (from `box_augment`) fill uncovered pixels by reflection, as TFM 2.20 does (its
grey `replace` value never shows); `fill_mode='constant'` on them gives the original grey fill.

Where TFM has a plain bug this module does the evident intent and says so in the docstring:
cutmix boxes use the image width for their width and the label weight is the pasted area;
random erasing keeps its box inside the image and within [min_area, max_area];
`magnitude_std` is the standard deviation of the magnitude noise; the DeiT III blur draws its
sigma per image rather than once per trace.
"""

import functools
import math

import tensorflow as tf

from lite_launcher.vision.ops import box_augment
# The geometric ops and SSD's crop live beside their box rules; they are TFM's names here too.
from lite_launcher.vision.ops.box_augment import (  # pylint: disable=unused-import
    POLICY_FILL as _POLICY_FILL, SSDRandomCrop, crop_normalized_boxes, filter_boxes_by_ioa,
    rotate, shear_x, shear_y, translate_x, translate_y)

# Magnitudes (levels) of the AutoAugment / RandAugment ops run from 0 to this value.
_MAX_LEVEL = 10.0


# --------------------------------------------------------------------------------------------
# Pixel ops on uint8 [H, W, C] images.
# --------------------------------------------------------------------------------------------

def blend(image1, image2, factor):
    """Returns `image1 + factor * (image2 - image1)` clipped to [0, 255], as uint8.

    factor 0 gives image1, 1 gives image2, values in between interpolate and values above 1
    extrapolate (PIL's ImageEnhance). Fractions are truncated, as TFM's cast does.
    """
    image1 = tf.cast(image1, tf.float32)
    image2 = tf.cast(image2, tf.float32)
    factor = tf.cast(factor, tf.float32)
    mixed = image1 + factor * (image2 - image1)
    return tf.cast(tf.clip_by_value(mixed, 0.0, 255.0), tf.uint8)


def grayscale(image):
    """Returns the luma of an RGB image repeated over three channels (same dtype)."""
    return tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(image))


def invert(image):
    """Returns `255 - image`."""
    image = tf.convert_to_tensor(image)
    return 255 - image


def solarize(image, threshold=128):
    """Inverts every pixel at or above `threshold`."""
    image = tf.convert_to_tensor(image)
    below = tf.cast(image, tf.int32) < tf.cast(threshold, tf.int32)
    return tf.where(below, image, 255 - image)


def solarize_add(image, addition=0, threshold=128):
    """Adds `addition` (clipped to [0, 255]) to every pixel below `threshold`."""
    image = tf.convert_to_tensor(image)
    pixels = tf.cast(image, tf.int32)
    added = tf.cast(tf.clip_by_value(pixels + tf.cast(addition, tf.int32), 0, 255), image.dtype)
    return tf.where(pixels < tf.cast(threshold, tf.int32), added, image)


def posterize(image, bits):
    """Keeps the `bits` most significant bits of every pixel.

    TFM shifts right then left by `8 - bits`; TensorFlow clamps a shift to the bit width, so
    `bits=0` keeps the top bit rather than blacking the image. The clamp is written out here so
    that the result does not rest on implementation-defined shifts.
    """
    image = tf.convert_to_tensor(image)
    shift = tf.clip_by_value(8 - tf.cast(bits, tf.int32), 0, 7)
    mask = 256 - tf.bitwise.left_shift(1, shift)
    return tf.cast(tf.bitwise.bitwise_and(tf.cast(image, tf.int32), mask), image.dtype)


def color(image, factor):
    """PIL's Color enhancement: blends the image with its greyscale version."""
    return blend(grayscale(image), image, factor)


def contrast(image, factor):
    """Contrast by `tf.image.adjust_contrast` (per-channel mean), as TFM."""
    return tf.image.adjust_contrast(image, tf.cast(factor, tf.float32))


def brightness(image, factor):
    """PIL's Brightness enhancement: blends the image with black."""
    image = tf.convert_to_tensor(image)
    return blend(tf.zeros_like(image), image, factor)


def _per_frame_conv(pixels, kernel, padding):
    """Depthwise 3x3 `kernel` on each frame of a float `[..., H, W, C]` image or clip."""
    shape = tf.shape(pixels)
    frames = tf.reshape(pixels, tf.concat([[-1], shape[-3:]], axis=0))
    if padding != "VALID":
        frames = tf.pad(frames, [[0, 0], [1, 1], [1, 1], [0, 0]], mode=padding)
    out = tf.nn.depthwise_conv2d(frames, kernel, strides=[1, 1, 1, 1], padding="VALID")
    return tf.reshape(out, tf.concat([shape[:-3], tf.shape(out)[1:]], axis=0))


def sharpness(image, factor):
    """PIL's Sharpness enhancement: blends with PIL's 3x3 SMOOTH filter; borders stay as is.
    An `[H, W, C]` image or a `[T, H, W, C]` clip (each frame filtered alike)."""
    image = tf.convert_to_tensor(image)
    channels = image.shape[-1]
    kernel = tf.constant([[1., 1., 1.], [1., 5., 1.], [1., 1., 1.]]) / 13.0
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, channels, 1])
    if image.shape.rank == 4:
        # TFM smooths a clip with a 1x3x3 conv3d per channel: the same sums in another order,
        # which can round a pixel the other way; that order is kept so pixels equal TFM's.
        kernel_3d = tf.reshape(kernel[:, :, :1, :], [1, 3, 3, 1, 1])
        smoothed = tf.concat([
            tf.nn.conv3d(channel, kernel_3d, [1, 1, 1, 1, 1], padding="VALID")
            for channel in tf.split(tf.cast(image, tf.float32)[None], channels, axis=-1)],
            axis=-1)[0]
    else:
        smoothed = _per_frame_conv(tf.cast(image, tf.float32), kernel, "VALID")
    smoothed = tf.cast(tf.clip_by_value(smoothed, 0.0, 255.0), image.dtype)
    # The 1-pixel border has no full 3x3 neighbourhood: PIL keeps the original pixels there.
    border = [[0, 0]] * (image.shape.rank - 3) + [[1, 1], [1, 1], [0, 0]]
    interior = tf.pad(tf.ones_like(smoothed, dtype=tf.bool), border)
    degenerate = tf.where(interior, tf.pad(smoothed, border), image)
    return blend(degenerate, image, factor)


def gaussian_blur(image, sigma):
    """3x3 Gaussian blur with standard deviation `sigma` (a scalar, may be a tensor), of an
    image or of each frame of a clip.

    Edges are padded by reflection, as TFM's `gaussian_filter2d`; integer results truncate.
    """
    image = tf.convert_to_tensor(image)
    sigma = tf.maximum(tf.cast(sigma, tf.float32), 1e-3)  # sigma 0 would divide by zero
    weights = tf.nn.softmax(-tf.constant([1.0, 0.0, 1.0]) / (2.0 * sigma ** 2))
    kernel = weights[:, None] * weights[None, :]
    kernel = tf.tile(kernel[:, :, None, None], [1, 1, image.shape[-1], 1])
    blurred = _per_frame_conv(tf.cast(image, tf.float32), kernel, "REFLECT")
    return tf.cast(blurred, image.dtype)


def autocontrast(image):
    """Stretches every channel linearly so that its minimum becomes 0 and its maximum 255
    (over the whole clip for a `[T, H, W, C]` clip, as TFM).

    A channel with a single value is left unchanged.
    """
    image = tf.convert_to_tensor(image)
    pixels = tf.cast(image, tf.float32)
    axes = list(range(image.shape.rank - 1))
    low = tf.reduce_min(pixels, axis=axes, keepdims=True)
    high = tf.reduce_max(pixels, axis=axes, keepdims=True)
    spread = high > low
    scale = 255.0 / tf.where(spread, high - low, 1.0)
    stretched = tf.clip_by_value(pixels * scale - low * scale, 0.0, 255.0)
    return tf.where(spread, tf.cast(stretched, image.dtype), image)


def _equalize_channel(channel):
    """PIL's ImageOps.equalize on one uint8 channel of any shape."""
    pixels = tf.cast(channel, tf.int32)
    histogram = tf.math.bincount(tf.reshape(pixels, [-1]), minlength=256, maxlength=256)
    # PIL leaves the brightest populated value out of the step, so that it maps to 255.
    brightest_count = tf.reduce_sum(tf.cast(tf.equal(pixels, tf.reduce_max(pixels)), tf.int32))
    step = (tf.size(pixels) - brightest_count) // 255
    safe_step = tf.maximum(step, 1)
    lut = (tf.cumsum(histogram) + safe_step // 2) // safe_step
    lut = tf.clip_by_value(tf.concat([[0], lut[:-1]], axis=0), 0, 255)
    equalized = tf.where(step > 0, tf.gather(lut, pixels), pixels)
    return tf.cast(equalized, channel.dtype)


def equalize(image):
    """Histogram equalisation of every channel, as PIL's ImageOps.equalize."""
    image = tf.convert_to_tensor(image)
    return tf.stack([_equalize_channel(image[..., c]) for c in range(image.shape[-1])], axis=-1)


# --------------------------------------------------------------------------------------------
# Rectangles (the geometric ops are in box_augment).
# --------------------------------------------------------------------------------------------

def _in_range(size, start, stop):
    """Which of 0..size-1 lie in [start, stop); bounds of shape [B] give a [B, size] result."""
    index = tf.range(size)
    return (index >= tf.convert_to_tensor(start)[..., None]) & (
        index < tf.convert_to_tensor(stop)[..., None])


def _box_mask(height, width, top, bottom, left, right):
    """Boolean [..., H, W, 1] mask of rows [top, bottom) and columns [left, right).

    The bounds may be scalars or vectors of shape [B] (giving a [B, H, W, 1] mask).
    """
    in_rows = _in_range(height, top, bottom)
    in_cols = _in_range(width, left, right)
    return (in_rows[..., :, None] & in_cols[..., None, :])[..., None]


def cutout(image, pad_size, replace=0):
    """Paints a (2*pad_size)-square centred on a uniformly random pixel with `replace`.

    The square is clipped at the image border. `replace` is a scalar or one value per channel.
    A `[T, H, W, C]` clip gets `cutout_video` instead (`pad_size` unused, as TFM).
    """
    image = tf.convert_to_tensor(image)
    if image.shape.rank == 4:
        return cutout_video(image, replace=replace)
    height, width = tf.shape(image)[0], tf.shape(image)[1]
    center_y = tf.random.uniform([], 0, height, dtype=tf.int32)
    center_x = tf.random.uniform([], 0, width, dtype=tf.int32)
    pad_size = tf.cast(pad_size, tf.int32)
    mask = _box_mask(height, width, center_y - pad_size, center_y + pad_size,
                     center_x - pad_size, center_x + pad_size)
    fill = tf.cast(tf.broadcast_to(replace, tf.shape(image)), image.dtype)
    return tf.where(mask, fill, image)


def cutout_video(video, mask_shape=None, replace=0):
    """Paints a random box of a `[T, H, W, C]` clip with `replace` (TFM's cutout of a clip):
    centred on a uniform (frame, row, column), clipped at the borders, of half-sizes
    `mask_shape // 2` (at least 1) for (frames, rows, columns), or drawn uniformly from
    [1, max(2, T // 4)), [max(1, H // 4), max(2, H // 2)) and likewise for W."""
    video = tf.convert_to_tensor(video)
    size = tf.shape(video)[:3]

    def uniform(low, high):  # integers in [low, high), one per dimension
        return low + tf.cast(tf.random.uniform([3]) * tf.cast(high - low, tf.float32), tf.int32)

    center = uniform(tf.zeros([3], tf.int32), size)
    if mask_shape is not None:
        half = tf.maximum(1, tf.cast(mask_shape, tf.int32) // 2)
    else:
        half = uniform(tf.concat([[1], tf.maximum(1, size[1:] // 4)], 0),
                       tf.maximum(2, tf.concat([size[:1] // 4, size[1:] // 2], 0)))
    start, stop = center - half, center + half
    mask = _box_mask(size[1], size[2], start[1], stop[1], start[2], stop[2])
    mask = mask[None] & _in_range(size[0], start[0], stop[0])[:, None, None, None]
    fill = tf.cast(tf.broadcast_to(replace, tf.shape(video)), video.dtype)
    return tf.where(mask, fill, video)


# --------------------------------------------------------------------------------------------
# Policy ops: name -> op at a level in [0, 10].
# --------------------------------------------------------------------------------------------

def _random_sign(value):
    """Negates `value` with probability 1/2 (geometric ops go either way)."""
    return tf.where(tf.random.uniform([]) < 0.5, -value, value)


def _scaled_int(level, multiplier):
    """int(level / 10 * multiplier), for a Python or a tensor level (level >= 0)."""
    scaled = (level / _MAX_LEVEL) * multiplier
    if isinstance(scaled, (int, float)):
        return int(scaled)
    return tf.cast(scaled, tf.int32)


def _enhance_factor(level):
    return (level / _MAX_LEVEL) * 1.8 + 0.1


def _rotate_degrees(level):
    return _random_sign(level / _MAX_LEVEL * 30.0)


def _shear_level(level):
    return _random_sign(level / _MAX_LEVEL * 0.3)


def _shift_pixels(level, translate_const):
    return _random_sign(level / _MAX_LEVEL * float(translate_const))


def _image_ops(cutout_const, translate_const):
    """Maps each image op name to `fn(image, level)`; random signs are drawn when `fn` runs."""
    return {
        "AutoContrast": lambda image, level: autocontrast(image),
        "Equalize": lambda image, level: equalize(image),
        "Invert": lambda image, level: invert(image),
        "Rotate": lambda image, level: rotate(image, _rotate_degrees(level)),
        "Posterize": lambda image, level: posterize(image, _scaled_int(level, 4)),
        "Solarize": lambda image, level: solarize(image, _scaled_int(level, 256)),
        "SolarizeAdd": lambda image, level: solarize_add(image, _scaled_int(level, 110)),
        "Color": lambda image, level: color(image, _enhance_factor(level)),
        "Contrast": lambda image, level: contrast(image, _enhance_factor(level)),
        "Brightness": lambda image, level: brightness(image, _enhance_factor(level)),
        "Sharpness": lambda image, level: sharpness(image, _enhance_factor(level)),
        "ShearX": lambda image, level: shear_x(image, _shear_level(level)),
        "ShearY": lambda image, level: shear_y(image, _shear_level(level)),
        "TranslateX": lambda image, level: translate_x(
            image, _shift_pixels(level, translate_const)),
        "TranslateY": lambda image, level: translate_y(
            image, _shift_pixels(level, translate_const)),
        "Cutout": lambda image, level: cutout(
            image, _scaled_int(level, float(cutout_const)), _POLICY_FILL),
        # AutoAugment only (DeiT III's three augmentations).
        "Grayscale": lambda image, level: grayscale(image),
        # TFM's name for a blur: sigma uniform in [level / 10, translate_const * level / 10].
        "Gaussian_Noise": lambda image, level: gaussian_blur(image, tf.random.uniform(
            [], level / _MAX_LEVEL, float(translate_const) * level / _MAX_LEVEL)),
    }


def _policy_ops(cutout_const, translate_const):
    """Maps each op name to `fn(image, boxes, level, prob)` returning (image, boxes): image ops
    leave the boxes alone, TFM's `_BBox` ops move them with the image. `prob` is the op's
    probability in its sub-policy, which TranslateY_Only_BBoxes also uses per box."""
    ops = {name: (lambda image, boxes, level, prob, fn=fn: (fn(image, level), boxes))
           for name, fn in _image_ops(cutout_const, translate_const).items()}
    ops.update({
        "Rotate_BBox": lambda image, boxes, level, prob: box_augment.rotate_with_bboxes(
            image, boxes, _rotate_degrees(level)),
        "ShearX_BBox": lambda image, boxes, level, prob: box_augment.shear_with_bboxes(
            image, boxes, _shear_level(level), shear_horizontal=True),
        "ShearY_BBox": lambda image, boxes, level, prob: box_augment.shear_with_bboxes(
            image, boxes, _shear_level(level), shear_horizontal=False),
        "TranslateX_BBox": lambda image, boxes, level, prob: box_augment.translate_bbox(
            image, boxes, _shift_pixels(level, translate_const), shift_horizontal=True),
        "TranslateY_BBox": lambda image, boxes, level, prob: box_augment.translate_bbox(
            image, boxes, _shift_pixels(level, translate_const), shift_horizontal=False),
        # Box contents move by up to 120 pixels whatever translate_const, as in TFM.
        "TranslateY_Only_BBoxes": lambda image, boxes, level, prob: (
            box_augment.translate_y_only_bboxes(image, boxes, prob, _shift_pixels(level, 120))),
    })
    return ops


# RandAugment's op list, in TFM's order.
RAND_AUGMENT_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color",
    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY",
    "Cutout", "SolarizeAdd",
)
# The box-aware op RandAugment.build_for_detection puts in place of each geometric op.
_BOX_AWARE_OPS = {"Rotate": "Rotate_BBox", "ShearX": "ShearX_BBox", "ShearY": "ShearY_BBox",
                  "TranslateX": "TranslateX_BBox", "TranslateY": "TranslateY_BBox"}
# The ops that need the boxes (distort_with_boxes).
BOX_OPS = tuple(_BOX_AWARE_OPS.values()) + ("TranslateY_Only_BBoxes",)
# Ops an AutoAugment policy may name.
AUTO_AUGMENT_OPS = RAND_AUGMENT_OPS + ("Grayscale", "Gaussian_Noise") + BOX_OPS


def _to_uint8(image):
    """Policies work on uint8 pixels: other dtypes are clipped to [0, 255] and cast."""
    image = tf.convert_to_tensor(image)
    if image.dtype == tf.uint8:
        return image
    return tf.cast(tf.clip_by_value(image, 0.0, 255.0), tf.uint8)


def _keep_shape(fn, image, boxes):
    """Runs `fn(image, boxes)` and restores the static shapes that some ops lose."""
    output, output_boxes = fn(image, boxes)
    output.set_shape(image.shape)
    if boxes is not None:
        output_boxes.set_shape(boxes.shape)
    return output, output_boxes


def _refuse_box_ops(names, augmenter):
    """`distort(image)` has no boxes: a ValueError naming the box-aware ops among `names` (TFM
    fails on them too) rather than an image moved without its boxes."""
    moving = sorted(set(names) & set(BOX_OPS))
    if moving:
        raise ValueError(f"{augmenter} ops {', '.join(moving)} need boxes: call "
                         f"distort_with_boxes(image, boxes), not distort(image)")


def _policy_inputs(image, bboxes):
    """(uint8 image, float32 boxes, the image's dtype) for a policy; boxes may be None (an
    image alone: the image ops pass None on)."""
    image = tf.convert_to_tensor(image)
    bboxes = None if bboxes is None else tf.convert_to_tensor(bboxes, tf.float32)
    return _to_uint8(image), bboxes, image.dtype


class ImageAugment:
    """Base of the single-image augmenters: `distort(image)` returns an image of the same shape."""

    def distort(self, image):
        """Returns the augmented version of `image` (values in [0, 255])."""
        raise NotImplementedError

    def distort_with_boxes(self, image, bboxes):
        """Returns (augmented `image`, its normalised boxes `bboxes` [N, 4] following it)."""
        raise NotImplementedError


class RandAugment(ImageAugment):
    """RandAugment (https://arxiv.org/abs/1909.13719) with TFM's ops and magnitude mapping.

    Each of `num_layers` layers picks one of the available ops, or none, uniformly
    (`len(ops) + 1` choices, as TFM), and applies it at `magnitude`; with `prob_to_apply`
    set, a layer's result is kept only with that probability.

    Args:
      num_layers: ops applied in sequence (N in the paper).
      magnitude: shared level, usually in [0, 10] (M in the paper).
      cutout_const: cutout half-size at level 10.
      translate_const: translation in pixels at level 10.
      magnitude_std: if > 0, every op's level is drawn from N(magnitude, magnitude_std) clipped
        to [0, 10] (timm's "mstd"; TFM draws unit-variance noise whatever the value).
      prob_to_apply: probability of keeping each layer's result; None keeps it always.
      exclude_ops: op names never to apply.
    """

    def __init__(self, num_layers=2, magnitude=10., cutout_const=40., translate_const=100.,
                 magnitude_std=0.0, prob_to_apply=None, exclude_ops=None):
        self.num_layers = int(num_layers)
        self.magnitude = float(magnitude)
        self.cutout_const = float(cutout_const)
        self.translate_const = float(translate_const)
        self.magnitude_std = float(magnitude_std)
        self.prob_to_apply = None if prob_to_apply is None else float(prob_to_apply)
        if self.num_layers < 0:
            raise ValueError(f"RandAugment num_layers ({num_layers}) must be >= 0")
        # Above 10 is allowed, as in TFM: the ops extrapolate (timm's "increasing" severity).
        if self.magnitude < 0:
            raise ValueError(f"RandAugment magnitude ({magnitude}) must be >= 0")
        if self.prob_to_apply is not None and not 0.0 <= self.prob_to_apply <= 1.0:
            raise ValueError(f"RandAugment prob_to_apply ({prob_to_apply}) must be in [0, 1]")
        if isinstance(exclude_ops, str):
            exclude_ops = [exclude_ops]
        exclude_ops = list(exclude_ops or [])
        for name in exclude_ops:
            if name not in RAND_AUGMENT_OPS:
                raise ValueError(f"RandAugment exclude_ops: unknown op {name!r}; valid ops are "
                                 f"{', '.join(RAND_AUGMENT_OPS)}")
        self.available_ops = [name for name in RAND_AUGMENT_OPS if name not in exclude_ops]
        if not self.available_ops:
            raise ValueError("RandAugment exclude_ops excludes every op; keep at least one or "
                             "turn RandAugment off")
        self._ops = _policy_ops(self.cutout_const, self.translate_const)

    def _level(self):
        if self.magnitude_std > 0:
            noisy = self.magnitude + self.magnitude_std * tf.random.normal([])
            return tf.clip_by_value(noisy, 0.0, _MAX_LEVEL)
        return self.magnitude

    @classmethod
    def build_for_detection(cls, *args, **kwargs):
        """A RandAugment (same arguments) whose Rotate, ShearX/Y and TranslateX/Y are TFM's
        box-aware ops, so that `distort_with_boxes` moves the boxes with the image;
        `exclude_ops` names the plain ops."""
        augmenter = cls(*args, **kwargs)
        augmenter.available_ops = [_BOX_AWARE_OPS.get(name, name)
                                   for name in augmenter.available_ops]
        return augmenter

    def _apply(self, name, image, boxes):
        return self._ops[name](image, boxes, self._level(), 1.0)

    def distort(self, image):
        """Applies the RandAugment layers to one `[H, W, 3]` image or `[T, H, W, 3]` clip;
        returns the input dtype."""
        _refuse_box_ops(self.available_ops, "RandAugment")
        return self.distort_with_boxes(image, None)[0]

    def distort_with_boxes(self, image, bboxes):
        """`distort` of an image with its normalised boxes `[N, 4]`: (image, boxes). The boxes
        move with the box-aware ops (`build_for_detection`); other ops leave them alone."""
        image, boxes, input_dtype = _policy_inputs(image, bboxes)
        for _ in range(self.num_layers):
            branches = [functools.partial(_keep_shape, functools.partial(self._apply, name),
                                          image, boxes) for name in self.available_ops]
            selected = tf.random.uniform([], maxval=len(branches) + 1, dtype=tf.int32)
            augmented, moved = tf.switch_case(
                selected, branches, default=lambda x=image, b=boxes: (tf.identity(x), b))
            if self.prob_to_apply is not None:
                keep = tf.random.uniform([]) < self.prob_to_apply
                augmented = tf.where(keep, augmented, image)
                moved = None if boxes is None else tf.where(keep, moved, boxes)
            image, boxes = augmented, moved
        return tf.cast(image, input_dtype), boxes


# AutoAugment sub-policies: (op, probability, level) applied in sequence.
_POLICIES = {
    # The ImageNet policy of the AutoAugment paper (TFM's 'v0').
    "v0": [
        [("Equalize", .8, 1), ("ShearY", .8, 4)], [("Color", .4, 9), ("Equalize", .6, 3)],
        [("Color", .4, 1), ("Rotate", .6, 8)], [("Solarize", .8, 3), ("Equalize", .4, 7)],
        [("Solarize", .4, 2), ("Solarize", .6, 2)], [("Color", .2, 0), ("Equalize", .8, 8)],
        [("Equalize", .4, 8), ("SolarizeAdd", .8, 3)], [("ShearX", .2, 9), ("Rotate", .6, 8)],
        [("Color", .6, 1), ("Equalize", 1., 2)], [("Invert", .4, 9), ("Rotate", .6, 0)],
        [("Equalize", 1., 9), ("ShearY", .6, 3)], [("Color", .4, 7), ("Equalize", .6, 0)],
        [("Posterize", .4, 6), ("AutoContrast", .4, 7)], [("Solarize", .6, 8), ("Color", .6, 9)],
        [("Solarize", .2, 4), ("Rotate", .8, 9)], [("Rotate", 1., 7), ("TranslateY", .8, 9)],
        [("ShearX", 0., 0), ("Solarize", .8, 4)], [("ShearY", .8, 0), ("Color", .6, 4)],
        [("Color", 1., 0), ("Rotate", .6, 2)], [("Equalize", .8, 4), ("Equalize", 0., 8)],
        [("Equalize", 1., 4), ("AutoContrast", .6, 2)],
        [("ShearY", .4, 7), ("SolarizeAdd", .6, 7)],
        [("Posterize", .8, 2), ("Solarize", .6, 10)], [("Solarize", .6, 8), ("Equalize", .6, 1)],
        [("Color", .8, 6), ("Rotate", .4, 5)],
    ],
    "reduced_cifar10": [
        [("Invert", .1, 7), ("Contrast", .2, 6)], [("Rotate", .7, 2), ("TranslateX", .3, 9)],
        [("Sharpness", .8, 1), ("Sharpness", .9, 3)], [("ShearY", .5, 8), ("TranslateY", .7, 9)],
        [("AutoContrast", .5, 8), ("Equalize", .9, 2)], [("ShearY", .2, 7), ("Posterize", .3, 7)],
        [("Color", .4, 3), ("Brightness", .6, 7)], [("Sharpness", .3, 9), ("Brightness", .7, 9)],
        [("Equalize", .6, 5), ("Equalize", .5, 1)], [("Contrast", .6, 7), ("Sharpness", .6, 5)],
        [("Color", .7, 7), ("TranslateX", .5, 8)], [("Equalize", .3, 7), ("AutoContrast", .4, 8)],
        [("TranslateY", .4, 3), ("Sharpness", .2, 6)], [("Brightness", .9, 6), ("Color", .2, 8)],
        [("Solarize", .5, 2), ("Invert", 0., 3)], [("Equalize", .2, 0), ("AutoContrast", .6, 0)],
        [("Equalize", .2, 8), ("Equalize", .6, 4)], [("Color", .9, 9), ("Equalize", .6, 6)],
        [("AutoContrast", .8, 4), ("Solarize", .2, 8)], [("Brightness", .1, 3), ("Color", .7, 0)],
        [("Solarize", .4, 5), ("AutoContrast", .9, 3)],
        [("TranslateY", .9, 9), ("TranslateY", .7, 9)],
        [("AutoContrast", .9, 2), ("Solarize", .8, 3)], [("Equalize", .8, 8), ("Invert", .1, 3)],
        [("TranslateY", .7, 9), ("AutoContrast", .9, 1)],
    ],
    "svhn": [
        [("ShearX", .9, 4), ("Invert", .2, 3)], [("ShearY", .9, 8), ("Invert", .7, 5)],
        [("Equalize", .6, 5), ("Solarize", .6, 6)], [("Invert", .9, 3), ("Equalize", .6, 3)],
        [("Equalize", .6, 1), ("Rotate", .9, 3)], [("ShearX", .9, 4), ("AutoContrast", .8, 3)],
        [("ShearY", .9, 8), ("Invert", .4, 5)], [("ShearY", .9, 5), ("Solarize", .2, 6)],
        [("Invert", .9, 6), ("AutoContrast", .8, 1)], [("Equalize", .6, 3), ("Rotate", .9, 3)],
        [("ShearX", .9, 4), ("Solarize", .3, 3)], [("ShearY", .8, 8), ("Invert", .7, 4)],
        [("Equalize", .9, 5), ("TranslateY", .6, 6)], [("Invert", .9, 4), ("Equalize", .6, 7)],
        [("Contrast", .3, 3), ("Rotate", .8, 4)], [("Invert", .8, 5), ("TranslateY", 0., 2)],
        [("ShearY", .7, 6), ("Solarize", .4, 8)], [("Invert", .6, 4), ("Rotate", .8, 4)],
        [("ShearY", .3, 7), ("TranslateX", .9, 3)], [("ShearX", .1, 6), ("Invert", .6, 5)],
        [("Solarize", .7, 2), ("TranslateY", .6, 7)], [("ShearY", .8, 4), ("Invert", .8, 8)],
        [("ShearX", .7, 9), ("TranslateY", .8, 3)], [("ShearY", .8, 5), ("AutoContrast", .7, 3)],
        [("ShearX", .7, 2), ("Invert", .1, 5)],
    ],
    "reduced_imagenet": [
        [("Posterize", .4, 8), ("Rotate", .6, 9)], [("Solarize", .6, 5), ("AutoContrast", .6, 5)],
        [("Equalize", .8, 8), ("Equalize", .6, 3)], [("Posterize", .6, 7), ("Posterize", .6, 6)],
        [("Equalize", .4, 7), ("Solarize", .2, 4)], [("Equalize", .4, 4), ("Rotate", .8, 8)],
        [("Solarize", .6, 3), ("Equalize", .6, 7)], [("Posterize", .8, 5), ("Equalize", 1., 2)],
        [("Rotate", .2, 3), ("Solarize", .6, 8)], [("Equalize", .6, 8), ("Posterize", .4, 6)],
        [("Rotate", .8, 8), ("Color", .4, 0)], [("Rotate", .4, 9), ("Equalize", .6, 2)],
        [("Equalize", 0., 7), ("Equalize", .8, 8)], [("Invert", .6, 4), ("Equalize", 1., 8)],
        [("Color", .6, 4), ("Contrast", 1., 8)], [("Rotate", .8, 8), ("Color", 1., 2)],
        [("Color", .8, 8), ("Solarize", .8, 7)], [("Sharpness", .4, 7), ("Invert", .6, 8)],
        [("ShearX", .6, 5), ("Equalize", 1., 9)], [("Color", .4, 0), ("Equalize", .6, 3)],
        [("Equalize", .4, 7), ("Solarize", .2, 4)], [("Solarize", .6, 5), ("AutoContrast", .6, 5)],
        [("Invert", .6, 4), ("Equalize", 1., 8)], [("Color", .6, 4), ("Contrast", 1., 8)],
        [("Equalize", .8, 8), ("Equalize", .6, 3)],
    ],
    # 'v0' without its geometric ops.
    "simple": [
        [("Color", .4, 9), ("Equalize", .6, 3)], [("Solarize", .8, 3), ("Equalize", .4, 7)],
        [("Solarize", .4, 2), ("Solarize", .6, 2)], [("Color", .2, 0), ("Equalize", .8, 8)],
        [("Equalize", .4, 8), ("SolarizeAdd", .8, 3)], [("Color", .6, 1), ("Equalize", 1., 2)],
        [("Color", .4, 7), ("Equalize", .6, 0)], [("Posterize", .4, 6), ("AutoContrast", .4, 7)],
        [("Solarize", .6, 8), ("Color", .6, 9)], [("Equalize", .8, 4), ("Equalize", 0., 8)],
        [("Equalize", 1., 4), ("AutoContrast", .6, 2)],
        [("Posterize", .8, 2), ("Solarize", .6, 10)], [("Solarize", .6, 8), ("Equalize", .6, 1)],
    ],
    # One deterministic-probability sub-policy, for debugging.
    "test": [[("TranslateX", 1., 4), ("Equalize", 1., 10)]],
    # The detection policy of https://arxiv.org/abs/1906.11172: use with distort_with_boxes.
    "detection_v0": [
        [("TranslateX_BBox", .6, 4), ("Equalize", .8, 10)],
        [("TranslateY_Only_BBoxes", .2, 2), ("Cutout", .8, 8)],
        [("Sharpness", 0., 8), ("ShearX_BBox", .4, 0)],
        [("ShearY_BBox", 1., 2), ("TranslateY_Only_BBoxes", .6, 6)],
        [("Rotate_BBox", .6, 10), ("Color", 1., 6)],
    ],
    "panoptic_deeplab_policy": [
        [("Sharpness", .4, 1.4), ("Brightness", .2, 2.)],
        [("Equalize", 0., 1.8), ("Contrast", .2, 2.)],
        [("Sharpness", .2, 1.8), ("Color", .2, 1.8)],
        [("Solarize", .2, 1.4), ("Equalize", .6, 1.8)],
        [("Sharpness", .2, .2), ("Equalize", .2, 1.4)],
    ],
    # A generic ViT policy: each sub-policy ends with a likely cutout.
    "vit": [
        [("Sharpness", .4, 1.4), ("Brightness", .2, 2.), ("Cutout", .8, 8)],
        [("Equalize", 0., 1.8), ("Contrast", .2, 2.), ("Cutout", .8, 8)],
        [("Sharpness", .2, 1.8), ("Color", .2, 1.8), ("Cutout", .8, 8)],
        [("Solarize", .2, 1.4), ("Equalize", .6, 1.8), ("Cutout", .8, 8)],
        [("Sharpness", .2, .2), ("Equalize", .2, 1.4), ("Cutout", .8, 8)],
        [("Sharpness", .4, 7), ("Invert", .6, 8), ("Cutout", .8, 8)],
        [("Invert", .6, 4), ("Equalize", 1., 8), ("Cutout", .8, 8)],
        [("Posterize", .6, 7), ("Posterize", .6, 6), ("Cutout", .8, 8)],
        [("Solarize", .6, 5), ("AutoContrast", .6, 5), ("Cutout", .8, 8)],
    ],
    # DeiT III (https://arxiv.org/abs/2204.07118): greyscale, solarize at 128 or a blur. TFM's
    # classification input uses it with translate_const=20 (blur sigma in [0.1, 2]).
    "deit3_three_augment": [
        [("Grayscale", 1., 0)], [("Solarize", 1., 5)], [("Gaussian_Noise", 1., 1)],
    ],
}

AUTO_AUGMENT_POLICIES = tuple(_POLICIES)


def _check_policies(policies):
    """Validates custom AutoAugment policies: a list of sub-policies of (op, prob, level)."""
    policies = [list(sub_policy) for sub_policy in policies]
    if not policies or not all(policies):
        raise ValueError("AutoAugment policies must be a non-empty list of non-empty "
                         "sub-policies of (op, probability, level) triples")
    for sub_policy in policies:
        for step in sub_policy:
            if len(step) != 3:
                raise ValueError(f"AutoAugment policy step {step!r} must be "
                                 "(op, probability, level)")
            name, prob, level = step
            if name not in AUTO_AUGMENT_OPS:
                raise ValueError(f"AutoAugment policy: unknown op {name!r}; valid ops are "
                                 f"{', '.join(AUTO_AUGMENT_OPS)}")
            if not 0.0 <= prob <= 1.0:
                raise ValueError(f"AutoAugment policy step {step!r}: probability must be in [0, 1]")
            if not 0.0 <= level <= _MAX_LEVEL:
                raise ValueError(f"AutoAugment policy step {step!r}: level must be in "
                                 f"[0, {_MAX_LEVEL:g}]")
    return [[(name, float(prob), float(level)) for name, prob, level in sub] for sub in policies]


class AutoAugment(ImageAugment):
    """AutoAugment (https://arxiv.org/abs/1805.09501): one random sub-policy per image.

    Args:
      augmentation_name: one of `AUTO_AUGMENT_POLICIES` ('v0', 'reduced_cifar10', 'svhn',
        'reduced_imagenet', 'simple', 'test', 'panoptic_deeplab_policy', 'vit',
        'deit3_three_augment', and TFM's box-aware 'detection_v0' for `distort_with_boxes`);
        ignored when `policies` is given.
      cutout_const: cutout half-size at level 10.
      translate_const: translation in pixels at level 10.
      policies: custom sub-policies, `[[(op, probability, level), ...], ...]`.
    """

    def __init__(self, augmentation_name="v0", cutout_const=100, translate_const=250,
                 policies=None):
        self.augmentation_name = augmentation_name
        self.cutout_const = float(cutout_const)
        self.translate_const = float(translate_const)
        if policies:
            self.policies = _check_policies(policies)
        elif augmentation_name in _POLICIES:
            self.policies = _POLICIES[augmentation_name]
        else:
            raise ValueError(f"AutoAugment augmentation_name {augmentation_name!r} is unknown; "
                             f"valid names are {', '.join(AUTO_AUGMENT_POLICIES)}")
        self._ops = _policy_ops(self.cutout_const, self.translate_const)

    def _apply_sub_policy(self, sub_policy, image, boxes):
        for name, prob, level in sub_policy:
            if prob <= 0.0:
                continue
            op = functools.partial(self._ops[name], level=level, prob=prob)
            image, boxes = tf.cond(tf.random.uniform([]) < prob,
                                   functools.partial(_keep_shape, op, image, boxes),
                                   lambda x=image, b=boxes: (x, b))
        return image, boxes

    def distort(self, image):
        """Applies one uniformly chosen sub-policy to an `[H, W, 3]` image or clip (same dtype)."""
        _refuse_box_ops([step[0] for sub in self.policies for step in sub], "AutoAugment")
        return self.distort_with_boxes(image, None)[0]

    def distort_with_boxes(self, image, bboxes):
        """`distort` of an image with its normalised boxes `[N, 4]`: (image, boxes). The boxes
        move with the `_BBox` ops; other ops leave them alone."""
        image, boxes, input_dtype = _policy_inputs(image, bboxes)
        branches = [functools.partial(self._apply_sub_policy, sub_policy, image, boxes)
                    for sub_policy in self.policies]
        selected = tf.random.uniform([], maxval=len(branches), dtype=tf.int32)
        image, boxes = tf.switch_case(selected, branches)
        return tf.cast(image, input_dtype), boxes


class RandomErasing(ImageAugment):
    """Random erasing (https://arxiv.org/abs/1708.04896): rectangles filled with N(0, 1) noise.

    With `probability`, erases between `min_count` and `max_count` rectangles. For each, up to
    `trials` candidates are drawn: area uniform in [min_area, max_area] of the image, log aspect
    (height / width) uniform in [log(min_aspect), log(max_aspect)]; the first candidate that fits
    strictly inside the image with a pixel area in [min_area, max_area] is erased at a uniformly
    random position. Meant for normalised float images (as TFM, after normalisation).
    """

    def __init__(self, probability=0.25, min_area=0.02, max_area=1 / 3, min_aspect=0.3,
                 max_aspect=None, min_count=1, max_count=1, trials=10):
        max_aspect = max_aspect or 1.0 / min_aspect
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"RandomErasing probability ({probability}) must be in [0, 1]")
        if not 0.0 < min_area <= max_area <= 1.0:
            raise ValueError(f"RandomErasing needs 0 < min_area ({min_area}) <= max_area "
                             f"({max_area}) <= 1")
        if not 0.0 < min_aspect <= max_aspect:
            raise ValueError(f"RandomErasing needs 0 < min_aspect ({min_aspect}) <= max_aspect "
                             f"({max_aspect})")
        if not 1 <= min_count <= max_count:
            raise ValueError(f"RandomErasing needs 1 <= min_count ({min_count}) <= max_count "
                             f"({max_count})")
        self._probability = float(probability)
        self._min_area = float(min_area)
        self._max_area = float(max_area)
        self._min_log_aspect = math.log(min_aspect)
        self._max_log_aspect = math.log(max_aspect)
        self._min_count = int(min_count)
        self._max_count = int(max_count)
        self._trials = int(trials)

    def distort(self, image):
        """Erases rectangles of one `[H, W, C]` float image with probability `probability`."""
        image = tf.convert_to_tensor(image)
        if not image.dtype.is_floating:
            raise TypeError(f"RandomErasing needs a float image, got {image.dtype.name}; apply it "
                            "after normalisation, as TFM does")
        erase = tf.random.uniform([]) < self._probability
        return tf.cond(erase, lambda: self._erase(image), lambda: image)

    def _erase(self, image):
        height, width = tf.shape(image)[0], tf.shape(image)[1]
        area = tf.cast(height * width, tf.float32)
        count = tf.random.uniform([], self._min_count, self._max_count + 1, dtype=tf.int32)
        for index in range(self._max_count):
            erased = tf.constant(index) >= count  # rectangles beyond `count` are skipped
            for _ in range(self._trials):
                target = tf.random.uniform([], self._min_area * area, self._max_area * area)
                aspect = tf.exp(tf.random.uniform([], self._min_log_aspect, self._max_log_aspect))
                box_h = tf.cast(tf.round(tf.sqrt(target * aspect)), tf.int32)
                box_w = tf.cast(tf.round(tf.sqrt(target / aspect)), tf.int32)
                box_area = tf.cast(box_h * box_w, tf.float32)
                accept = (~erased & (box_h > 0) & (box_w > 0) & (box_h < height)
                          & (box_w < width) & (box_area >= self._min_area * area)
                          & (box_area <= self._max_area * area))
                image = tf.cond(accept,
                                functools.partial(self._fill, image, box_h, box_w),
                                lambda x=image: x)
                erased = erased | accept
        return image

    @staticmethod
    def _fill(image, box_h, box_w):
        height, width = tf.shape(image)[0], tf.shape(image)[1]
        top = tf.random.uniform([], 0, height - box_h + 1, dtype=tf.int32)
        left = tf.random.uniform([], 0, width - box_w + 1, dtype=tf.int32)
        mask = _box_mask(height, width, top, top + box_h, left, left + box_w)
        return tf.where(mask, tf.random.normal(tf.shape(image), dtype=image.dtype), image)


def _sample_beta(alpha, shape):
    """Beta(alpha, alpha) samples, from two gamma draws."""
    first = tf.random.gamma(shape, alpha)
    second = tf.random.gamma(shape, alpha)
    return first / (first + second)


class MixupAndCutmix:
    """Mixup (https://arxiv.org/abs/1710.09412) or Cutmix (https://arxiv.org/abs/1905.04899).

    Called on a float batch `[B, H, W, C]` (or of clips, `[B, T, H, W, C]`: each clip mixed
    as a whole, the cutmix box the same on all its frames, as TFM's) and int labels `[B]` (or
    one-hot / multi-hot float labels `[B, num_classes]`, which the video parser gives and are
    smoothed as they are); returns the mixed images and label-smoothed labels
    `[B, num_classes]`. With probability `prob` the batch is
    mixed, else only the labels are smoothed. A mixed batch uses cutmix with probability
    `switch_prob`, else mixup. Image i is mixed with image B-1-i (the flipped batch) with its
    own weight lam_i ~ Beta(alpha, alpha), and its label is
    `lam_i * smooth(label_i) + (1 - lam_i) * smooth(label_{B-1-i})`.
    Cutmix pastes a box of side sqrt(1 - lam) times the image's (centre uniform, clipped at the
    border) and sets lam_i to the fraction of image i that stays its own.

    Args:
      mixup_alpha: Beta parameter of mixup; 0 turns mixup off.
      cutmix_alpha: Beta parameter of cutmix; 0 turns cutmix off.
      prob: probability of mixing a batch.
      switch_prob: probability of cutmix rather than mixup when both are on.
      label_smoothing: mass spread uniformly over all classes.
      num_classes: number of classes of the one-hot labels.
    """

    def __init__(self, mixup_alpha=.8, cutmix_alpha=1., prob=1.0, switch_prob=0.5,
                 label_smoothing=0.1, num_classes=1001):
        if mixup_alpha < 0 or cutmix_alpha < 0:
            raise ValueError(f"MixupAndCutmix alphas must be >= 0 (mixup_alpha={mixup_alpha}, "
                             f"cutmix_alpha={cutmix_alpha})")
        if not mixup_alpha and not cutmix_alpha:
            raise ValueError("MixupAndCutmix needs mixup_alpha or cutmix_alpha > 0; to mix "
                             "nothing, leave MixupAndCutmix out")
        if int(num_classes) < 1:
            raise ValueError(f"MixupAndCutmix num_classes ({num_classes}) must be >= 1")
        self.mixup_alpha = float(mixup_alpha)
        self.cutmix_alpha = float(cutmix_alpha)
        self.mix_prob = float(prob)
        self.switch_prob = float(switch_prob)
        self.label_smoothing = float(label_smoothing)
        self.num_classes = int(num_classes)
        if not self.cutmix_alpha:
            self.switch_prob = 0.0
        elif not self.mixup_alpha:
            self.switch_prob = 1.0

    def __call__(self, images, labels):
        return self.distort(images, labels)

    def distort(self, images, labels):
        """Returns `(mixed images, mixed smoothed one-hot labels)` for one batch."""
        images = tf.convert_to_tensor(images)
        if not images.dtype.is_floating:
            raise TypeError(f"MixupAndCutmix needs float images, got {images.dtype.name}; cast "
                            "(and normalise) the batch first")
        if images.shape.rank not in (4, 5):
            raise ValueError(f"MixupAndCutmix needs a [B, H, W, C] batch or a [B, T, H, W, C] "
                             f"batch of clips, got shape {images.shape}")
        one_hot = self._smooth_labels(labels)

        def mix():
            use_cutmix = tf.random.uniform([]) < self.switch_prob
            mixed, lam = tf.cond(use_cutmix, lambda: self._cutmix(images),
                                 lambda: self._mixup(images))
            lam = lam[:, None]
            return mixed, lam * one_hot + (1.0 - lam) * tf.reverse(one_hot, [0])

        return tf.cond(tf.random.uniform([]) < self.mix_prob, mix, lambda: (images, one_hot))

    def _smooth_labels(self, labels):
        labels = tf.convert_to_tensor(labels)
        off_value = self.label_smoothing / self.num_classes
        if labels.dtype.is_floating and labels.shape.rank == 2:
            # Already (multi-)hot: the same smoothing as of a one-hot vector.
            return tf.cast(labels, tf.float32) * (1.0 - self.label_smoothing) + off_value
        on_value = 1.0 - self.label_smoothing + off_value
        return tf.one_hot(tf.reshape(labels, [-1]), self.num_classes, on_value=on_value,
                          off_value=off_value)

    def _mixup(self, images):
        lam = _sample_beta(self.mixup_alpha, tf.shape(images)[:1])
        weight = tf.cast(tf.reshape(lam, [-1] + [1] * (images.shape.rank - 1)), images.dtype)
        mixed = weight * images + (1.0 - weight) * tf.reverse(images, [0])
        return mixed, lam

    def _cutmix(self, images):
        batch = tf.shape(images)[0]
        height, width = tf.shape(images)[-3], tf.shape(images)[-2]
        lam = _sample_beta(self.cutmix_alpha, [batch])
        ratio = tf.sqrt(1.0 - lam)
        half_h = tf.cast(ratio * tf.cast(height, tf.float32), tf.int32) // 2
        half_w = tf.cast(ratio * tf.cast(width, tf.float32), tf.int32) // 2
        center_y = tf.random.uniform([batch], 0, height, dtype=tf.int32)
        center_x = tf.random.uniform([batch], 0, width, dtype=tf.int32)
        top, bottom = tf.maximum(center_y - half_h, 0), tf.minimum(center_y + half_h, height)
        left, right = tf.maximum(center_x - half_w, 0), tf.minimum(center_x + half_w, width)
        mask = _box_mask(height, width, top, bottom, left, right)
        if images.shape.rank == 5:
            mask = mask[:, None]  # the same box on every frame of a clip
        mixed = tf.where(mask, tf.reverse(images, [0]), images)
        # The label weight is the share of pixels that stay the image's own (box clipped).
        pasted = tf.cast((bottom - top) * (right - left), tf.float32)
        lam = 1.0 - pasted / tf.cast(height * width, tf.float32)
        return mixed, lam


# color_jitter's adjustments, in TFM's fixed order; saturation is PIL's Color.
_JITTER_OPS = (("brightness", brightness), ("contrast", contrast), ("saturation", color))


def color_jitter(image, brightness=0., contrast=0., saturation=0., seed=None):
    """Random brightness, then contrast, then saturation, like torchvision's ColorJitter.

    Each factor is drawn uniformly from [max(0, 1 - m), 1 + m] for its magnitude m; a zero
    magnitude leaves that property unchanged. The image is cast to uint8 first; returns uint8.
    """
    magnitudes = {"brightness": brightness, "contrast": contrast, "saturation": saturation}
    for name, magnitude in magnitudes.items():
        if magnitude < 0:
            raise ValueError(f"color_jitter {name} ({magnitude}) must be >= 0")
    image = tf.cast(image, tf.uint8)
    for name, adjust in _JITTER_OPS:
        magnitude = float(magnitudes[name])
        if magnitude:
            factor = tf.random.uniform([], max(0.0, 1.0 - magnitude), 1.0 + magnitude, seed=seed)
            image = adjust(image, factor)
    return image
