"""Geometric augmentation of an image and its boxes, with TFM's semantics
(`official.vision.ops.augment`), on plain TensorFlow ops.

The pixel transforms (`rotate`, `translate_x` / `translate_y`, `shear_x` / `shear_y`: one
projective transform each, nearest pixels) and TFM's box-aware ops built on them, which the
AutoAugment / RandAugment policies of `augment` use for detection
(`augment.AutoAugment.distort_with_boxes`, `augment.RandAugment.build_for_detection`):

* `rotate_with_bboxes`, `shear_with_bboxes`, `translate_bbox`: the image op, and every box moved
  as TFM moves it: its corners taken to whole pixels (truncated), transformed, truncated again,
  and the box enclosing them clipped to [0, 1].
* `translate_y_only_bboxes`: the content inside each box shifted vertically, boxes unchanged.
* `SSDRandomCrop`: SSD's random crop of the image, the boxes following it.

Boxes are normalised yxyx `[N, 4]`; an empty `[0, 4]` goes through unchanged. A box that leaves
the image is not dropped: clipping flattens it at the border, and TFM's minimum-area rule
(`keep_min_area`) then reopens it into a 0.05-wide sliver inside the image, which the detection
parser keeps as a ground truth (it drops only boxes of zero area), as TFM's does.
"""

import math

import tensorflow as tf

from lite_launcher.vision.ops import box_ops

# Grey value the policies paint into pixels a geometric op or cutout leaves empty (with the
# default reflect fill it never shows).
POLICY_FILL = 128


def _transform(image, matrix, replace, fill_mode):
    """Applies a projective transform (8 numbers mapping output to input) with nearest pixels.

    `fill_mode` is 'reflect' (TFM 2.20's default for every geometric op), 'constant' (fills with
    `replace`, the original AutoAugment behaviour), 'wrap' or 'nearest'. A `[T, H, W, C]` clip
    has every frame transformed alike.
    """
    image = tf.convert_to_tensor(image)
    matrix = tf.reshape(tf.stack([tf.cast(v, tf.float32) for v in matrix]), [1, 8])
    is_clip = image.shape.rank == 4
    output = tf.raw_ops.ImageProjectiveTransformV3(
        images=image if is_clip else image[None], transforms=matrix,
        output_shape=tf.shape(image)[-3:-1], fill_value=tf.cast(replace, tf.float32),
        interpolation="NEAREST", fill_mode=fill_mode.upper())
    output = output if is_clip else output[0]
    output.set_shape(image.shape)
    return output


def rotate(image, degrees, replace=POLICY_FILL, fill_mode="reflect"):
    """Rotates the image about its centre by `degrees`.

    With the image's row axis pointing down, positive degrees rotate the content
    counter-clockwise: on a square image, 90 degrees equals `np.rot90(image)`.
    """
    image = tf.convert_to_tensor(image)
    radians = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    height = tf.cast(tf.shape(image)[-3], tf.float32)
    width = tf.cast(tf.shape(image)[-2], tf.float32)
    cos, sin = tf.cos(radians), tf.sin(radians)
    # Offsets that keep the centre pixel fixed.
    x_offset = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2.0
    y_offset = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2.0
    return _transform(image, [cos, -sin, x_offset, sin, cos, y_offset, 0., 0.], replace, fill_mode)


def translate_x(image, pixels, replace=POLICY_FILL, fill_mode="reflect"):
    """Shifts content left by `pixels` (right when negative): out[y, x] = in[y, x + pixels]."""
    return _transform(image, [1., 0., pixels, 0., 1., 0., 0., 0.], replace, fill_mode)


def translate_y(image, pixels, replace=POLICY_FILL, fill_mode="reflect"):
    """Shifts content up by `pixels` (down when negative): out[y, x] = in[y + pixels, x]."""
    return _transform(image, [1., 0., 0., 0., 1., pixels, 0., 0.], replace, fill_mode)


def shear_x(image, level, replace=POLICY_FILL, fill_mode="reflect"):
    """Shears along x: out[y, x] = in[y, x + level * y]."""
    return _transform(image, [1., level, 0., 0., 1., 0., 0., 0.], replace, fill_mode)


