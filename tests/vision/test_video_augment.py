"""AutoAugment / RandAugment on clips, as TFM's video parser applies them: each op on the whole
[T, H, W, C] clip (tests/vision/data/make_tfm_video_augment_reference.py wrote TFM 2.20's
outputs), one policy draw for all frames, and the video parser using them."""

import os

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.configs import common
from lite_launcher.vision.dataloaders import video_input
from lite_launcher.vision.ops import augment
from video_clips import CONFIGS, config, records

REFERENCE = np.load(os.path.join(os.path.dirname(__file__), "data",
                                 "tfm_video_augment_reference.npz"))
CLIP = REFERENCE["clip"]

LITE_OPS = {
    "autocontrast": augment.autocontrast,
    "equalize": augment.equalize,
    "invert": augment.invert,
    "grayscale": augment.grayscale,
    "posterize_3": lambda clip: augment.posterize(clip, 3),
    "solarize_100": lambda clip: augment.solarize(clip, 100),
    "solarize_add_40": lambda clip: augment.solarize_add(clip, 40, 128),
    "color_0.4": lambda clip: augment.color(clip, 0.4),
    "contrast_1.5": lambda clip: augment.contrast(clip, 1.5),
    "brightness_1.3": lambda clip: augment.brightness(clip, 1.3),
    "sharpness_0.3": lambda clip: augment.sharpness(clip, 0.3),
    "sharpness_1.7": lambda clip: augment.sharpness(clip, 1.7),
    "rotate_25": lambda clip: augment.rotate(clip, 25.0),
    "translate_x_4": lambda clip: augment.translate_x(clip, 4),
    "translate_y_-3": lambda clip: augment.translate_y(clip, -3),
    "shear_x_0.2": lambda clip: augment.shear_x(clip, 0.2),
    "shear_y_-0.15": lambda clip: augment.shear_y(clip, -0.15),
}


@pytest.mark.parametrize("name", sorted(LITE_OPS))
def test_clip_op_equals_tfm(name):
    out = LITE_OPS[name](tf.constant(CLIP)).numpy()
    assert out.shape == CLIP.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out, REFERENCE[name])


def test_cutout_of_a_clip_is_a_box_in_time_and_space():
    """TFM's cutout_video: a box over a few consecutive frames, not the same square on all."""
    clip = tf.fill((8, 16, 16, 3), tf.constant(7, tf.uint8))
    tf.random.set_seed(5)
    frame_counts = set()
    for _ in range(20):
        painted = augment.cutout(clip, 5, replace=200).numpy() == 200
        frames = np.flatnonzero(painted.any(axis=(1, 2, 3)))
        assert frames.size and np.array_equal(frames, np.arange(frames[0], frames[-1] + 1))
        rows = np.flatnonzero(painted.any(axis=(0, 2, 3)))
        # Half-height drawn from [16 // 4, 16 // 2): at most 2 * 7 rows.
        assert rows.size <= 14
        for t in frames:
            np.testing.assert_array_equal(painted[t], painted[frames[0]])
        frame_counts.add(frames.size)
    # Half-depth from [1, 8 // 4): 2 frames, fewer at the clip's ends.
    assert max(frame_counts) == 2 and frame_counts <= {1, 2}


# A few ops of each kind keep the graphs small (tracing all sixteen branches takes seconds).
FEW_OPS = ("Rotate", "Color", "ShearX", "TranslateY", "Solarize", "Equalize")
EXCLUDED = [op for op in augment.RAND_AUGMENT_OPS if op not in FEW_OPS]


@pytest.mark.parametrize("augmenter", [
    augment.RandAugment(num_layers=2, magnitude=9, exclude_ops=EXCLUDED),
    augment.AutoAugment("deit3_three_augment"),
], ids=["randaug", "autoaug_deit3"])
def test_one_policy_draw_for_all_frames(augmenter):
    """Identical frames stay identical: every frame got the same ops at the same levels (per
    frame draws would tell them apart)."""
    frame = CLIP[0]
    clip = tf.constant(np.stack([frame] * 4))
    changed = 0
    tf.random.set_seed(3)
    for _ in range(12):
        out = augmenter.distort(clip).numpy()
        assert out.shape == clip.shape and out.dtype == np.uint8
        for t in range(1, 4):
            np.testing.assert_array_equal(out[t], out[0])
        changed += not np.array_equal(out[0], frame)
    assert changed >= 6


