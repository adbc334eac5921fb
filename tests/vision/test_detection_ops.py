"""RetinaNet's detection ops against TFM 2.20 on fixed inputs.

The reference numbers come from tests/vision/data/make_tfm_detection_ops_reference.py, run
in TFM's venv; its `inputs()` rebuilds the same NumPy inputs here.
"""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.losses import focal_loss
from lite_launcher.vision.losses import retinanet_losses
from lite_launcher.vision.modeling.layers import detection_generator
from lite_launcher.vision.ops import anchor
from lite_launcher.vision.ops import anchor_generator
from lite_launcher.vision.ops import box_matcher
from lite_launcher.vision.ops import box_ops
from lite_launcher.vision.ops import iou_similarity
from lite_launcher.vision.ops import nms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfm_compare import DATA_DIR, load_generator  # noqa: E402

GEN = load_generator("make_tfm_detection_ops_reference")
REF = dict(np.load(os.path.join(DATA_DIR, "tfm_detection_ops_reference.npz")))
DATA = GEN.inputs()


def _anchors(name):
    min_level, max_level, num_scales, ratios, size, image = GEN.ANCHOR_CONFIGS[name]
    return anchor.Anchor(min_level, max_level, num_scales, ratios, size, image)


def _close(actual, expected, tol=1e-6):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


# ----- anchors -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(GEN.ANCHOR_CONFIGS))
def test_anchors_equal_tfm_exactly(name):
    anchors = _anchors(name)
    levels = range(GEN.ANCHOR_CONFIGS[name][0], GEN.ANCHOR_CONFIGS[name][1] + 1)
    assert list(anchors.multilevel_boxes) == [str(level) for level in levels]
    for level, boxes in anchors.multilevel_boxes.items():
        np.testing.assert_array_equal(boxes.numpy(), REF[f"anchors_{name}_{level}"])
    flat = np.concatenate([REF[f"anchors_{name}_{level}"].reshape(-1, 4) for level in levels])
    np.testing.assert_array_equal(anchors.boxes.numpy(), flat)
    assert anchors.anchors_per_location == flat.shape[0] // sum(
        b.shape[0] * b.shape[1] for b in anchors.multilevel_boxes.values())


def test_constant_anchors_are_the_generators_bit_for_bit_and_one_const_per_level():
    min_level, max_level, num_scales, ratios, size, image = GEN.ANCHOR_CONFIGS[
        sorted(GEN.ANCHOR_CONFIGS)[0]]
    generator = anchor.build_anchor_generator(min_level, max_level, num_scales, ratios, size)
    expected = generator(image)
    traced = tf.function(lambda: generator.constant(image)).get_concrete_function()
    # The parsers' map functions hold the anchors as constants: no op computes them.
    assert {op.type for op in traced.graph.get_operations()} <= {"Const", "Identity", "NoOp"}
    for values in (generator.constant(image), traced()):
        assert list(values) == list(expected)
        for level, boxes in expected.items():
            np.testing.assert_array_equal(values[level].numpy(), boxes.numpy())


def test_stride_anchor_generator_equals_tfm_exactly():
    sizes, scales, ratios, strides, clip, image = GEN.STRIDE_GENERATOR
    generated = anchor_generator.AnchorGenerator(sizes, scales, ratios, strides, clip)(image)
    for i, boxes in enumerate(generated):
        np.testing.assert_array_equal(boxes.numpy(), REF[f"stride_anchors_{i}"])


# ----- labeler -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(GEN.LABELER_CASES))
def test_anchor_labeler_equals_tfm(case):
    config, match, unmatched, weights, rows = GEN.LABELER_CASES[case]
    kwargs = {}
    if case == "weighted":
        kwargs = dict(gt_weights=tf.constant(DATA["gt_weights"][rows]),
                      gt_attributes={"att": tf.constant(DATA["gt_attributes"][rows])})
    labeler = anchor.AnchorLabeler(match, unmatched, box_coder_weights=weights)
    cls_t, box_t, att_t, cls_w, box_w = labeler.label_anchors(
        _anchors(config).multilevel_boxes, tf.constant(DATA["gt_boxes"][rows]),
        tf.constant(DATA["gt_labels"][rows]), **kwargs)
    for level in cls_t:
        np.testing.assert_array_equal(cls_t[level].numpy(), REF[f"label_{case}_cls_{level}"])
        _close(box_t[level], REF[f"label_{case}_box_{level}"])
        for name in att_t:
            _close(att_t[name][level], REF[f"label_{case}_{name}_{level}"])
    np.testing.assert_array_equal(cls_w.numpy(), REF[f"label_{case}_cls_weights"])
    np.testing.assert_array_equal(box_w.numpy(), REF[f"label_{case}_box_weights"])
    assert set(att_t) == ({"att"} if case == "weighted" else set())


