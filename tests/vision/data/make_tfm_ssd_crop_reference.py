"""Writes tfm_ssd_crop_reference.npz: the deterministic pieces of TFM 2.20's SSD random crop
for detection (`augment.filter_boxes_by_ioa`, `augment.crop_normalized_boxes`,
`box_ops.bbox_intersection_over_area`) on fixed inputs. Run in TFM's venv:

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_ssd_crop_reference.py

`inputs()` and the constants use NumPy only: the test imports them to rebuild the inputs. The
crop's draw itself (`tf.image.sample_distorted_bounding_box`) is not compared: the same global
seed gives other crops in TF 2.20 and 2.21 (tried), so the test checks each drawn crop against
these pieces instead.
"""

import os

import numpy as np

IMAGE_SIZE = (24, 32)
MIN_BOX_OVERLAP = 0.4
CROP_OFFSET, CROP_SIZE = (3, 5), (15, 20)


def inputs():
    """(uint8 image [24, 32, 3], normalised boxes [5, 4], crop box [1, 1, 4]); one box is
    empty, one reaches past the image."""
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, IMAGE_SIZE + (3,)).astype(np.uint8)
    boxes = np.array([[0.1, 0.1, 0.5, 0.4], [0.3, 0.5, 0.9, 0.95], [0.0, 0.0, 1.0, 1.0],
                      [0.6, 0.2, 0.6, 0.2], [0.8, 0.7, 1.2, 1.1]], np.float32)
    crop_box = np.array([[[0.2, 0.25, 0.8, 0.9]]], np.float32)
    return image, boxes, crop_box


def main():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from official.vision.ops import augment, box_ops  # pylint: disable=import-outside-toplevel

    _, boxes, crop_box = inputs()
    out = {
        "ioa": box_ops.bbox_intersection_over_area(boxes[None], crop_box).numpy(),
        "filtered": augment.filter_boxes_by_ioa(boxes, crop_box, MIN_BOX_OVERLAP).numpy(),
        "cropped": augment.crop_normalized_boxes(
            boxes, tf.constant(IMAGE_SIZE), tf.constant(CROP_SIZE),
            tf.constant(CROP_OFFSET)).numpy(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfm_ssd_crop_reference.npz")
    np.savez_compressed(path, **out)
    print("wrote", path)


if __name__ == "__main__":
    main()
