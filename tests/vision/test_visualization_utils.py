"""visualization_utils draws boxes, labels and masks where the detections are."""

import os
import sys

import numpy as np
import pytest

from lite_launcher.vision.utils.object_detection import visualization_utils as vis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from missing_module import block_import  # noqa: E402

CATEGORIES = {1: {"id": 1, "name": "cat"}, 2: {"id": 2, "name": "dog"}}


def _colour(class_id):
    name = vis.STANDARD_COLORS[class_id % len(vis.STANDARD_COLORS)]
    return np.asarray(vis._rgb(name), np.uint8)  # pylint: disable=protected-access


def test_boxes_are_drawn_on_their_edges_in_their_class_colour_and_low_scores_skipped():
    image = np.zeros((60, 80, 3), np.uint8)
    boxes = np.array([[20, 10, 50, 40], [5, 50, 25, 75]], np.float32)
    out = vis.visualize_boxes_and_labels_on_image_array(
        image, boxes, np.array([1, 2]), np.array([0.9, 0.3]), CATEGORIES, line_thickness=2)
    assert out is image
    colour = _colour(1)
    # The outline of box 0: its four edges (2 px, centred), its inside untouched.
    for y, x in ((20, 25), (49, 25), (35, 10), (35, 39)):
        np.testing.assert_array_equal(image[y, x], colour)
    assert not image[30:45, 15:35].any()
    # Box 1 scores below min_score_thresh (0.5): not drawn.
    assert not image[6:24, 52:74].any() and not image[5, 60].any()


def test_labels_need_pillow_and_sit_above_the_box():
    pytest.importorskip("PIL")
    image = np.full((60, 80, 3), 255, np.uint8)
    vis.visualize_boxes_and_labels_on_image_array(
        image, np.array([[30, 10, 55, 70]]), np.array([2]), np.array([0.8]), CATEGORIES,
        line_thickness=1)
    above = image[:30]
    # A label filled with the class colour, with dark (anti-aliased) text in it, starting
    # at the box's left edge and ending at its top edge.
    filled = (above == _colour(2)).all(axis=-1)
    assert filled.sum() > 200 and filled[29, 10] and not filled[:, :10].any()
    assert (above.astype(int).sum(axis=-1) < 100).sum() > 10


def test_without_pillow_boxes_are_drawn_and_labels_left_out(monkeypatch):
    block_import(monkeypatch, "PIL")
    image = np.zeros((60, 80, 3), np.uint8)
    vis.visualize_boxes_and_labels_on_image_array(
        image, np.array([[30, 10, 55, 70]]), np.array([2]), np.array([0.8]), CATEGORIES)
    np.testing.assert_array_equal(image[30, 40], _colour(2))
    assert not image[:25].any()


def test_masks_are_blended_in_the_box_colour_and_ground_truth_is_black_without_labels():
    image = np.full((40, 40, 3), 200, np.uint8)
    mask = np.zeros((1, 40, 40), np.uint8)
    mask[0, 10:20, 10:20] = 1
    vis.visualize_boxes_and_labels_on_image_array(
        image, np.array([[0.2, 0.2, 0.6, 0.6]]), np.array([1]), np.array([0.99]),
        CATEGORIES, instance_masks=mask, use_normalized_coordinates=True, line_thickness=1)
    expected = np.round(200 * 0.6 + _colour(1).astype(float) * 0.4).astype(np.uint8)
    np.testing.assert_array_equal(image[15, 15], expected)
    assert (image[2, 30] == 200).all()  # outside mask, box and label (drawn below)
    truth = np.full((40, 40, 3), 255, np.uint8)
    vis.visualize_boxes_and_labels_on_image_array(
        truth, np.array([[8, 8, 30, 30]]), np.array([1]), None, CATEGORIES, line_thickness=1)
    assert (truth[8, 10:28] == 0).all() and (truth[:7] == 255).all()


def test_bad_inputs_are_one_line():
    with pytest.raises(ValueError, match="uint8 NumPy array"):
        vis.draw_bounding_box_on_image_array(np.zeros((4, 4, 3), np.float32), 0, 0, 1, 1)
    with pytest.raises(ValueError, match="unknown colour 'Mauve'"):
        vis.draw_bounding_box_on_image_array(np.zeros((4, 4, 3), np.uint8), 0, 0, 1, 1,
                                             color="Mauve")
    with pytest.raises(ValueError, match="the image is \\(4, 4\\) but the mask is \\(3, 3\\)"):
        vis.draw_mask_on_image_array(np.zeros((4, 4, 3), np.uint8), np.zeros((3, 3), np.uint8))
