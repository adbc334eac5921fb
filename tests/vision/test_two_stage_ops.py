"""Two-stage detection layers against TFM 2.20 on fixed inputs: ROI generator, ROI sampler,
ROI aligner and multilevel crop-and-resize, mask sampler and crop-mask-in-target-box, the
two-stage detection generator.

The reference numbers come from tests/vision/data/make_tfm_two_stage_ops_reference.py, run in
TFM's venv; its `inputs()` rebuilds the same NumPy inputs here.
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.modeling.layers import detection_generator
from lite_launcher.vision.modeling.layers import mask_sampler
from lite_launcher.vision.modeling.layers import roi_aligner
from lite_launcher.vision.modeling.layers import roi_generator
from lite_launcher.vision.modeling.layers import roi_sampler
from lite_launcher.vision.ops import anchor
from lite_launcher.vision.ops import sampling_ops
from lite_launcher.vision.ops import spatial_transform_ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfm_compare import DATA_DIR, load_generator  # noqa: E402

GEN = load_generator("make_tfm_two_stage_ops_reference")
REF = dict(np.load(os.path.join(DATA_DIR, "tfm_two_stage_ops_reference.npz")))
DATA = GEN.inputs()
IMAGE_SHAPE = tf.constant(GEN.IMAGE_SHAPE, tf.float32)


def _close(actual, expected, tol=1e-6):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


def _roundtrip(layer):
    """The layer rebuilt from its config (what a .keras file stores)."""
    config = keras.saving.serialize_keras_object(layer)
    return keras.saving.deserialize_keras_object(config)


# ----- ROI generator -----------------------------------------------------------------------

def _rpn_inputs():
    min_level, max_level, num_scales, ratios, size, image = GEN.RPN_ANCHOR
    levels = [str(level) for level in range(min_level, max_level + 1)]
    anchors = anchor.Anchor(min_level, max_level, num_scales, ratios, size, image)
    batched = {lv: tf.tile(anchors.multilevel_boxes[lv][None], [GEN.BATCH, 1, 1, 1])
               for lv in levels}
    return ({lv: tf.constant(DATA[f"rpn_boxes_{lv}"]) for lv in levels},
            {lv: tf.constant(DATA[f"rpn_scores_{lv}"]) for lv in levels}, batched)


@pytest.mark.parametrize("case", sorted(GEN.ROI_GENERATOR_CASES))
def test_roi_generator_equals_tfm(case):
    kwargs, training = GEN.ROI_GENERATOR_CASES[case]
    layer = _roundtrip(roi_generator.MultilevelROIGenerator(**kwargs))
    rois, scores = layer(*_rpn_inputs(), IMAGE_SHAPE, training=training)
    _close(rois, REF[f"roi_generator_{case}_boxes"])
    _close(scores, REF[f"roi_generator_{case}_scores"])


def test_roi_generator_pads_short_levels_with_zero_scores():
    # The "train" case's score threshold leaves fewer proposals than asked for: TFM pads.
    scores = REF["roi_generator_train_scores"]
    assert 0 < (scores > 0).sum(axis=1).min() < scores.shape[1]


# ----- ROI sampler -------------------------------------------------------------------------

def _sampler_call(case):
    layer = _roundtrip(roi_sampler.ROISampler(**GEN.ROI_SAMPLER_CASES[case]))
    args = [tf.constant(DATA[key]) for key in ("proposals", "gt_boxes", "gt_classes")]
    outer = case.startswith("band_outer")
    if outer:
        args.append(tf.constant(DATA["gt_outer_boxes"]))
    names = ["rois", "gt_boxes"] + (["gt_outer_boxes"] if outer else []) + ["gt_classes",
                                                                          "gt_indices"]
    return names, layer(*args)


@pytest.mark.parametrize("case", [c for c in GEN.ROI_SAMPLER_CASES if c.endswith("_permuted")])
def test_roi_sampler_with_tfm_permutation_equals_tfm(case, monkeypatch):
    # TFM's draw (tf.random.shuffle per image) replaced by the same fixed permutations on
    # both sides: the sampled ROIs, their order and their targets are then exact.
    permutation = DATA[f"permutation_{case}"]
    monkeypatch.setattr(sampling_ops, "random_permutations",
                        lambda batch, size: tf.constant(permutation))
    names, result = _sampler_call(case)
    assert len(result) == len(names)
    for name, value in zip(names, result):
        _close(value, REF[f"roi_sampler_{case}_{name}"], tol=0)


def test_roi_sampler_where_all_candidates_fit_equals_tfm_whatever_the_draw():
    # Deterministic path: num_sampled_rois equals the number of candidates, so every draw
    # (TFM's own random one when the reference was made, lite's here) samples all of them.
    names, result = _sampler_call("all_fit")
    for name, value in zip(names, result):
        _close(value, REF[f"roi_sampler_all_fit_{name}"], tol=0)


def test_cascade_roi_sampler_skips_subsampling_as_tfm():
    names, result = _sampler_call("cascade")
    assert result[0].shape == (GEN.BATCH, GEN.NUM_PROPOSALS, 4)  # no ground truths mixed in
    for name, value in zip(names, result):
        _close(value, REF[f"roi_sampler_cascade_{name}"], tol=0)


def test_roi_sampler_reference_exercises_every_match_kind():
    # Positives and backgrounds in every case; the band case also has ignored proposals
    # (never sampled) between its two thresholds.
    for case in GEN.ROI_SAMPLER_CASES:
        classes = REF[f"roi_sampler_{case}_gt_classes"]
        assert (classes > 0).any() and (classes == 0).any(), case
    band = REF["roi_sampler_band_outer_permuted_gt_indices"]
    assert (band == -1).any()


def test_balanced_sampler_caps_positives_and_fills_with_negatives():
    # 6 positives, 6 negatives, 4 ignored; sample 8 with at most 25 % positives.
    labels = tf.constant([[True] * 6 + [False] * 10])
    indicator = tf.constant([[True] * 12 + [False] * 4])
    permutation = tf.constant([np.random.default_rng(3).permutation(16)], tf.int32)
    sampled = sampling_ops.static_subsample(indicator, labels, 8, 0.25, permutation)[0].numpy()
    assert sampled.sum() == 8
    assert sampled[:6].sum() == 2 and sampled[6:12].sum() == 6 and not sampled[12:].any()
    with pytest.raises(ValueError, match="num_sampled_rois"):
        sampling_ops.static_subsample(indicator, labels, 17, 0.25)


# ----- ROI aligner / multilevel crop and resize --------------------------------------------

def _features(levels):
    return {str(level): tf.constant(DATA[f"features_{level}"]) for level in levels}


@pytest.mark.parametrize("case", sorted(GEN.ALIGNER_CASES))
def test_roi_aligner_equals_tfm(case):
    crop_size, offset = GEN.ALIGNER_CASES[case]
    low, high = GEN.ALIGNER_LEVELS
    layer = _roundtrip(roi_aligner.MultilevelROIAligner(crop_size=crop_size,
                                                        sample_offset=offset))
    _close(layer(_features(range(low, high + 1)), tf.constant(DATA["align_boxes"])),
           REF[f"aligner_{case}"])


def test_multilevel_crop_and_resize_on_three_levels_equals_tfm():
    low, high = GEN.ALIGNER_LEVELS
    crops = spatial_transform_ops.multilevel_crop_and_resize(
        _features(range(low, high)), tf.constant(DATA["align_boxes"]), output_size=5,
        sample_offset=0.25)
    _close(crops, REF["crop_and_resize_3_levels"])


def test_multilevel_crop_and_resize_gradient_is_its_adjoint():
    """ROI Align is linear in the features, so its gradient is its adjoint: for any F and G,
    <crop(F), G> equals <F, d<crop(F), G>/dF>. Checks the backward pass of the pooled corner
    sum, which the TFM comparisons (forward values) do not reach."""
    low, high = GEN.ALIGNER_LEVELS
    features = _features(range(low, high + 1))
    boxes = tf.constant(DATA["align_boxes"])
    rng = np.random.default_rng(0)
    with tf.GradientTape() as tape:
        tape.watch(features)
        crops = spatial_transform_ops.multilevel_crop_and_resize(features, boxes, output_size=7)
        cotangent = tf.constant(rng.normal(size=crops.shape), crops.dtype)
        inner = tf.reduce_sum(crops * cotangent)
    gradients = tape.gradient(inner, features)
    adjoint = sum(float(tf.reduce_sum(features[level] * gradients[level]))
                  for level in features)
    assert adjoint == pytest.approx(float(inner), rel=1e-5)
    assert all(float(tf.reduce_max(tf.abs(g))) > 0 for g in gradients.values())


def test_aligner_boxes_reach_every_level():
    low, high = GEN.ALIGNER_LEVELS
    levels = spatial_transform_ops.assign_levels(tf.constant(DATA["align_boxes"]), low, high)
    assert set(np.unique(levels.numpy())) == set(range(low, high + 1))


# ----- mask sampler / crop mask in target box ----------------------------------------------

def test_mask_sampler_equals_tfm():
    layer = _roundtrip(mask_sampler.MaskSampler(**GEN.MASK_SAMPLER))
    rois, classes, masks = layer(*(tf.constant(DATA[key]) for key in (
        "mask_rois", "mask_gt_boxes", "mask_gt_classes", "mask_gt_indices", "gt_masks")))
    _close(rois, REF["mask_sampler_rois"], tol=0)
    _close(classes, REF["mask_sampler_classes"], tol=0)
    _close(masks, REF["mask_sampler_masks"])
    assert (REF["mask_sampler_classes"][1] == 0).sum() == 3  # image 1: TFM's background fill


def test_crop_mask_in_target_box_on_rectangular_masks_equals_tfm():
    crops = spatial_transform_ops.crop_mask_in_target_box(
        tf.constant(DATA["crop_masks"]), tf.constant(DATA["crop_boxes"]),
        tf.constant(DATA["crop_targets"]), **GEN.CROP_MASK)
    _close(crops, REF["crop_mask"])


# ----- two-stage detection generator -------------------------------------------------------

@pytest.mark.parametrize("case", sorted(GEN.GENERATOR_CASES))
def test_two_stage_detection_generator_equals_tfm(case):
    kwargs, call_kwargs = GEN.GENERATOR_CASES[case]
    layer = _roundtrip(detection_generator.DetectionGenerator(**kwargs))
    agnostic = call_kwargs.get("bbox_per_class") is False
    result = layer(tf.constant(DATA["gen_agnostic_boxes" if agnostic else "gen_boxes"]),
                   tf.constant(DATA["gen_scores"]), tf.constant(DATA["gen_rois"]), IMAGE_SHAPE,
                   **call_kwargs)
    expected = {key.split(".", 1)[1]: value for key, value in REF.items()
                if key.startswith(f"generator_{case}.")}
    assert sorted(result) == sorted(expected)
    for key, value in expected.items():
        _close(result[key], value, tol=0 if value.dtype.kind == "i" else 1e-6)


def test_two_stage_generator_defaults_are_tfm():
    config = detection_generator.DetectionGenerator().get_config()
    assert {key: config[key] for key in ("apply_nms", "pre_nms_top_k", "nms_version",
                                         "use_sigmoid_probability", "max_num_detections")} == {
        "apply_nms": True, "pre_nms_top_k": 5000, "nms_version": "v2",
        "use_sigmoid_probability": False, "max_num_detections": 100}


def test_layers_keep_box_geometry_in_float32_under_a_mixed_policy():
    # Keras 3 casts every float argument to the compute dtype; in bfloat16 the decoded boxes
    # would be off by whole pixels. The box layers compute in float32, the aligner keeps the
    # features' dtype.
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        generator = detection_generator.DetectionGenerator(apply_nms=False)
        aligner = roi_aligner.MultilevelROIAligner(crop_size=4)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    kwargs = GEN.GENERATOR_CASES["decoded"][1]
    result = generator(tf.constant(DATA["gen_boxes"]), tf.constant(DATA["gen_scores"]),
                       tf.constant(DATA["gen_rois"]), IMAGE_SHAPE, **kwargs)
    assert result["decoded_boxes"].dtype == tf.float32
    _close(result["decoded_boxes"], REF["generator_decoded.decoded_boxes"])
    low, high = GEN.ALIGNER_LEVELS
    features = {key: tf.cast(value, tf.bfloat16)
                for key, value in _features(range(low, high + 1)).items()}
    crops = aligner(features, tf.constant(DATA["align_boxes"]))
    assert crops.dtype == tf.bfloat16


def test_sampler_and_aligner_trace_to_the_same_values():
    # The training step traces these (static shapes throughout; XLA compiles them too, ~9 s).
    sampler = roi_sampler.ROISampler(**GEN.ROI_SAMPLER_CASES["all_fit"])
    sample = tf.function(sampler)
    result = sample(*(tf.constant(DATA[key]) for key in ("proposals", "gt_boxes", "gt_classes")))
    for name, value in zip(("rois", "gt_boxes", "gt_classes", "gt_indices"), result):
        _close(value, REF[f"roi_sampler_all_fit_{name}"], tol=0)
    low, high = GEN.ALIGNER_LEVELS
    align = tf.function(roi_aligner.MultilevelROIAligner())
    # Graph rewrites order the extrapolated (off-map) samples' arithmetic differently.
    _close(align(_features(range(low, high + 1)), tf.constant(DATA["align_boxes"])),
           REF["aligner_crop7"], tol=1e-4)


def test_layers_take_tfm_models_positional_arguments():
    # TFM's MaskRCNNModel calls roi_generator(..., image_shape, training) and
    # detection_generator(..., image_shape, regression_weights, bbox_per_class=...).
    kwargs, training = GEN.ROI_GENERATOR_CASES["train"]
    rois, _ = roi_generator.MultilevelROIGenerator(**kwargs)(*_rpn_inputs(), IMAGE_SHAPE,
                                                             training)
    _close(rois, REF["roi_generator_train_boxes"])
    layer = detection_generator.DetectionGenerator(apply_nms=False)
    result = layer(tf.constant(DATA["gen_boxes"]), tf.constant(DATA["gen_scores"]),
                   tf.constant(DATA["gen_rois"]), IMAGE_SHAPE, [10.0, 10.0, 5.0, 5.0],
                   bbox_per_class=True)
    _close(result["decoded_boxes"], REF["generator_decoded.decoded_boxes"])
    unclipped = layer(tf.constant(DATA["gen_boxes"]), tf.constant(DATA["gen_scores"]),
                      tf.constant(DATA["gen_rois"]), None, [10.0, 10.0, 5.0, 5.0])
    assert np.asarray(unclipped["decoded_boxes"]).max() > 64  # not clipped to the image
