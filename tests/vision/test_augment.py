"""lite_launcher.vision.augment: every op against a numpy expectation, the policies' contracts,
MixupAndCutmix's label arithmetic, RandomErasing's rectangle, color_jitter, and graph mode."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision import augment

RNG = np.random.RandomState(1234)
# A random uint8 RGB image: every op changes it in a visible way.
IMAGE = RNG.randint(0, 256, size=(12, 12, 3)).astype(np.uint8)
# A non-square image, to catch height/width mix-ups.
WIDE = RNG.randint(0, 256, size=(6, 10, 3)).astype(np.uint8)
# Low contrast and more than 255 pixels, so that PIL's equalisation has a non-zero step.
LOW_CONTRAST = RNG.randint(60, 124, size=(32, 32, 3)).astype(np.uint8)


@pytest.fixture(autouse=True)
def _seed():
    tf.random.set_seed(7)


def _np(tensor):
    return np.asarray(tensor.numpy() if hasattr(tensor, "numpy") else tensor)


def _rectangle(mask):
    """(top, bottom, left, right) of a 2D boolean mask that must be one filled rectangle."""
    rows = np.flatnonzero(mask.any(axis=1))
    cols = np.flatnonzero(mask.any(axis=0))
    assert rows.size and cols.size, "no pixel changed"
    top, bottom, left, right = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    assert mask[top:bottom, left:right].all(), "changed pixels do not form a rectangle"
    assert mask.sum() == (bottom - top) * (right - left)
    return top, bottom, left, right


# ------------------------------------------------------------------------------- pixel ops

def test_solarize_inverts_pixels_at_or_above_threshold():
    expected = np.where(IMAGE < 100, IMAGE, 255 - IMAGE)
    np.testing.assert_array_equal(_np(augment.solarize(IMAGE, 100)), expected)
    # Threshold 256 (level 10 in the policies) leaves every pixel alone.
    np.testing.assert_array_equal(_np(augment.solarize(IMAGE, 256)), IMAGE)


def test_solarize_add_adds_below_threshold_and_clips():
    pixels = IMAGE.astype(np.int32)
    expected = np.where(pixels < 128, np.clip(pixels + 90, 0, 255), pixels).astype(np.uint8)
    np.testing.assert_array_equal(_np(augment.solarize_add(IMAGE, 90)), expected)


def test_posterize_keeps_the_top_bits():
    np.testing.assert_array_equal(_np(augment.posterize(IMAGE, 3)), IMAGE & 0b11100000)
    np.testing.assert_array_equal(_np(augment.posterize(IMAGE, 8)), IMAGE)
    # TensorFlow's clamped shift (TFM's behaviour): 0 bits keeps the top bit.
    np.testing.assert_array_equal(_np(augment.posterize(IMAGE, 0)), IMAGE & 0b10000000)


def test_invert():
    np.testing.assert_array_equal(_np(augment.invert(IMAGE)), 255 - IMAGE)


def _numpy_equalize(image):
    """PIL's ImageOps.equalize, written with numpy."""
    out = image.copy()
    for c in range(image.shape[-1]):
        channel = image[..., c]
        histogram = np.bincount(channel.ravel(), minlength=256)
        populated = histogram[histogram > 0]
        if populated.size <= 1:
            continue
        step = (populated.sum() - populated[-1]) // 255
        if step == 0:
            continue
        before = np.concatenate([[0], np.cumsum(histogram)[:-1]])
        lut = np.clip((step // 2 + before) // step, 0, 255)
        out[..., c] = lut[channel]
    return out


def test_equalize_matches_numpy_histogram_equalisation():
    expected = _numpy_equalize(LOW_CONTRAST)
    assert expected.min() == 0 and expected.max() >= 250  # spread out
    np.testing.assert_array_equal(_np(augment.equalize(LOW_CONTRAST)), expected)


def test_equalize_matches_pil():
    image_ops = pytest.importorskip("PIL.ImageOps")
    pil_image = pytest.importorskip("PIL.Image")
    expected = np.asarray(image_ops.equalize(pil_image.fromarray(LOW_CONTRAST)))
    np.testing.assert_array_equal(_np(augment.equalize(LOW_CONTRAST)), expected)


def test_equalize_leaves_a_flat_channel_alone():
    flat = LOW_CONTRAST.copy()
    flat[..., 1] = 77
    np.testing.assert_array_equal(_np(augment.equalize(flat))[..., 1], flat[..., 1])


def test_autocontrast_stretches_each_channel_to_full_range():
    low = (IMAGE // 4 + 60).astype(np.uint8)
    low[..., 2] = 33  # a flat channel stays as it is
    pixels = low.astype(np.float32)
    lo, hi = pixels.min(axis=(0, 1)), pixels.max(axis=(0, 1))
    scale = np.float32(255.0) / np.where(hi > lo, hi - lo, 1).astype(np.float32)
    stretched = np.clip(pixels * scale - lo * scale, 0, 255).astype(np.uint8)
    expected = np.where(hi > lo, stretched, low)
    out = _np(augment.autocontrast(low))
    np.testing.assert_array_equal(out, expected)
    assert out[..., 0].min() == 0 and out[..., 0].max() >= 254
    np.testing.assert_array_equal(out[..., 2], 33)


@pytest.mark.parametrize("factor", [0.0, 0.3, 1.0, 1.7])
def test_blend_interpolates_and_extrapolates_with_clipping(factor):
    first, second = IMAGE, WIDE[:, :6].repeat(2, axis=0).repeat(2, axis=1)
    expected = np.clip(first + np.float32(factor) * (second.astype(np.float32) - first), 0, 255)
    np.testing.assert_array_equal(_np(augment.blend(first, second, factor)),
                                  expected.astype(np.uint8))


@pytest.mark.parametrize("factor", [0.1, 0.5, 1.9])
def test_brightness_scales_pixels(factor):
    expected = np.clip(IMAGE * np.float32(factor), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(_np(augment.brightness(IMAGE, factor)), expected)


def _numpy_luma(image):
    weights = np.array([0.2989, 0.5870, 0.1140], np.float32)
    return (image.astype(np.float32) / 255.0 @ weights * 255.0)[..., None]


@pytest.mark.parametrize("factor", [0.0, 0.5, 1.0, 1.9])
def test_color_blends_with_greyscale(factor):
    gray = _numpy_luma(IMAGE)
    expected = np.clip(gray + factor * (IMAGE - gray), 0, 255)
    out = _np(augment.color(IMAGE, factor)).astype(np.float32)
    np.testing.assert_allclose(out, expected, atol=1.5)  # greyscale is rounded to uint8 first
    if factor == 0.0:  # all three channels equal
        assert (out == out[..., :1]).all()


@pytest.mark.parametrize("factor", [0.1, 1.0, 1.9])
def test_contrast_scales_around_the_channel_mean(factor):
    pixels = IMAGE.astype(np.float32)
    mean = pixels.mean(axis=(0, 1))
    expected = np.clip((pixels - mean) * factor + mean, 0, 255)
    out = _np(augment.contrast(IMAGE, factor)).astype(np.float32)
    np.testing.assert_allclose(out, expected, atol=1.01)


def test_sharpness_blends_with_pil_smooth_filter():
    pixels = IMAGE.astype(np.float32)
    kernel = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / 13
    smooth = IMAGE.copy()
    for y in range(1, 11):
        for x in range(1, 11):
            window = pixels[y - 1:y + 2, x - 1:x + 2]
            smooth[y, x] = np.clip((window * kernel[..., None]).sum(axis=(0, 1)), 0, 255)
    # factor 0 is the smoothed image (border kept), 1 the original.
    np.testing.assert_allclose(_np(augment.sharpness(IMAGE, 0.0)), smooth, atol=1)
    np.testing.assert_array_equal(_np(augment.sharpness(IMAGE, 1.0)), IMAGE)
    sharpened = np.clip(smooth + 2.0 * (pixels - smooth), 0, 255)
    np.testing.assert_allclose(_np(augment.sharpness(IMAGE, 2.0)), sharpened, atol=2)


def _tfm_sharpness():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                        "tfm_2_20_sharpness.json")
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("level", range(11))
def test_randaugment_sharpness_equals_tfm_at_every_level(level):
    # TFM 2.20's own outputs (tests/vision/data/make_tfm_sharpness.py), pixel for pixel: the
    # level-to-factor map, the smoothing, the kept border and the blend's truncation.
    reference = _tfm_sharpness()
    image = np.array(reference["image"], np.uint8)
    expected = reference["levels"][str(level)]
    assert augment._enhance_factor(level) == pytest.approx(expected["factor"], abs=0)
    sharpness_op = augment._image_ops(cutout_const=40.0, translate_const=100.0)["Sharpness"]
    out = _np(sharpness_op(tf.constant(image), float(level)))
    np.testing.assert_array_equal(out, np.array(expected["output"], np.uint8))


@pytest.mark.parametrize("factor", ["0.0", "1.0", "2.0"])
def test_sharpness_equals_tfm_at_the_blend_end_points(factor):
    reference = _tfm_sharpness()
    image = np.array(reference["image"], np.uint8)
    np.testing.assert_array_equal(_np(augment.sharpness(image, float(factor))),
                                  np.array(reference["factors"][factor], np.uint8))


@pytest.mark.parametrize("sigma", [0.5, 2.0])
def test_gaussian_blur_matches_a_numpy_3x3_gaussian_with_reflected_edges(sigma):
    weights = np.exp(-np.array([1.0, 0.0, 1.0]) / (2 * sigma ** 2))
    weights /= weights.sum()
    kernel = np.outer(weights, weights)
    padded = np.pad(IMAGE.astype(np.float64), [(1, 1), (1, 1), (0, 0)], mode="reflect")
    expected = sum(kernel[dy, dx] * padded[dy:dy + 12, dx:dx + 12]
                   for dy in range(3) for dx in range(3))
    out = _np(augment.gaussian_blur(IMAGE, sigma)).astype(np.float64)
    np.testing.assert_allclose(out, np.floor(expected), atol=1)
    assert np.std(out) < np.std(IMAGE.astype(np.float64))  # smoother


# ------------------------------------------------------------------------- geometric ops

def test_cutout_paints_a_square_of_side_twice_pad_size():
    image = np.full((40, 40, 3), 200, np.uint8)
    seen_full_square = False
    for _ in range(12):
        out = _np(augment.cutout(image, 5, replace=9))
        changed = (out != 200).any(axis=-1)
        top, bottom, left, right = _rectangle(changed)
        assert (out[changed] == 9).all()
        assert bottom - top <= 10 and right - left <= 10
        # Away from the border the square is complete.
        if 0 < top and bottom < 40 and 0 < left and right < 40:
            assert (bottom - top, right - left) == (10, 10)
            seen_full_square = True
    assert seen_full_square


def test_cutout_per_channel_replace():
    out = _np(augment.cutout(np.zeros((8, 8, 3), np.uint8), 8, replace=[1, 2, 3]))
    changed = out.any(axis=-1)
    assert changed.any()
    np.testing.assert_array_equal(out[changed], np.tile([1, 2, 3], (changed.sum(), 1)))


@pytest.mark.parametrize("pixels", [3, -2])
def test_translate_x_shifts_by_whole_pixels_with_constant_fill(pixels):
    out = _np(augment.translate_x(WIDE, pixels, replace=5, fill_mode="constant"))
    width = WIDE.shape[1]
    expected = np.full_like(WIDE, 5)
    if pixels > 0:
        expected[:, :width - pixels] = WIDE[:, pixels:]
    else:
        expected[:, -pixels:] = WIDE[:, :width + pixels]
    np.testing.assert_array_equal(out, expected)


def test_translate_y_shifts_rows_and_reflects_by_default():
    out = _np(augment.translate_y(WIDE, 2))
    np.testing.assert_array_equal(out[:4], WIDE[2:])
    # TFM 2.20's 'reflect' fill: rows past the edge mirror the last rows.
    np.testing.assert_array_equal(out[4:], WIDE[[5, 4]])


def test_rotate_90_on_a_square_image_is_rot90():
    np.testing.assert_array_equal(_np(augment.rotate(IMAGE, 90.0)), np.rot90(IMAGE))
    np.testing.assert_array_equal(_np(augment.rotate(IMAGE, -90.0)), np.rot90(IMAGE, -1))
    np.testing.assert_array_equal(_np(augment.rotate(IMAGE, 180.0)), IMAGE[::-1, ::-1])
    np.testing.assert_array_equal(_np(augment.rotate(IMAGE, 0.0)), IMAGE)


def test_shear_x_and_y_match_their_mapping():
    height, width = WIDE.shape[:2]
    expected_x = np.full_like(WIDE, 128)
    expected_y = np.full_like(WIDE, 128)
    for y in range(height):
        for x in range(width):
            if x + y < width:
                expected_x[y, x] = WIDE[y, x + y]
            if y + x < height:
                expected_y[y, x] = WIDE[y + x, x]
    np.testing.assert_array_equal(
        _np(augment.shear_x(WIDE, 1.0, fill_mode="constant")), expected_x)
    np.testing.assert_array_equal(
        _np(augment.shear_y(WIDE, 1.0, fill_mode="constant")), expected_y)


# --------------------------------------------------------------------------- RandAugment

def _distinct_outputs(augmenter, image, draws=24):
    return [_np(augmenter.distort(image)) for _ in range(draws)]


@pytest.mark.parametrize("op", ["Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY",
                                "Cutout", "SolarizeAdd"])
def test_rand_augment_at_magnitude_zero_is_identity_for_ops_with_a_zero_argument(op):
    others = [name for name in augment.RAND_AUGMENT_OPS if name != op]
    at_zero = augment.RandAugment(num_layers=2, magnitude=0, exclude_ops=others)
    for out in _distinct_outputs(at_zero, IMAGE, draws=8):
        np.testing.assert_array_equal(out, IMAGE)
    # The same op at full magnitude does change the image: the check above is not vacuous.
    at_ten = augment.RandAugment(num_layers=2, magnitude=10, exclude_ops=others)
    assert any(not np.array_equal(out, IMAGE) for out in _distinct_outputs(at_ten, IMAGE, 8))


def test_rand_augment_magnitude_mapping():
    # Posterize at level 5 keeps int(5 / 10 * 4) = 2 bits; Solarize at 5 uses threshold
    # int(5 / 10 * 256) = 128; Brightness at 10 uses factor 10 / 10 * 1.8 + 0.1 = 1.9.
    for op, magnitude, expected in [
            ("Posterize", 5, IMAGE & 0b11000000),
            ("Solarize", 5, np.where(IMAGE < 128, IMAGE, 255 - IMAGE)),
            ("Brightness", 10, np.clip(IMAGE * np.float32(1.9), 0, 255).astype(np.uint8))]:
        others = [name for name in augment.RAND_AUGMENT_OPS if name != op]
        augmenter = augment.RandAugment(num_layers=1, magnitude=magnitude, exclude_ops=others)
        outputs = _distinct_outputs(augmenter, IMAGE, draws=12)
        # Each layer either runs the op or (1 in len(ops) + 1) runs nothing.
        assert all(np.array_equal(out, expected) or np.array_equal(out, IMAGE) for out in outputs)
        assert any(np.array_equal(out, expected) for out in outputs)


def test_rand_augment_exclude_ops_leaves_only_the_kept_op():
    only_invert = augment.RandAugment(
        num_layers=1, magnitude=10,
        exclude_ops=[name for name in augment.RAND_AUGMENT_OPS if name != "Invert"])
    outputs = _distinct_outputs(only_invert, IMAGE)
    assert all(np.array_equal(out, 255 - IMAGE) or np.array_equal(out, IMAGE) for out in outputs)
    assert any(np.array_equal(out, 255 - IMAGE) for out in outputs)
    # TFM draws among len(ops) + 1 choices: the extra one applies nothing.
    assert any(np.array_equal(out, IMAGE) for out in outputs)
    # Without the exclusion, other ops show up: the assertion above would fail.
    every_op = augment.RandAugment(num_layers=1, magnitude=10)
    assert not all(np.array_equal(out, 255 - IMAGE) or np.array_equal(out, IMAGE)
                   for out in _distinct_outputs(every_op, IMAGE))


def test_rand_augment_geometric_ops_go_both_ways():
    only_translate = augment.RandAugment(
        num_layers=1, magnitude=10, translate_const=3,
        exclude_ops=[name for name in augment.RAND_AUGMENT_OPS if name != "TranslateX"])
    left, right = _np(augment.translate_x(IMAGE, 3)), _np(augment.translate_x(IMAGE, -3))
    outputs = _distinct_outputs(only_translate, IMAGE, draws=30)
    assert all(any(np.array_equal(out, candidate) for candidate in (left, right, IMAGE))
               for out in outputs)
    assert any(np.array_equal(out, left) for out in outputs)
    assert any(np.array_equal(out, right) for out in outputs)


def test_rand_augment_excluded_op_never_runs():
    no_invert = augment.RandAugment(num_layers=1, magnitude=10, exclude_ops=["Invert"])
    assert "Invert" not in no_invert.available_ops
    assert len(no_invert.available_ops) == len(augment.RAND_AUGMENT_OPS) - 1
    outputs = _distinct_outputs(no_invert, IMAGE, 40)
    assert not any(np.array_equal(out, 255 - IMAGE) for out in outputs)


def test_rand_augment_unknown_excluded_op_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"'Inverse'.*valid ops are AutoContrast, .*Invert"):
        augment.RandAugment(exclude_ops=["Inverse"])
    with pytest.raises(ValueError, match="every op"):
        augment.RandAugment(exclude_ops=list(augment.RAND_AUGMENT_OPS))
    # A single name (as a YAML scalar might give) is one op, not its letters.
    assert "Invert" not in augment.RandAugment(exclude_ops="Invert").available_ops


def test_rand_augment_prob_to_apply_zero_returns_the_input():
    never = augment.RandAugment(num_layers=3, magnitude=10, prob_to_apply=0.0)
    for out in _distinct_outputs(never, IMAGE, draws=10):
        np.testing.assert_array_equal(out, IMAGE)
    always = augment.RandAugment(num_layers=3, magnitude=10, prob_to_apply=1.0)
    assert any(not np.array_equal(out, IMAGE) for out in _distinct_outputs(always, IMAGE, 10))


def test_rand_augment_magnitude_std_varies_the_level():
    only_posterize = [name for name in augment.RAND_AUGMENT_OPS if name != "Posterize"]
    fixed = augment.RandAugment(num_layers=1, magnitude=5, exclude_ops=only_posterize)
    noisy = augment.RandAugment(num_layers=1, magnitude=5, magnitude_std=3.0,
                                exclude_ops=only_posterize)
    fixed_results = {out.tobytes() for out in _distinct_outputs(fixed, IMAGE, 16)}
    noisy_results = {out.tobytes() for out in _distinct_outputs(noisy, IMAGE, 16)}
    assert len(fixed_results) <= 2  # the op at level 5, or no op
    assert len(noisy_results) > 2


def test_rand_augment_float_input_keeps_dtype_and_clips():
    image = IMAGE.astype(np.float32)
    out = augment.RandAugment().distort(image)
    assert out.dtype == tf.float32 and out.shape == image.shape


# -------------------------------------------------------------------------- AutoAugment

def test_auto_augment_test_policy_translates_then_equalizes():
    # 'test' is TranslateX at level 4 then Equalize, both always; translate_const=10 -> 4 px.
    out = _np(augment.AutoAugment("test", translate_const=10).distort(IMAGE))
    candidates = [_np(augment.equalize(augment.translate_x(IMAGE, pixels))) for pixels in (4, -4)]
    assert any(np.array_equal(out, candidate) for candidate in candidates)
    assert not np.array_equal(out, _np(augment.equalize(IMAGE)))


def test_auto_augment_custom_policies_apply_with_their_probability():
    always = augment.AutoAugment(policies=[[("Invert", 1.0, 0), ("Solarize", 1.0, 10)]])
    np.testing.assert_array_equal(_np(always.distort(IMAGE)), 255 - IMAGE)
    never = augment.AutoAugment(policies=[[("Invert", 0.0, 0)]])
    np.testing.assert_array_equal(_np(never.distort(IMAGE)), IMAGE)


def test_auto_augment_picks_one_sub_policy_per_image():
    chooser = augment.AutoAugment(policies=[[("Invert", 1.0, 0)], [("Posterize", 1.0, 5)]])
    outputs = _distinct_outputs(chooser, IMAGE, 16)
    assert all(np.array_equal(out, 255 - IMAGE) or np.array_equal(out, IMAGE & 0b11000000)
               for out in outputs)
    assert any(np.array_equal(out, 255 - IMAGE) for out in outputs)
    assert any(np.array_equal(out, IMAGE & 0b11000000) for out in outputs)


def test_deit3_three_augment_is_greyscale_solarize_or_blur():
    three = augment.AutoAugment("deit3_three_augment", translate_const=20)
    gray = _np(augment.grayscale(IMAGE))
    solarized = np.where(IMAGE < 128, IMAGE, 255 - IMAGE)
    outputs = _distinct_outputs(three, IMAGE, draws=15)
    kinds = ["gray" if np.array_equal(out, gray) else
             "solarize" if np.array_equal(out, solarized) else "blur" for out in outputs]
    assert set(kinds) == {"gray", "solarize", "blur"}
    for out, kind in zip(outputs, kinds):
        if kind == "blur":  # sigma in [0.1, 2]: at most a 3x3 average of the neighbourhood
            assert np.std(out.astype(np.float64)) <= np.std(IMAGE.astype(np.float64)) + 1


def test_auto_augment_bad_names_and_policies_are_errors():
    with pytest.raises(ValueError, match=r"'v9'.*valid names are v0, .*reduced_imagenet"):
        augment.AutoAugment("v9")
    with pytest.raises(ValueError, match="'Blur'"):
        augment.AutoAugment(policies=[[("Blur", 0.5, 3)]])
    with pytest.raises(ValueError, match="probability"):
        augment.AutoAugment(policies=[[("Invert", 1.5, 3)]])
    with pytest.raises(ValueError, match="level"):
        augment.AutoAugment(policies=[[("Invert", 0.5, 11)]])


POLICY_SIZES = {"v0": 25, "test": 1, "simple": 13, "reduced_cifar10": 25, "svhn": 25,
                "reduced_imagenet": 25, "panoptic_deeplab_policy": 5, "vit": 9,
                "deit3_three_augment": 3}


@pytest.mark.parametrize("name", sorted(POLICY_SIZES))
def test_auto_augment_named_policies_are_valid_and_run(name):
    policy = augment.AutoAugment(name, translate_const=6, cutout_const=3)
    # Rebuilding it as a custom policy validates every op name, probability and level.
    assert augment.AutoAugment(policies=policy.policies).policies == policy.policies
    assert len(policy.policies) == POLICY_SIZES[name]
    for _ in range(4):  # eager: one random sub-policy per call
        out = policy.distort(IMAGE)
        assert out.shape == IMAGE.shape and out.dtype == tf.uint8


# ------------------------------------------------------------------------------ graph mode

# Tracing a policy costs seconds on a loaded machine: one graph per augmenter kind. v0's 25
# sub-policies take ~14 s: the suite traces AutoAugment's one-policy 'test' in graph mode
# (every op RandAugment holds, v0's included, is traced by 'randaug').
@pytest.mark.parametrize("make_augmenter", [
    lambda: augment.RandAugment(magnitude_std=0.5, prob_to_apply=0.7).distort,
    pytest.param(lambda: augment.AutoAugment("v0").distort, id="autoaug",
                 marks=pytest.mark.release(
                     sibling="tests/vision/test_augment.py::"
                             "test_augmenters_accept_unknown_static_shapes")),
    lambda: lambda image: augment.color_jitter(image, 0.4, 0.4, 0.4),
], ids=["randaug", "autoaug", "jitter"])
def test_image_augmenters_run_in_dataset_map_and_keep_shape_and_dtype(make_augmenter):
    distort = make_augmenter()
    dataset = tf.data.Dataset.from_tensor_slices(np.stack([IMAGE] * 6)).map(distort)
    assert dataset.element_spec == tf.TensorSpec([12, 12, 3], tf.uint8)
    outputs = [_np(image) for image in dataset]
    assert all(out.shape == (12, 12, 3) and out.dtype == np.uint8 for out in outputs)
    assert any(not np.array_equal(out, IMAGE) for out in outputs)


def test_augmenters_accept_unknown_static_shapes():
    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)])
    def distort(image):
        image = augment.RandAugment(num_layers=1).distort(image)
        image = augment.AutoAugment("test").distort(image)
        return augment.RandomErasing(probability=1.0).distort(tf.cast(image, tf.float32))

    out = distort(WIDE)
    assert out.shape == WIDE.shape and out.dtype == tf.float32