def test_labeler_conventions_on_the_plain_case():
    # Positives carry their class and box weight 1; ignored anchors have class weight 0.
    cls_targets = np.concatenate([v.reshape(-1) for k, v in sorted(REF.items())
                                  if k.startswith("label_plain_cls_") and k[-1].isdigit()])
    box_weights = REF["label_plain_box_weights"]
    cls_weights = REF["label_plain_cls_weights"]
    # Unfiltered padding rows (IoU 0 with every anchor) are force-matched to anchor 0, which
    # becomes "positive" with class -1: TFM's parser must drop padding before labelling.
    assert np.flatnonzero((cls_targets >= 0) != (box_weights > 0)).tolist() == [0]
    assert cls_targets[0] == -1 and box_weights[0] == 1
    assert (cls_weights[box_weights > 0] == 1).all()
    assert 0 < (cls_weights == 0).sum() < cls_weights.size
    assert (REF["label_empty_box_weights"] == 0).all() and (REF["label_empty_cls_weights"]
                                                            == 1).all()


def test_rpn_labeler_samples_at_most_the_batch_with_the_foreground_fraction():
    labeler = anchor.RpnAnchorLabeler(0.5, 0.3, rpn_batch_size_per_im=32, rpn_fg_fraction=0.25,
                                      deterministic=True)
    anchors = _anchors("a").multilevel_boxes
    scores, boxes = labeler.label_anchors(anchors, tf.constant(DATA["gt_boxes"][:6]),
                                          tf.constant(DATA["gt_labels"][:6]))
    flat = np.concatenate([s.numpy().reshape(-1) for s in scores.values()])
    assert (flat == 1).sum() == 8 and (flat == 0).sum() == 24 and (flat == -1).sum() == (
        flat.size - 32)
    # Deterministic: the lowest-index candidates; the same on a second call.
    again = labeler.label_anchors(anchors, tf.constant(DATA["gt_boxes"][:6]),
                                  tf.constant(DATA["gt_labels"][:6]))[0]
    np.testing.assert_array_equal(flat, np.concatenate([s.numpy().reshape(-1)
                                                        for s in again.values()]))
    negatives = np.flatnonzero(flat == 0)
    assert negatives.max() < 40  # the first negatives, not random ones
    flat_boxes = np.concatenate([b.numpy().reshape(-1, 4) for b in boxes.values()])
    assert (flat_boxes[flat == 0] == 0).all()
    # The random path samples the same counts, and only among the candidates.
    sampled = anchor.RpnAnchorLabeler(0.5, 0.3, rpn_batch_size_per_im=32, rpn_fg_fraction=0.25,
                                      seed=1).label_anchors(
        anchors, tf.constant(DATA["gt_boxes"][:6]), tf.constant(DATA["gt_labels"][:6]))[0]
    random_flat = np.concatenate([s.numpy().reshape(-1) for s in sampled.values()])
    assert (random_flat == 1).sum() == 8 and (random_flat == 0).sum() == 24
    positive = anchor.AnchorLabeler(0.5, 0.3).label_anchors(
        anchors, tf.constant(DATA["gt_boxes"][:6]), tf.constant(DATA["gt_labels"][:6]))[4] > 0
    assert positive.numpy()[random_flat == 1].all()
    assert not positive.numpy()[random_flat == 0].any()


# ----- box coding, IoU, matcher, NMS --------------------------------------------------------

@pytest.mark.parametrize("suffix,weights", [("", None), ("_weighted", [10.0, 10.0, 5.0, 5.0])])
def test_encode_and_decode_equal_tfm(suffix, weights):
    boxes, anchors = tf.constant(DATA["code_boxes"]), tf.constant(DATA["code_anchors"])
    _close(box_ops.encode_boxes(boxes, anchors, weights), REF["encoded" + suffix])
    _close(box_ops.decode_boxes(tf.constant(DATA["codes"]), anchors, weights),
           REF["decoded" + suffix], 1e-5)
    # decode(encode(b)) == b, away from the log(1000 / 16) clip
    round_trip = box_ops.decode_boxes(box_ops.encode_boxes(boxes, anchors, weights), anchors,
                                      weights)
    _close(round_trip, DATA["code_boxes"], 1e-3)


