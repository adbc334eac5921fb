"""Writes tfm_box_augment_reference.npz: TFM 2.20's box-aware AutoAugment / RandAugment ops
(`official.vision.ops.augment`) on one fixed image and fixed normalised boxes, each op called
with a fixed argument (no random sign), plus the policy tables lite must agree with. Run in
TFM's venv:

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_box_augment_reference.py

`inputs()` and the constants use NumPy only: the test imports them to rebuild the inputs.

Keys: `<op>/<case>/image` (uint8) and `<op>/<case>/boxes` for `rotate_with_bboxes`,
`shear_with_bboxes`, `translate_bbox` and `translate_y_only_bboxes` (prob 3: TFM divides it by 3,
so every box is shifted; the boxes do not overlap, so the random order does not matter);
`policy/<sign>/...` the 'TranslateX_BBox then Equalize' sub-policy of `POLICY` with either
sign of its shift; `detection_v0` (JSON of TFM's policy), `randaug_detection_ops` and
`randaug_detection_ops_excluding` (RandAugment.build_for_detection's op lists).
"""

import json
import os

import numpy as np

IMAGE_SIZE = (24, 32)
# Each case: (name, op, argument); `op` names one of TFM's box-aware ops.
CASES = (
    ("rotate", "25", 25.0), ("rotate", "-30", -30.0),
    ("shear_x", "0.3", 0.3), ("shear_x", "-0.18", -0.18),
    ("shear_y", "0.3", 0.3), ("shear_y", "-0.18", -0.18),
    ("translate_x", "10", 10.0), ("translate_x", "-6.6", -6.6),
    ("translate_y", "10", 10.0), ("translate_y", "-6.6", -6.6),
    ("translate_y_only", "5", 5.0), ("translate_y_only", "-72", -72.0),
)
# A custom AutoAugment policy that always applies: TranslateX_BBox at level 4, then Equalize.
POLICY = [[("TranslateX_BBox", 1.0, 4), ("Equalize", 1.0, 10)]]
TRANSLATE_CONST = 25.0  # level 4 -> 10 pixels
EXCLUDE_OPS = ["Rotate", "Cutout", "TranslateY"]


def inputs():
    """(uint8 image [24, 32, 3], normalised boxes [4, 4], the three of them that do not
    overlap [3, 4]). The whole-image box and the box at the left edge test clipping and TFM's
    minimum-area rule (a box pushed out of the image becomes a 0.05 sliver)."""
    rng = np.random.default_rng(11)
    image = rng.integers(0, 256, IMAGE_SIZE + (3,)).astype(np.uint8)
    boxes = np.array([[0.1, 0.1, 0.45, 0.4], [0.5, 0.55, 0.9, 0.95], [0.0, 0.0, 1.0, 1.0],
                      [0.7, 0.05, 0.95, 0.2]], np.float32)
    return image, boxes, boxes[[0, 1, 3]]


def main():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from official.vision.ops import augment  # pylint: disable=import-outside-toplevel

    image, boxes, apart = (tf.constant(array) for array in inputs())
    replace = [128] * 3
    ops = {
        "rotate": lambda arg: augment.rotate_with_bboxes(image, boxes, arg, replace),
        "shear_x": lambda arg: augment.shear_with_bboxes(image, boxes, arg, replace, True),
        "shear_y": lambda arg: augment.shear_with_bboxes(image, boxes, arg, replace, False),
        "translate_x": lambda arg: augment.translate_bbox(image, boxes, arg, replace, True),
        "translate_y": lambda arg: augment.translate_bbox(image, boxes, arg, replace, False),
        "translate_y_only": lambda arg: augment.translate_y_only_bboxes(
            image, apart, 3.0, arg, replace),
    }
    out = {}
    for op, case, arg in CASES:
        got_image, got_boxes = ops[op](tf.constant(arg, tf.float32))
        out[f"{op}/{case}/image"] = got_image.numpy()
        out[f"{op}/{case}/boxes"] = got_boxes.numpy()
    pixels = POLICY[0][0][2] / 10.0 * TRANSLATE_CONST
    for sign in (1, -1):
        shifted, moved = augment.translate_bbox(image, boxes, sign * pixels, replace, True)
        out[f"policy/{sign}/image"] = augment.equalize(shifted).numpy()
        out[f"policy/{sign}/boxes"] = moved.numpy()
    out["detection_v0"] = np.array(json.dumps(augment.AutoAugment.detection_policy_v0()))
    out["randaug_detection_ops"] = np.array(
        augment.RandAugment.build_for_detection().available_ops)
    out["randaug_detection_ops_excluding"] = np.array(
        augment.RandAugment.build_for_detection(exclude_ops=EXCLUDE_OPS).available_ops)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "tfm_box_augment_reference.npz")
    np.savez_compressed(path, **out)
    print("wrote", path)


if __name__ == "__main__":
    main()