def test_random_erasing_and_mixup_run_in_dataset_map():
    images = RNG.rand(8, 10, 10, 3).astype(np.float32)
    erasing = augment.RandomErasing(probability=1.0)
    mixer = augment.MixupAndCutmix(num_classes=4)
    dataset = (tf.data.Dataset.from_tensor_slices((images, np.arange(8) % 4))
               .map(lambda image, label: (erasing.distort(image), label))
               .batch(4).map(mixer))
    for batch, labels in dataset:
        assert batch.shape == (4, 10, 10, 3) and batch.dtype == tf.float32
        assert labels.shape == (4, 4) and labels.dtype == tf.float32
        np.testing.assert_allclose(_np(labels).sum(axis=1), 1.0, rtol=1e-6)


# ------------------------------------------------------------------------- MixupAndCutmix

def _constant_batch(values, size=16):
    return np.stack([np.full((size, size, 3), v, np.float32) for v in values])


def test_mixup_label_weights_match_the_pixel_mix():
    values = [1.0, 2.0, 4.0, 8.0]
    mixer = augment.MixupAndCutmix(cutmix_alpha=0.0, label_smoothing=0.0, num_classes=4)
    images, labels = mixer(_constant_batch(values), tf.constant([0, 1, 2, 3]))
    images, labels = _np(images), _np(labels)
    for i, value in enumerate(values):
        partner = values[3 - i]
        lam = (images[i, 0, 0, 0] - partner) / (value - partner)
        np.testing.assert_allclose(images[i], images[i, 0, 0, 0])  # a uniform blend
        np.testing.assert_allclose(labels[i, i], lam, atol=1e-5)
        np.testing.assert_allclose(labels[i, 3 - i], 1.0 - lam, atol=1e-5)
    assert (labels.max(axis=1) < 1.0).any()  # some mixing happened
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, rtol=1e-6)