def shear_y(image, level, replace=POLICY_FILL, fill_mode="reflect"):
    """Shears along y: out[y, x] = in[y + level * x, x]."""
    return _transform(image, [1., 0., 0., level, 1., 0., 0., 0.], replace, fill_mode)


# --------------------------------------------------------------------------------------------
# Boxes: TFM's whole-pixel rules.
# --------------------------------------------------------------------------------------------

def _sides(image):
    """(height, width) of an `[H, W, C]` image as float32 scalars."""
    size = tf.cast(tf.shape(image)[:2], tf.float32)
    return size[0], size[1]


def _pixel_corners(boxes, height, width):
    """Box corners in whole pixels, truncated as TFM does: int32 `[N, 4]` (yxyx)."""
    return tf.cast(tf.stack([height, width, height, width]) * boxes, tf.int32)


def keep_min_area(boxes, delta=0.05):
    """Normalised boxes clipped to [0, 1], each flat side reopened as TFM does: where
    min == max, max becomes at least `delta` and min at most `1 - delta`. A box flattened
    against a border thus keeps a `delta`-wide sliver inside the image (a flat box away from
    the borders stays flat)."""
    boxes = tf.clip_by_value(boxes, 0.0, 1.0)
    low, high = boxes[:, :2], boxes[:, 2:]
    flat = tf.equal(high, low)
    return tf.concat([tf.where(flat, tf.minimum(low, 1.0 - delta), low),
                      tf.where(flat, tf.maximum(high, delta), high)], axis=1)


def _corner_grid(top, left, bottom, right):
    """(ys, xs) `[N, 4]` float32 of the corners (top, left), (top, right), (bottom, left),
    (bottom, right) of `[N]` int sides."""
    ys = tf.stack([top, top, bottom, bottom], axis=1)
    xs = tf.stack([left, right, left, right], axis=1)
    return tf.cast(ys, tf.float32), tf.cast(xs, tf.float32)


def rotate_boxes(boxes, height, width, degrees):
    """Normalised boxes `[N, 4]` following `rotate(image, degrees)` of a `height` x `width`
    image: corners about the centre in whole pixels (y up), rotated, truncated, enclosed."""
    radians = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    centred = tf.cast(tf.stack([height, width, height, width]) * (boxes - 0.5), tf.int32)
    ys, xs = _corner_grid(-centred[:, 0], centred[:, 1], -centred[:, 2], centred[:, 3])
    cos, sin = tf.cos(radians), tf.sin(radians)
    new_ys = tf.cast(tf.cast(cos * ys + sin * xs, tf.int32), tf.float32)
    new_xs = tf.cast(tf.cast(-sin * ys + cos * xs, tf.int32), tf.float32)
    return keep_min_area(tf.stack([
        -(tf.reduce_max(new_ys, axis=1) / height - 0.5),
        tf.reduce_min(new_xs, axis=1) / width + 0.5,
        -(tf.reduce_min(new_ys, axis=1) / height - 0.5),
        tf.reduce_max(new_xs, axis=1) / width + 0.5], axis=1))


def shear_boxes(boxes, height, width, level, shear_horizontal):
    """Normalised boxes `[N, 4]` following `shear_x` (`shear_horizontal`) or `shear_y` by
    `level`: whole-pixel corners sheared, truncated, enclosed."""
    level = tf.cast(level, tf.float32)
    corners = _pixel_corners(boxes, height, width)
    ys, xs = _corner_grid(corners[:, 0], corners[:, 1], corners[:, 2], corners[:, 3])
    if shear_horizontal:
        xs = -level * ys + xs
    else:
        ys = ys + -level * xs
    ys = tf.cast(tf.cast(ys, tf.int32), tf.float32)
    xs = tf.cast(tf.cast(xs, tf.int32), tf.float32)
    return keep_min_area(tf.stack([
        tf.reduce_min(ys, axis=1) / height, tf.reduce_min(xs, axis=1) / width,
        tf.reduce_max(ys, axis=1) / height, tf.reduce_max(xs, axis=1) / width], axis=1))