def test_decode_clips_the_log_scale_at_log_1000_over_16():
    anchors = tf.constant([[0.0, 0.0, 16.0, 8.0]])
    decoded = box_ops.decode_boxes(tf.constant([[0.0, 0.0, 9.0, 0.0]]), anchors).numpy()
    height = decoded[0, 2] - decoded[0, 0]
    assert height == pytest.approx(1000.0, rel=1e-5)


def test_iou_equals_tfm_and_a_hand_computation():
    boxes, anchors = DATA["code_boxes"], DATA["code_anchors"]
    result = iou_similarity.IouSimilarity()(boxes, anchors).numpy()
    _close(result, REF["iou"])
    top = np.maximum(boxes[:, None, :2], anchors[None, :, :2])
    bottom = np.minimum(boxes[:, None, 2:], anchors[None, :, 2:])
    inter = np.prod(np.clip(bottom - top, 0, None), axis=-1)
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    _close(result, inter / (area(boxes)[:, None] + area(anchors)[None] - inter), 1e-5)


def test_bbox_overlap_marks_padding_with_minus_one():
    gt = tf.concat([tf.constant(DATA["code_anchors"][None, :10]), -tf.ones([1, 2, 4])], axis=1)
    result = box_ops.bbox_overlap(tf.constant(DATA["code_boxes"][None]), gt).numpy()
    _close(result, REF["bbox_overlap"])
    assert (result[..., 10:] == -1).all()


def test_box_matcher_equals_tfm_with_ties():
    matcher = box_matcher.BoxMatcher([0.4, 0.5], [-1, -2, 1], force_match_for_each_col=True)
    columns, indicators = matcher(tf.constant(DATA["similarity"]))
    np.testing.assert_array_equal(columns.numpy(), REF["matcher_columns"])
    np.testing.assert_array_equal(indicators.numpy(), REF["matcher_indicators"])


def test_box_matcher_refuses_unsorted_thresholds():
    with pytest.raises(ValueError, match="sorted"):
        box_matcher.BoxMatcher([0.5, 0.4], [-1, -2, 1])


def test_sorted_tiled_nms_equals_tfm_across_two_tiles():
    scores, boxes = nms.sorted_non_max_suppression_padded(
        tf.constant(DATA["nms_scores"]), tf.constant(DATA["nms_boxes"]),
        GEN.NMS_INPUT["max_output_size"], GEN.NMS_INPUT["iou_threshold"])
    np.testing.assert_array_equal(scores.numpy(), REF["nms_scores"])
    np.testing.assert_array_equal(boxes.numpy(), REF["nms_boxes"])


def _tail_nms():
    return nms.sorted_non_max_suppression_padded(
        tf.constant(DATA["nms_tail_scores"]), tf.constant(DATA["nms_tail_boxes"]),
        GEN.NMS_TAIL_INPUT["max_output_size"], GEN.NMS_TAIL_INPUT["iou_threshold"])


def test_sorted_tiled_nms_equals_tfm_with_trailing_tiles_of_zero_boxes():
    scores, boxes = _tail_nms()
    np.testing.assert_array_equal(scores.numpy(), REF["nms_tail_scores"])
    np.testing.assert_array_equal(boxes.numpy(), REF["nms_tail_boxes"])
    assert (REF["nms_tail_scores"][2] == 0).all()  # the image without boxes is padding only


def test_sorted_tiled_nms_runs_each_rows_tiles_up_to_its_own_last_box_or_quota(monkeypatch):
    # Four tiles; image 0's boxes fill its 100 slots in tile 0, image 1's too (its last box is
    # in tile 2), image 2 has none. TFM's one loop over the batch runs all four tiles for
    # every image (image 2 never fills its 100); lite's per-row loops run one tile each for
    # images 0 and 1 and none for image 2. Eager `tf.while_loop` / `tf.map_fn` call their
    # bodies from Python, so the tiles can be counted.
    tiles = []
    body = nms._suppression_loop_body

    def counting_body(boxes, iou_threshold, output_size, idx):
        tiles.append(int(idx))
        return body(boxes, iou_threshold, output_size, idx)

    monkeypatch.setattr(nms, "_suppression_loop_body", counting_body)
    tf.config.run_functions_eagerly(True)  # the eager call's tf.function, run from Python
    try:
        _tail_nms()
    finally:
        tf.config.run_functions_eagerly(False)
    assert tiles == [0, 0]


# ----- losses ------------------------------------------------------------------------------