def test_cutmix_label_weight_equals_the_kept_area_fraction():
    values = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    mixer = augment.MixupAndCutmix(mixup_alpha=0.0, label_smoothing=0.0, num_classes=6)
    saw_a_box = False
    for _ in range(4):
        images, labels = mixer(_constant_batch(values, size=20), tf.range(6))
        images, labels = _np(images), _np(labels)
        for i, value in enumerate(values):
            partner = values[5 - i]
            assert np.isin(images[i], [value, partner]).all()  # pasted, not blended
            pasted = images[i, ..., 0] == partner
            if pasted.any():
                _rectangle(pasted)
                saw_a_box = True
            np.testing.assert_allclose(labels[i, i], 1.0 - pasted.mean(), atol=1e-6)
            np.testing.assert_allclose(labels[i, 5 - i], pasted.mean(), atol=1e-6)
    assert saw_a_box


def test_mixup_and_cutmix_smooth_labels_and_rows_sum_to_one():
    mixer = augment.MixupAndCutmix(label_smoothing=0.1, num_classes=10)
    batch = RNG.rand(6, 8, 8, 3).astype(np.float32)
    for _ in range(4):  # both branches get drawn
        _, labels = mixer(batch, tf.constant([0, 1, 2, 3, 4, 5]))
        labels = _np(labels)
        assert labels.shape == (6, 10) and labels.dtype == np.float32
        np.testing.assert_allclose(labels.sum(axis=1), 1.0, rtol=1e-6)
        np.testing.assert_allclose(labels[:, 6:], 0.01, rtol=1e-5)  # smoothing mass everywhere