def translate_boxes(boxes, height, width, pixels, shift_horizontal):
    """Normalised boxes `[N, 4]` following `translate_x` (`shift_horizontal`) or `translate_y`
    by `pixels` (truncated to whole pixels for the boxes), kept within the image."""
    pixels = tf.cast(pixels, tf.int32)
    corners = _pixel_corners(boxes, height, width)
    axis = 1 if shift_horizontal else 0
    side = tf.cast(width if shift_horizontal else height, tf.int32)
    low = tf.maximum(0, corners[:, axis] - pixels)
    high = tf.minimum(side, corners[:, axis + 2] - pixels)
    columns = tf.unstack(corners, 4, axis=1)
    columns[axis], columns[axis + 2] = low, high
    sizes = tf.stack([height, width, height, width])
    return keep_min_area(tf.cast(tf.stack(columns, axis=1), tf.float32) / sizes)


# --------------------------------------------------------------------------------------------
# TFM's box-aware ops: (image, boxes) -> (image, boxes).
# --------------------------------------------------------------------------------------------

def _image_and_boxes(image, bboxes, image_op, box_op):
    """(image_op(image), box_op(boxes, height, width)) for an image and its normalised boxes."""
    image = tf.convert_to_tensor(image)
    height, width = _sides(image)
    return image_op(image), box_op(tf.convert_to_tensor(bboxes, tf.float32), height, width)


def rotate_with_bboxes(image, bboxes, degrees, replace=POLICY_FILL):
    """`rotate(image, degrees)` with the boxes following it (`rotate_boxes`)."""
    return _image_and_boxes(image, bboxes, lambda x: rotate(x, degrees, replace),
                            lambda b, h, w: rotate_boxes(b, h, w, degrees))


def shear_with_bboxes(image, bboxes, level, replace=POLICY_FILL, shear_horizontal=True):
    """`shear_x` (or `shear_y`) of the image by `level`, with the boxes following it."""
    shear = shear_x if shear_horizontal else shear_y
    return _image_and_boxes(image, bboxes, lambda x: shear(x, level, replace),
                            lambda b, h, w: shear_boxes(b, h, w, level, shear_horizontal))


def translate_bbox(image, bboxes, pixels, replace=POLICY_FILL, shift_horizontal=True):
    """`translate_x` (or `translate_y`) of the image by `pixels`, with the boxes following it
    (TFM's name)."""
    translate = translate_x if shift_horizontal else translate_y
    return _image_and_boxes(image, bboxes, lambda x: translate(x, pixels, replace),
                            lambda b, h, w: translate_boxes(b, h, w, pixels, shift_horizontal))


def apply_inside_boxes(image, bboxes, prob, fn):
    """The image with `fn(region)` (same shape out) replacing the pixels of each box, chosen
    independently with probability `prob`, in a random order (overlapping boxes see each
    other's result). A box covers rows int(H * ymin) .. min(int(H * ymax), H - 1), and the
    same for columns (TFM's `_apply_multi_bbox_augmentation`)."""
    image = tf.convert_to_tensor(image)
    bboxes = tf.convert_to_tensor(bboxes, tf.float32)
    height, width = _sides(image)
    corners = _pixel_corners(bboxes, height, width)
    size = tf.shape(image)[:2]
    ends = tf.minimum(corners[:, 2:], size - 1) + 1
    starts = tf.minimum(corners[:, :2], ends)  # a box given upside down covers nothing
    order = tf.random.shuffle(tf.range(tf.shape(bboxes)[0]))

    def apply(image, index):
        top, left = starts[index, 0], starts[index, 1]
        bottom, right = ends[index, 0], ends[index, 1]
        region = image[top:bottom, left:right]
        padding = [[top, size[0] - bottom], [left, size[1] - right], [0, 0]]
        inside = tf.pad(tf.ones_like(region, dtype=tf.bool), padding)
        return tf.where(inside, tf.pad(fn(region), padding), image)

    def body(step, image):
        index = order[step]
        chosen = tf.random.uniform([]) < prob
        output = tf.cond(chosen, lambda: apply(image, index), lambda: image)
        output.set_shape(image.shape)
        return step + 1, output

    _, image = tf.while_loop(lambda step, _: step < tf.size(order), body, [0, image])
    return image


