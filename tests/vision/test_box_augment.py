"""lite's box-aware AutoAugment / RandAugment ops (vision/ops/box_augment.py, augment's
`distort_with_boxes`) against TFM 2.20's on one fixed image and fixed boxes
(data/tfm_box_augment_reference.npz, made by data/make_tfm_box_augment_reference.py in TFM's
venv)."""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.ops import augment, box_augment

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
import make_tfm_box_augment_reference as gen  # noqa: E402  pylint: disable=wrong-import-position

REF = dict(np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                "tfm_box_augment_reference.npz")))
IMAGE, BOXES, APART = gen.inputs()
# The op of each reference case, called as the generator calls TFM's.
OPS = {
    "rotate": lambda image, boxes, arg: box_augment.rotate_with_bboxes(image, boxes, arg),
    "shear_x": lambda image, boxes, arg: box_augment.shear_with_bboxes(image, boxes, arg),
    "shear_y": lambda image, boxes, arg: box_augment.shear_with_bboxes(
        image, boxes, arg, shear_horizontal=False),
    "translate_x": lambda image, boxes, arg: box_augment.translate_bbox(image, boxes, arg),
    "translate_y": lambda image, boxes, arg: box_augment.translate_bbox(
        image, boxes, arg, shift_horizontal=False),
    "translate_y_only": lambda image, boxes, arg: box_augment.translate_y_only_bboxes(
        image, boxes, 3.0, arg),  # prob 3: TFM's prob / 3 shifts every box
}


@pytest.mark.parametrize("op, case, arg", gen.CASES, ids=[f"{o}/{c}" for o, c, _ in gen.CASES])
def test_box_aware_op_equals_tfm(op, case, arg):
    boxes = APART if op == "translate_y_only" else BOXES
    image, moved = OPS[op](IMAGE, boxes, tf.constant(arg))
    np.testing.assert_array_equal(image.numpy(), REF[f"{op}/{case}/image"])
    np.testing.assert_allclose(moved.numpy(), REF[f"{op}/{case}/boxes"], rtol=0, atol=1e-5)
    assert not np.array_equal(image.numpy(), IMAGE)


def test_box_pushed_out_of_the_image_becomes_tfm_sliver():
    # Shifted 10 pixels left, the box at x 0.05 .. 0.2 of a 32-wide image leaves it: clipped
    # flat at 0 and reopened to 0.05, as TFM keeps it (the parser keeps it as a ground truth).
    _, moved = box_augment.translate_bbox(IMAGE, BOXES, 10.0)
    np.testing.assert_allclose(moved.numpy()[3], [16 / 24, 0.0, 22 / 24, 0.05], atol=1e-6)
    np.testing.assert_allclose(REF["translate_x/10/boxes"][3], moved.numpy()[3], atol=1e-6)


@pytest.mark.parametrize("op", sorted(OPS))
def test_box_aware_ops_take_no_boxes(op):
    image, moved = OPS[op](IMAGE, np.zeros([0, 4], np.float32), tf.constant(6.0))
    assert moved.shape == (0, 4) and image.shape == IMAGE.shape


def test_policy_tables_equal_tfm():
    assert json.loads(str(REF["detection_v0"])) == [
        [list(step) for step in sub_policy] for sub_policy in augment._POLICIES["detection_v0"]]
    assert augment.RandAugment.build_for_detection().available_ops == list(
        REF["randaug_detection_ops"])
    excluding = augment.RandAugment.build_for_detection(exclude_ops=gen.EXCLUDE_OPS)
    assert excluding.available_ops == list(REF["randaug_detection_ops_excluding"])


def _matches_one_sign(image, boxes):
    """The reference's sign (1 or -1) whose image and boxes these are, else None."""
    for sign in (1, -1):
        if (np.array_equal(image, REF[f"policy/{sign}/image"])
                and np.allclose(boxes, REF[f"policy/{sign}/boxes"], rtol=0, atol=1e-5)):
            return sign
    return None


def test_auto_augment_box_policy_equals_tfm_for_its_drawn_sign():
    tf.random.set_seed(5)
    policy = augment.AutoAugment(policies=gen.POLICY, translate_const=gen.TRANSLATE_CONST)
    distort = tf.function(policy.distort_with_boxes)
    signs = set()
    for _ in range(6):
        image, boxes = distort(tf.constant(IMAGE, tf.float32), tf.constant(BOXES))
        assert image.dtype == tf.float32  # the input's dtype, as TFM
        signs.add(_matches_one_sign(image.numpy().astype(np.uint8), boxes.numpy()))
    assert signs == {1, -1}


def test_rand_augment_for_detection_moves_the_boxes_with_the_image():
    """One layer of TranslateX only: each image is unchanged (RandAugment's 'no op' choice)
    or shifted by +-10 pixels with TFM's boxes for that shift."""
    tf.random.set_seed(3)
    others = [name for name in augment.RAND_AUGMENT_OPS if name != "TranslateX"]
    rand = augment.RandAugment.build_for_detection(
        num_layers=1, magnitude=4, translate_const=gen.TRANSLATE_CONST, exclude_ops=others)
    assert rand.available_ops == ["TranslateX_BBox"]
    distort = tf.function(rand.distort_with_boxes)
    seen = set()
    for _ in range(8):
        image, boxes = (t.numpy() for t in distort(tf.constant(IMAGE), tf.constant(BOXES)))
        if np.array_equal(image, IMAGE):
            np.testing.assert_array_equal(boxes, BOXES)
            seen.add(0)
            continue
        sign = 1 if np.array_equal(image, box_augment.translate_x(IMAGE, 10.0).numpy()) else -1
        np.testing.assert_array_equal(image, box_augment.translate_x(IMAGE, sign * 10.0))
        np.testing.assert_allclose(boxes, REF[f"policy/{sign}/boxes"], rtol=0, atol=1e-5)
        seen.add(sign)
    assert seen == {0, 1, -1}


def test_image_policies_leave_the_boxes_alone():
    tf.random.set_seed(1)
    image, boxes = augment.AutoAugment("v0").distort_with_boxes(IMAGE, BOXES)
    np.testing.assert_array_equal(boxes.numpy(), BOXES)
    assert image.shape == IMAGE.shape and image.dtype == tf.uint8


def test_distort_without_boxes_refuses_the_box_aware_ops():
    """TFM fails there too; lite names the ops rather than moving an image without its boxes."""
    with pytest.raises(ValueError, match="AutoAugment ops Rotate_BBox, ShearX_BBox, ShearY_BBox, "
                                         "TranslateX_BBox, TranslateY_Only_BBoxes need boxes"):
        augment.AutoAugment("detection_v0").distort(IMAGE)
    with pytest.raises(ValueError, match="RandAugment ops Rotate_BBox.*distort_with_boxes"):
        augment.RandAugment.build_for_detection().distort(IMAGE)