def _loss_batch():
    min_level, max_level = GEN.ANCHOR_CONFIGS["b"][:2]
    levels = [str(level) for level in range(min_level, max_level + 1)]
    outputs = {"cls_outputs": {lv: tf.constant(DATA[f"loss_cls_{lv}"]) for lv in levels},
               "box_outputs": {lv: tf.constant(DATA[f"loss_box_{lv}"]) for lv in levels},
               "attribute_outputs": {"depth": {lv: tf.constant(DATA[f"loss_att_{lv}"])
                                               for lv in levels}}}
    labels = {key: {lv: tf.constant(REF[f"loss_label_{key}_{lv}"]) for lv in levels}
              for key in ("cls_targets", "box_targets")}
    labels["attribute_targets"] = {"depth": {lv: tf.constant(REF[f"loss_label_depth_{lv}"])
                                             for lv in levels}}
    labels["cls_weights"] = tf.constant(REF["loss_label_cls_weights"])
    labels["box_weights"] = tf.constant(REF["loss_label_box_weights"])
    return outputs, labels


def test_loss_labels_are_lites_labels_too():
    # The labels fed to both losses: lite's labeler gives TFM's on this batch as well.
    labeler = anchor.AnchorLabeler(0.5, 0.4)
    for i in range(2):
        cls_t, box_t, att_t, cls_w, box_w = labeler.label_anchors(
            _anchors("b").multilevel_boxes, tf.constant(DATA["loss_gt_boxes"][i]),
            tf.constant(DATA["loss_gt_labels"][i]),
            gt_attributes={"depth": tf.constant(DATA["loss_gt_attributes"][i])})
        for level in cls_t:
            np.testing.assert_array_equal(cls_t[level], REF[f"loss_label_cls_targets_{level}"][i])
            _close(box_t[level], REF[f"loss_label_box_targets_{level}"][i])
            _close(att_t["depth"][level], REF[f"loss_label_depth_{level}"][i])
        np.testing.assert_array_equal(box_w, REF["loss_label_box_weights"][i])
        np.testing.assert_array_equal(cls_w, REF["loss_label_cls_weights"][i])


@pytest.mark.parametrize("suffix", ["", "_attributes"])
def test_retinanet_losses_equal_tfm_build_losses(suffix):
    outputs, labels = _loss_batch()
    heads = [retinanet_losses.AttributeHead("depth", "regression", 1)] if suffix else ()
    losses = retinanet_losses.retinanet_losses(
        outputs, labels, aux_losses=[tf.constant(v) for v in GEN.AUX_LOSSES],
        attribute_heads=heads, **GEN.LOSS_PARAMS)
    for key in ("total_loss", "cls_loss", "box_loss", "model_loss"):
        _close(losses[key], REF[f"loss{suffix}_{key}"])
    assert float(losses["total_loss"] - losses["model_loss"]) == pytest.approx(
        sum(GEN.AUX_LOSSES))


def test_retinanet_losses_name_a_missing_attribute():
    outputs, labels = _loss_batch()
    with pytest.raises(ValueError, match="'height' is not in the labels"):
        retinanet_losses.retinanet_losses(
            outputs, labels, num_classes=5,
            attribute_heads=[retinanet_losses.AttributeHead("height")])


def test_focal_loss_equals_tfm_with_sum_reduction():
    loss = focal_loss.FocalLoss(alpha=0.25, gamma=1.5, reduction="sum")
    _close(loss(DATA["focal_true"], DATA["focal_pred"]), REF["focal_sum"])
    elementwise = focal_loss.sigmoid_focal_loss(DATA["focal_true"], DATA["focal_pred"], 0.25, 1.5)
    weights = np.arange(14.0).reshape(2, 7, 1) / 7
    _close(np.sum(elementwise.numpy() * weights), REF["focal_sum_weighted"], 1e-5)


# ----- detection generator ------------------------------------------------------------------

def _generator_inputs(batch_anchors=True):
    min_level, max_level, num_scales, ratios, size, image = GEN.GENERATOR_ANCHOR
    anchors = anchor.Anchor(min_level, max_level, num_scales, ratios, size, image)
    levels = [str(level) for level in range(min_level, max_level + 1)]
    raw_boxes = {lv: tf.constant(DATA[f"gen_boxes_{lv}"]) for lv in levels}
    raw_scores = {lv: tf.constant(DATA[f"gen_scores_{lv}"]) for lv in levels}
    raw_attributes = {"att": {lv: tf.constant(DATA[f"gen_att_{lv}"]) for lv in levels}}
    anchor_boxes = {lv: tf.tile(anchors.multilevel_boxes[lv][None], [2, 1, 1, 1])
                    for lv in levels}
    image_shape = tf.constant(GEN.GENERATOR_IMAGE_SHAPE, tf.float32)
    return raw_boxes, raw_scores, anchor_boxes, image_shape, raw_attributes