def translate_y_only_bboxes(image, bboxes, prob, pixels, replace=POLICY_FILL):
    """Shifts the content of each box vertically (`translate_y` inside it) with probability
    `prob / 3` per box (TFM's reduction, so that crowded boxes are not all distorted); returns
    (image, the boxes unchanged)."""
    bboxes = tf.convert_to_tensor(bboxes, tf.float32)
    shifted = apply_inside_boxes(image, bboxes, prob / 3.0,
                                 lambda region: translate_y(region, pixels, replace))
    return shifted, bboxes


# --------------------------------------------------------------------------------------------
# Detection: SSD's random crop on an image and its normalised boxes.
# --------------------------------------------------------------------------------------------


def filter_boxes_by_ioa(boxes, crop_box, min_box_overlap):
    """Normalised boxes [N, 4] with every box whose intersection with `crop_box` [1, 1, 4]
    covers less than `min_box_overlap` of its own area zeroed (dropped later as empty)."""
    ioa = box_ops.bbox_intersection_over_area(boxes[None], crop_box)[0]
    return boxes * tf.cast(ioa >= min_box_overlap, boxes.dtype)


def crop_normalized_boxes(boxes, image_size, crop_size, offset):
    """Normalised boxes [N, 4] of an `image_size` [2] image re-expressed in its crop of
    `crop_size` [2] at `offset` [2] (pixels), clipped to [0, 1]."""
    pixels = box_ops.denormalize_boxes(boxes, image_size)
    pixels -= tf.tile(tf.cast(offset, tf.float32), [2])[None]
    return tf.clip_by_value(box_ops.normalize_boxes(pixels, crop_size), 0.0, 1.0)


class SSDRandomCrop:
    """SSD's random crop (TFM's augment.SSDRandomCrop): one of `params` (objects with
    `min_object_covered`, `min_box_overlap`, `prob_to_apply`) drawn per image; with its
    probability, a crop from `tf.image.sample_distorted_bounding_box` covering at least
    `min_object_covered` of some box; boxes overlapping the crop by less than
    `min_box_overlap` of their area become empty, the others follow the crop.

    Args:
      params: the choices; None: TFM's seven (min_object_covered 0, .1, .3, .5, .7, .9, 1).
      aspect_ratio_range, area_range: of the crop, relative to the image.
    """

    def __init__(self, params=None, aspect_ratio_range=(0.5, 2.0), area_range=(0.1, 1.0)):
        if params is None:
            params = [dict(min_object_covered=covered, min_box_overlap=0.5, prob_to_apply=0.85)
                      for covered in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)]

        def field(name):
            return tf.constant([p[name] if isinstance(p, dict) else getattr(p, name)
                                for p in params], tf.float32)

        self._num_cases = len(params)
        self._min_object_covered = field("min_object_covered")
        self._min_box_overlap = field("min_box_overlap")
        self._prob_to_apply = field("prob_to_apply")
        self._aspect_ratio_range = tuple(aspect_ratio_range)
        self._area_range = tuple(area_range)

    def distort_with_boxes(self, image, boxes):
        """(image [h, w, C] cropped or not, normalised boxes [N, 4] following it)."""
        case = tf.random.uniform([], maxval=self._num_cases, dtype=tf.int32)

        def crop():
            image_size = tf.shape(image)
            clipped = tf.clip_by_value(boxes, 0.0, 1.0)
            offset, size, crop_box = tf.image.sample_distorted_bounding_box(
                image_size=image_size, bounding_boxes=clipped[None],
                min_object_covered=self._min_object_covered[case],
                aspect_ratio_range=self._aspect_ratio_range, area_range=self._area_range,
                max_attempts=100, use_image_if_no_bounding_boxes=True)
            kept = filter_boxes_by_ioa(clipped, crop_box, self._min_box_overlap[case])
            return (tf.slice(image, offset, size),
                    crop_normalized_boxes(kept, image_size[:2], size[:2], offset[:2]))

        skip = tf.random.uniform([]) > self._prob_to_apply[case]
        return tf.cond(skip, lambda: (tf.identity(image), tf.identity(boxes)), crop)
