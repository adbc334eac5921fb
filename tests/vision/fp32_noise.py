"""How far apart two correct float32 runs of one deep network land, for the TFM-reference tests.

Kernels sum in orders that depend on the CPU (its ISA, cache sizes) and on the kernel library
(oneDNN's blocking or Eigen's), so lite's outputs and TFM's reference arrays differ by rounding
that grows with depth. `benchmarks/fp32_noise.py` measures it with the tests' own models,
checkpoints and reference arrays, one process with oneDNN and one with Eigen
(TF_ENABLE_ONEDNN_OPTS=0); on an AMD EPYC, where TensorFlow uses Eigen unless told otherwise and
where TFM's reference arrays were written: `benchmarks/results/2026-12-06-1690600-fp32-noise.json`.
On the RetinaNet ResNet-50 FPN at 1/16 width of test_retinanet_checkpoint, class outputs of level
3, max |difference| over mean |reference| (`relative_error`): lite vs TFM 0 with Eigen and
1.8e-4 with oneDNN (2.3e-4 at the worst level and kind); lite with oneDNN vs lite with Eigen,
same weights and inputs, 1.8e-4. Detections of that RetinaNet and of test_maskrcnn_checkpoint's
Mask R-CNN vs TFM's, with oneDNN: box corners 3.4e-3 px, scores 1.7e-5, a mask pixel 4.6e-5
(with Eigen at most 6.0e-8); lite's SavedModel's optimised graph moves RetinaNet's box corners
by up to 2.9e-3 px on its own (3.8e-3 px from TFM's served boxes). A weight read into the wrong
place moves the class outputs by 5.8 (the stem kernel's output channels reversed; the model as
built, 12.9): each test checks > 1e-2 first.

Measured on an Intel Xeon with AMX in an earlier session, not filed: lite vs TFM 1.8e-4, lite
with oneDNN vs lite with Eigen 1.2e-4, box corners 2.4e-3 px, scores 2.6e-5, a mask pixel
1.0e-4. `relative_error` and `assert_detections_equal` apply these bounds.
"""

import numpy as np

# Max |difference| over mean |reference| (or over max |reference| where a test says so).
DEEP_NETWORK_TOLERANCE = 5e-4

# Detection boxes in pixels of a 128-px image: the same rounding, scaled by the anchor sizes in
# box decoding (the measured corners: the module docstring).
BOX_PIXEL_TOLERANCE = 1e-2

# Scores and mask probabilities (in [0, 1]) after that rounding (measured: the module docstring).
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