def test_mixup_and_cutmix_with_prob_zero_only_smooths_labels():
    mixer = augment.MixupAndCutmix(prob=0.0, label_smoothing=0.2, num_classes=5)
    batch = RNG.rand(4, 8, 8, 3).astype(np.float32)
    images, labels = mixer(batch, tf.constant([4, 0, 2, 2]))
    np.testing.assert_array_equal(_np(images), batch)
    expected = np.full((4, 5), 0.04, np.float32)
    expected[[0, 1, 2, 3], [4, 0, 2, 2]] = 0.84
    np.testing.assert_allclose(_np(labels), expected, rtol=1e-6)


def test_mixup_and_cutmix_rejects_bad_settings():
    with pytest.raises(ValueError, match="mixup_alpha or cutmix_alpha"):
        augment.MixupAndCutmix(mixup_alpha=0.0, cutmix_alpha=0.0)
    with pytest.raises(TypeError, match="float images"):
        augment.MixupAndCutmix(num_classes=3)(np.zeros((2, 4, 4, 3), np.uint8), [0, 1])


def test_random_erasing_rejects_uint8_images():
    with pytest.raises(TypeError, match="float image"):
        augment.RandomErasing(probability=1.0).distort(IMAGE)


# -------------------------------------------------------------------------- RandomErasing