@pytest.mark.parametrize("case", sorted(GEN.GENERATOR_CASES))
def test_detection_generator_equals_tfm(case):
    raw_boxes, raw_scores, anchor_boxes, image_shape, raw_attributes = _generator_inputs()
    layer = detection_generator.MultilevelDetectionGenerator(return_decoded=True,
                                                             **GEN.GENERATOR_CASES[case])
    result = layer(raw_boxes, raw_scores, anchor_boxes, image_shape,
                   raw_attributes=raw_attributes if case == "v1_attributes" else None)
    # (keys of other cases sharing this prefix, v1 / v1_sparse, start with their suffix)
    expected = {key[len(f"gen_{case}_"):]: value for key, value in REF.items()
                if key.startswith(f"gen_{case}_") and key[len(f"gen_{case}_"):].startswith(
                    ("decoded_", "detection_", "num_"))}
    flat = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update({f"{key}_{name}": tensor for name, tensor in value.items()})
        else:
            flat[key] = value
    assert set(flat) == set(expected)
    for key, value in flat.items():
        if key in ("num_detections", "detection_classes"):
            np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)
        else:
            _close(value, expected[key], 1e-5)


def test_detection_generator_ties_are_exercised():
    # The fixed inputs hold equal scores among the detections TFM keeps (so the test above
    # pins TFM's tie order), and the sparse cases leave padding slots.
    scores = REF["gen_v1_detection_scores"][0]
    assert len(np.unique(scores)) < len(scores)
    assert (REF["gen_v1_sparse_num_detections"] < 20).all()
    assert (REF["gen_v2_sparse_detection_scores"][:, -1] == 0).all()


@pytest.mark.parametrize("version", ["v1", "v2", "batched"])
def test_detection_generator_keeps_static_shapes_in_a_graph(version):
    raw_boxes, raw_scores, anchor_boxes, image_shape, _ = _generator_inputs()
    layer = detection_generator.MultilevelDetectionGenerator(
        nms_version=version, max_num_detections=7, pre_nms_top_k=30)
    spec = lambda t: tf.TensorSpec([None] + t.shape[1:], t.dtype)

    @tf.function(jit_compile=False)
    def run(boxes, scores, anchors, shape):
        out = layer(boxes, scores, anchors, shape)
        assert out["detection_boxes"].shape.as_list()[1:] == [7, 4]
        assert out["detection_scores"].shape.as_list()[1:] == [7]
        assert out["detection_classes"].shape.as_list()[1:] == [7]
        return out

    concrete = run.get_concrete_function(
        tf.nest.map_structure(spec, raw_boxes), tf.nest.map_structure(spec, raw_scores),
        tf.nest.map_structure(spec, anchor_boxes), tf.TensorSpec([None, 2], tf.float32))
    out = concrete(raw_boxes, raw_scores, anchor_boxes, image_shape)
    eager = layer(raw_boxes, raw_scores, anchor_boxes, image_shape)
    np.testing.assert_array_equal(out["detection_classes"].numpy(),
                                  eager["detection_classes"].numpy())
    assert out["detection_classes"].dtype == tf.int32
    assert ((out["detection_classes"].numpy() >= 1) & (out["detection_classes"].numpy()
                                                       <= 3)).all()


def test_detection_generator_config_round_trips():
    layer = detection_generator.MultilevelDetectionGenerator(
        nms_version="v2", use_class_agnostic_nms=True, max_num_detections=9,
        box_coder_weights=(10, 10, 5, 5), name="gen")
    config = layer.get_config()
    clone = detection_generator.MultilevelDetectionGenerator.from_config(config)
    assert clone.get_config() == config
    assert config["box_coder_weights"] == [10, 10, 5, 5] and config["max_num_detections"] == 9


@pytest.mark.parametrize("kwargs,message", [
    (dict(nms_version="v3"), "nms_version 'v3' is not supported"),
    (dict(nms_version="v1", use_class_agnostic_nms=True), "use_class_agnostic_nms needs"),
    (dict(nms_version="v2", soft_nms_sigma=0.5), "soft_nms_sigma needs"),
    (dict(max_num_detections=0), "max_num_detections"),
])
def test_detection_generator_refuses_bad_settings_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as error:
        detection_generator.MultilevelDetectionGenerator(**kwargs)
    assert "\n" not in str(error.value)
