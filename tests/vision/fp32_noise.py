"""How far apart two correct float32 runs of one deep network land, for the TFM-reference tests.

Kernels sum in orders that depend on the CPU (its ISA, cache sizes and oneDNN's blocking), so
lite's outputs and TFM's reference arrays (written on an AMD EPYC) differ by rounding that grows
with depth. Measured on the RetinaNet ResNet-50 FPN at 1/16 width of test_retinanet_checkpoint,
class outputs of level 3, max |difference| over mean |reference|: lite vs TFM under 1e-4 on the
AMD EPYC and 1.8e-4 on an Intel Xeon with AMX; on that Xeon, lite with oneDNN vs lite with Eigen
(TF_ENABLE_ONEDNN_OPTS=0), same weights and inputs, differ by 1.2e-4 themselves. A weight read
into the wrong place moves the outputs by more than 1e-2 (each test checks that first).
`relative_error` and `assert_detections_equal` apply these bounds.
"""

import numpy as np

# Max |difference| over mean |reference| (or over max |reference| where a test says so).
DEEP_NETWORK_TOLERANCE = 5e-4

# Detection boxes in pixels of a 128-px image: the same rounding, scaled by the anchor sizes in
# box decoding (2.4e-3 px lite vs TFM on the Xeon above; a SavedModel's optimised graph moves
# corners by up to 2e-3 px on its own).
BOX_PIXEL_TOLERANCE = 1e-2

# Scores and mask probabilities (in [0, 1]) after that rounding: 2.6e-5 (scores) and 1.0e-4
# (a mask pixel) lite vs TFM on the Xeon above.
PROBABILITY_TOLERANCE = 5e-4


def relative_error(actual, expected):
    """Max |actual - expected| over mean |expected|: the measure of DEEP_NETWORK_TOLERANCE."""
    return np.abs(np.asarray(actual) - expected).max() / np.abs(expected).mean()


def assert_detections_equal(outputs, ref, prefix=""):
    """Detections of image 0 against reference arrays `ref[prefix + key]`, over the first
    `num_detections` rows: counts and classes exact, scores (and masks, where the reference has
    them) within PROBABILITY_TOLERANCE, boxes (pixels) within BOX_PIXEL_TOLERANCE."""
    count = int(ref[prefix + "num_detections"][0])
    assert count > 1
    assert int(np.asarray(outputs["num_detections"])[0]) == count
    np.testing.assert_array_equal(
        np.asarray(outputs["detection_classes"])[0, :count].astype(np.int64),
        ref[prefix + "detection_classes"][0, :count].astype(np.int64))
    tolerances = {"detection_scores": PROBABILITY_TOLERANCE,
                  "detection_boxes": BOX_PIXEL_TOLERANCE}
    if prefix + "detection_masks" in ref:
        tolerances["detection_masks"] = PROBABILITY_TOLERANCE
    for key, tolerance in tolerances.items():
        np.testing.assert_allclose(np.asarray(outputs[key])[0, :count],
                                   ref[prefix + key][0, :count], atol=tolerance, err_msg=key)