def test_video_parser_augments_training_clips():
    """aug_type in the DataConfig: the training parser distorts the clips (same shapes and
    range; other clips than without it from the same random state)."""
    augmentation = common.Augmentation(
        type="randaug", randaug=common.RandAugment(magnitude=9, exclude_ops=EXCLUDED))
    fields = dict(CONFIGS["train"], aug_type=augmentation)
    plain = config(CONFIGS["train"], is_training=True)
    augmented = config(fields, is_training=True)
    decoded = video_input.make_decoder(plain)(tf.constant(records()[0]))
    outputs = []
    for cfg in (plain, augmented):
        parse = video_input.Parser(cfg).parse_fn(True)
        tf.random.set_seed(1)
        outputs.append([parse(decoded)[0]["image"].numpy() for _ in range(6)])
    for image in outputs[1]:
        assert image.shape == (4, 16, 16, 3) and 0.0 <= image.min() and image.max() <= 1.0
    assert any(not np.array_equal(a, b) for a, b in zip(*outputs))


def _constant_clips(values, frames=3, size=12):
    return np.stack([np.full((frames, size, size, 3), v, np.float32) for v in values])


def test_mixup_of_clips_mixes_whole_clips_with_hot_labels():
    """Clips [B, T, H, W, C] with the parser's one-hot labels: one weight per clip, the label
    weights those of the pixels."""
    values = [1.0, 2.0, 4.0, 8.0]
    mixer = augment.MixupAndCutmix(cutmix_alpha=0.0, label_smoothing=0.0, num_classes=4)
    images, labels = mixer(_constant_clips(values), tf.one_hot([0, 1, 2, 3], 4))
    images, labels = images.numpy(), labels.numpy()
    for i, value in enumerate(values):
        partner = values[3 - i]
        lam = (images[i, 0, 0, 0, 0] - partner) / (value - partner)
        np.testing.assert_allclose(images[i], images[i, 0, 0, 0, 0])  # all frames alike
        np.testing.assert_allclose(labels[i, [i, 3 - i]], [lam, 1.0 - lam], atol=1e-5)
    assert (labels.max(axis=1) < 1.0).any()


def test_cutmix_of_clips_pastes_one_box_through_time():
    values = [1.0, 2.0, 4.0, 8.0]
    mixer = augment.MixupAndCutmix(mixup_alpha=0.0, label_smoothing=0.2, num_classes=5)
    tf.random.set_seed(2)
    saw_a_box = False
    for _ in range(4):
        images, labels = mixer(_constant_clips(values), tf.one_hot([0, 1, 2, 3], 5))
        images, labels = images.numpy(), labels.numpy()
        for i in range(4):
            pasted = images[i, ..., 0] == values[3 - i]
            for t in range(1, 3):
                np.testing.assert_array_equal(pasted[t], pasted[0])
            saw_a_box |= bool(pasted.any())
            share = pasted[0].mean()
            # Smoothing 0.2 over 5 classes: a one-hot 1 becomes 0.84, a 0 becomes 0.04.
            np.testing.assert_allclose(labels[i, i], (1 - share) * 0.8 + 0.04, atol=1e-5)
            np.testing.assert_allclose(labels[i, 3 - i], share * 0.8 + 0.04, atol=1e-5)
        np.testing.assert_allclose(labels.sum(axis=1), 1.0, rtol=1e-6)
    assert saw_a_box


def test_video_dataset_mixes_batches_of_clips():
    """mixup_and_cutmix in the DataConfig: batches of training clips come out mixed, their
    labels smoothed (TFM's task applies it after batching)."""
    from video_clips import RECORDS  # pylint: disable=import-outside-toplevel

    cfg = config(CONFIGS["train"], is_training=True, input_path=RECORDS, global_batch_size=3,
                 mixup_and_cutmix=common.MixupAndCutmix(label_smoothing=0.1))
    features, labels = next(iter(video_input.build_dataset(cfg)))
    assert features["image"].shape == (3, 4, 16, 16, 3)
    labels = labels.numpy()
    assert labels.shape == (3, 5) and labels.min() >= 0.1 / 5 - 1e-6
    # A smoothed one-hot row sums to 1, clip 1's two-hot row to 2 * 0.9 + 0.1; a mixed row
    # lies in between.
    sums = labels.sum(axis=1)
    assert (sums > 1.0 - 1e-5).all() and (sums < 1.9 + 1e-5).all()