def test_random_erasing_with_probability_zero_is_identity():
    image = RNG.rand(16, 16, 3).astype(np.float32)
    eraser = augment.RandomErasing(probability=0.0)
    for _ in range(8):
        np.testing.assert_array_equal(_np(eraser.distort(image)), image)


@pytest.mark.parametrize("shape,min_area,max_area,draws", [
    ((30, 24, 3), 0.05, 0.25, 10),
    # On a tiny image, rounding the box to whole pixels often leaves the area bounds.
    ((10, 10, 1), 0.1, 0.2, 30),
])
def test_random_erasing_erases_one_rectangle_within_the_area_bounds(shape, min_area, max_area,
                                                                     draws):
    image = np.zeros(shape, np.float32)
    eraser = augment.RandomErasing(probability=1.0, min_area=min_area, max_area=max_area)
    for _ in range(draws):
        out = _np(eraser.distort(image))
        changed = (out != 0).any(axis=-1)
        top, bottom, left, right = _rectangle(changed)
        assert min_area <= changed.mean() <= max_area
        assert (bottom - top) < shape[0] and (right - left) < shape[1]
        assert 0.3 < np.std(out[changed]) < 3.0  # filled with N(0, 1) noise


def test_random_erasing_count_range():
    image = np.zeros((40, 40, 3), np.float32)
    eraser = augment.RandomErasing(probability=1.0, min_area=0.01, max_area=0.02,
                                   min_count=3, max_count=3)
    single = augment.RandomErasing(probability=1.0, min_area=0.01, max_area=0.02)
    # Three boxes of at most 2% each cover more than one box can, and at most 6%.
    areas = [(_np(eraser.distort(image)) != 0).any(axis=-1).mean() for _ in range(6)]
    assert max(areas) > 0.02 and max(areas) <= 0.06
    assert all((_np(single.distort(image)) != 0).any(axis=-1).mean() <= 0.02 for _ in range(6))


# --------------------------------------------------------------------------- color_jitter

def test_color_jitter_with_zero_magnitudes_is_identity():
    np.testing.assert_array_equal(_np(augment.color_jitter(IMAGE)), IMAGE)
    np.testing.assert_array_equal(_np(augment.color_jitter(IMAGE.astype(np.float32))), IMAGE)


def test_color_jitter_brightness_scales_by_a_factor_in_range():
    ratios = []
    for _ in range(6):
        out = _np(augment.color_jitter(IMAGE, brightness=0.5)).astype(np.float32)
        bright = (IMAGE >= 80) & (out < 255)
        ratios.append(np.median(out[bright] / IMAGE[bright]))
        assert 0.49 <= ratios[-1] <= 1.51
    assert max(ratios) - min(ratios) > 0.05  # the factor is random


def test_color_jitter_saturation_zero_to_two_and_contrast():
    assert not np.array_equal(_np(augment.color_jitter(IMAGE, saturation=1.0)), IMAGE)
    assert not np.array_equal(_np(augment.color_jitter(IMAGE, contrast=0.8)), IMAGE)
    with pytest.raises(ValueError, match="saturation"):
        augment.color_jitter(IMAGE, saturation=-0.1)
