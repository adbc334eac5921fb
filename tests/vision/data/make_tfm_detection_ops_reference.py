"""Writes tfm_detection_ops_reference.npz: TFM 2.20's detection ops on fixed inputs (anchors,
anchor labels, box coding, IoU, matcher, tiled NMS, RetinaNet losses and the multilevel
detection generator's NMS versions). Run in TFM's venv (`bash benchmarks/setup_tfm_env.sh`):

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_detection_ops_reference.py

`inputs()` and the config tables use NumPy only: the test imports them to rebuild the inputs.
"""

import os

import numpy as np

# Anchor configs: (min_level, max_level, num_scales, aspect_ratios, anchor_size, image_size).
ANCHOR_CONFIGS = {
    "a": (3, 5, 3, [0.5, 1.0, 2.0], 4.0, [64, 96]),
    "b": (2, 4, 2, [1.0, 2.0], 3.0, [50, 70]),  # sizes not divisible by the strides
}
# Stride-based generator (TFM's AnchorGeneratorv1): sizes, scales, ratios, strides, clip, image.
STRIDE_GENERATOR = ([8, 16], [1.0, 1.5], [0.5, 1.0, 2.0], [8, 16], True, [40, 48])
LABELER_CASES = {
    # name: (anchor config, match_threshold, unmatched_threshold, box_coder_weights, gt rows)
    "plain": ("a", 0.5, 0.4, None, slice(None)),
    "weighted": ("a", 0.6, 0.3, [10.0, 10.0, 5.0, 5.0], slice(None)),
    "empty": ("a", 0.5, 0.4, None, slice(0, 0)),
}
LOSS_PARAMS = dict(num_classes=5, focal_loss_alpha=0.25, focal_loss_gamma=1.5,
                   huber_loss_delta=0.1, box_loss_weight=50, loss_weight=1.0)
AUX_LOSSES = [0.25, 0.125]
# Detection generator (anchor config "g": levels 3-4 of a 64 x 64 image, 6 anchors a cell).
GENERATOR_ANCHOR = (3, 4, 2, [0.5, 1.0, 2.0], 4.0, [64, 64])
GENERATOR_CLASSES = 4  # class 0 is the background
GENERATOR_CASES = {
    "v1": dict(nms_version="v1", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
               nms_iou_threshold=0.5, max_num_detections=20),
    "v1_sparse": dict(nms_version="v1", pre_nms_top_k=50, pre_nms_score_threshold=0.95,
                      nms_iou_threshold=0.5, max_num_detections=20),
    "v1_soft": dict(nms_version="v1", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
                    nms_iou_threshold=0.5, max_num_detections=20, soft_nms_sigma=0.5),
    "v1_attributes": dict(nms_version="v1", pre_nms_top_k=60, pre_nms_score_threshold=0.3,
                          nms_iou_threshold=0.6, max_num_detections=30),
    "v2": dict(nms_version="v2", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
               nms_iou_threshold=0.5, max_num_detections=20),
    "v2_sparse": dict(nms_version="v2", pre_nms_top_k=50, pre_nms_score_threshold=0.95,
                      nms_iou_threshold=0.5, max_num_detections=20),
    "v2_agnostic": dict(nms_version="v2", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
                        nms_iou_threshold=0.5, max_num_detections=20,
                        use_class_agnostic_nms=True),
    "batched": dict(nms_version="batched", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
                    nms_iou_threshold=0.5, max_num_detections=20),
    "decoded_weights": dict(nms_version="v1", apply_nms=False, box_coder_weights=[10.0, 10.0,
                                                                                 5.0, 5.0]),
}
GENERATOR_IMAGE_SHAPE = [[64, 64], [48, 56]]
NMS_INPUT = dict(num_boxes=600, max_output_size=40, iou_threshold=0.45)
# Tiled NMS over four tiles whose last holds zero boxes only, as the score filter leaves them:
# image 0 has boxes in its first tile only, image 1 up to its third tile, image 2 none.
NMS_TAIL_INPUT = dict(num_boxes=1700, boxes_per_image=(300, 1100, 0), max_output_size=100,
                      iou_threshold=0.5)


def inputs():
    """The fixed NumPy inputs (seed 0); the test rebuilds them from here."""
    rng = np.random.default_rng(0)
    out = {}
    # Ground truths in config "a"'s 64 x 96 image: two identical boxes (a tie for every
    # anchor), a box equal to an anchor, a large crowd-like box, a tiny one, and padding rows
    # (a zero box and a -1 box with class -1) as a parser would pass them unfiltered.
    out["gt_boxes"] = np.array([[8, 8, 40, 40], [8, 8, 40, 40], [16, 26, 48, 38],
                                [0, 0, 64, 96], [50, 80, 53, 84], [20, 50, 60, 92],
                                [0, 0, 0, 0], [-1, -1, -1, -1]], np.float32)
    out["gt_labels"] = np.array([[1], [2], [3], [4], [1], [2], [-1], [-1]], np.int32)
    out["gt_weights"] = np.array([1, 1, 1, 0.5, 1, 2, 0, 0], np.float32)
    out["gt_attributes"] = rng.normal(size=(8, 2)).astype(np.float32)
    # Box coding: boxes and anchors in pixels; codes including dh / dw beyond the clip.
    corners = rng.uniform(0, 80, size=(50, 2, 2)).astype(np.float32)
    out["code_boxes"] = np.concatenate([corners.min(1), corners.max(1) + 1], -1)
    corners = rng.uniform(0, 80, size=(50, 2, 2)).astype(np.float32)
    out["code_anchors"] = np.concatenate([corners.min(1), corners.max(1) + 1], -1)
    codes = rng.normal(size=(50, 4)).astype(np.float32)
    codes[:5, 2:] = [[6.0, -7.0], [4.2, 4.2], [5.0, 0.0], [-3.0, 9.0], [4.1, 4.1]]
    out["codes"] = codes
    # A similarity matrix with ties within columns and rows claimed by two columns.
    sim = rng.uniform(0, 1, size=(12, 4)).astype(np.float32).round(1)
    sim[3] = sim[7] = [0.9, 0.9, 0.1, 0.2]
    sim[:, 3] = 0.05
    out["similarity"] = sim
    # Tiled NMS input: sorted scores, boxes in clusters (many overlaps), some zero boxes.
    n = NMS_INPUT["num_boxes"]
    centers = rng.uniform(10, 90, size=(2, n, 2)).round(0)
    sizes = rng.uniform(4, 20, size=(2, n, 2)).round(0)
    nms_boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], -1).astype(np.float32)
    nms_boxes[:, 5::37] = 0.0
    out["nms_boxes"] = nms_boxes
    out["nms_scores"] = -np.sort(-rng.uniform(0, 1, size=(2, n)).round(2), axis=1).astype(
        np.float32)
    # RetinaNet loss batch on config "b" (2 images): outputs and the labels TFM makes.
    min_level, max_level, num_scales, ratios, _, (height, width) = ANCHOR_CONFIGS["b"]
    per_cell = num_scales * len(ratios)
    for level in range(min_level, max_level + 1):
        h, w = -(-height // 2**level), -(-width // 2**level)
        out[f"loss_cls_{level}"] = rng.normal(size=(2, h, w, per_cell * LOSS_PARAMS[
            "num_classes"])).astype(np.float32) * 2
        out[f"loss_box_{level}"] = rng.normal(size=(2, h, w, per_cell * 4)).astype(np.float32)
        out[f"loss_att_{level}"] = rng.normal(size=(2, h, w, per_cell)).astype(np.float32)
    out["loss_gt_boxes"] = np.array([[[4, 4, 30, 40], [20, 30, 48, 68], [0, 0, 12, 9]],
                                     [[10, 2, 44, 30], [10, 2, 44, 30], [30, 40, 49, 69]]],
                                    np.float32)
    out["loss_gt_labels"] = np.array([[[1], [4], [2]], [[3], [3], [1]]], np.int32)
    out["loss_gt_attributes"] = rng.normal(size=(2, 3, 1)).astype(np.float32)
    out["focal_true"] = (rng.uniform(size=(2, 7, 5)) > 0.7).astype(np.float32)
    out["focal_pred"] = rng.normal(size=(2, 7, 5)).astype(np.float32) * 3
    # Detection generator outputs with ties: repeated logits and boxes.
    min_level, max_level, num_scales, ratios, _, (height, width) = GENERATOR_ANCHOR
    per_cell = num_scales * len(ratios)
    for level in range(min_level, max_level + 1):
        h, w = height // 2**level, width // 2**level
        boxes = rng.normal(size=(2, h, w, per_cell * 4)).astype(np.float32) * 0.3
        logits = (rng.normal(size=(2, h, w, per_cell * GENERATOR_CLASSES)) * 1.5 - 1.0)
        logits = logits.round(1).astype(np.float32)  # many equal scores
        boxes[:, 1, 1] = boxes[:, 1, 2]  # identical boxes in neighbouring cells...
        logits[:, 1, 1] = logits[:, 1, 2]  # ...with identical scores
        logits[:, 0, :, 1::GENERATOR_CLASSES] = logits[:, 0, :, 2::GENERATOR_CLASSES]
        out[f"gen_boxes_{level}"] = boxes
        out[f"gen_scores_{level}"] = logits
        out[f"gen_att_{level}"] = rng.normal(size=(2, h, w, per_cell * 2)).astype(np.float32)
    # Its own generator, so that the arrays above stay as they were.
    tail_rng = np.random.default_rng(1)
    n = NMS_TAIL_INPUT["num_boxes"]
    centers = tail_rng.uniform(20, 80, size=(3, n, 2)).round(0)
    sizes = tail_rng.uniform(10, 30, size=(3, n, 2)).round(0)
    tail_boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], -1)
    tail_scores = -np.sort(-tail_rng.uniform(0, 1, size=(3, n)).round(2), axis=1)
    for image, count in enumerate(NMS_TAIL_INPUT["boxes_per_image"]):
        tail_boxes[image, count:] = 0.0
        tail_scores[image, count:] = -1.0
    out["nms_tail_boxes"] = tail_boxes.astype(np.float32)
    out["nms_tail_scores"] = tail_scores.astype(np.float32)
    return out


def main():
    # Imported here: the test imports inputs() without TensorFlow's tf_keras.
    import tensorflow as tf
    import tf_keras
    from official.core import exp_factory
    from official.vision.configs import retinanet as retinanet_cfg
    from official.vision.losses import focal_loss
    from official.vision.modeling.layers import detection_generator
    from official.vision.ops import anchor, anchor_generator, box_matcher, box_ops, nms
    from official.vision.ops import iou_similarity
    from official.vision.tasks import retinanet as retinanet_task

    data = inputs()
    ref = {}

    def anchors_of(name):
        min_level, max_level, num_scales, ratios, size, image = ANCHOR_CONFIGS[name]
        return anchor.Anchor(min_level, max_level, num_scales, ratios, size, image)

    for name in ANCHOR_CONFIGS:
        for level, boxes in anchors_of(name).multilevel_boxes.items():
            ref[f"anchors_{name}_{level}"] = boxes.numpy()
    sizes, scales, ratios, strides, clip, image = STRIDE_GENERATOR
    generated = anchor_generator.AnchorGeneratorv1(sizes, scales, ratios, strides, clip)(image)
    for i, boxes in enumerate(generated):
        ref[f"stride_anchors_{i}"] = boxes.numpy()

    for case, (config, match, unmatched, weights, rows) in LABELER_CASES.items():
        labeler = anchor.AnchorLabeler(match, unmatched, box_coder_weights=weights)
        kwargs = {}
        if case == "weighted":
            kwargs = dict(gt_weights=tf.constant(data["gt_weights"][rows]),
                          gt_attributes={"att": tf.constant(data["gt_attributes"][rows])})
        cls_t, box_t, att_t, cls_w, box_w = labeler.label_anchors(
            anchors_of(config).multilevel_boxes, tf.constant(data["gt_boxes"][rows]),
            tf.constant(data["gt_labels"][rows]), **kwargs)
        for level in cls_t:
            ref[f"label_{case}_cls_{level}"] = cls_t[level].numpy()
            ref[f"label_{case}_box_{level}"] = box_t[level].numpy()
            for att_name, per_level in att_t.items():
                ref[f"label_{case}_{att_name}_{level}"] = per_level[level].numpy()
        ref[f"label_{case}_cls_weights"] = cls_w.numpy()
        ref[f"label_{case}_box_weights"] = box_w.numpy()

    boxes, anchors_t = tf.constant(data["code_boxes"]), tf.constant(data["code_anchors"])
    for suffix, weights in (("", None), ("_weighted", [10.0, 10.0, 5.0, 5.0])):
        ref["encoded" + suffix] = box_ops.encode_boxes(boxes, anchors_t, weights).numpy()
        ref["decoded" + suffix] = box_ops.decode_boxes(tf.constant(data["codes"]), anchors_t,
                                                       weights).numpy()
    ref["iou"] = iou_similarity.IouSimilarity()(boxes, anchors_t).numpy()
    ref["bbox_overlap"] = box_ops.bbox_overlap(boxes[None], tf.concat(
        [anchors_t[None, :10], -tf.ones([1, 2, 4])], axis=1)).numpy()
    matcher = box_matcher.BoxMatcher([0.4, 0.5], [-1, -2, 1], force_match_for_each_col=True)
    matched, indicators = matcher(tf.constant(data["similarity"]))
    ref["matcher_columns"], ref["matcher_indicators"] = matched.numpy(), indicators.numpy()

    nms_scores, nms_boxes = nms.sorted_non_max_suppression_padded(
        tf.constant(data["nms_scores"]), tf.constant(data["nms_boxes"]),
        NMS_INPUT["max_output_size"], NMS_INPUT["iou_threshold"])
    ref["nms_scores"], ref["nms_boxes"] = nms_scores.numpy(), nms_boxes.numpy()
    nms_scores, nms_boxes = nms.sorted_non_max_suppression_padded(
        tf.constant(data["nms_tail_scores"]), tf.constant(data["nms_tail_boxes"]),
        NMS_TAIL_INPUT["max_output_size"], NMS_TAIL_INPUT["iou_threshold"])
    ref["nms_tail_scores"], ref["nms_tail_boxes"] = nms_scores.numpy(), nms_boxes.numpy()

    # RetinaNet losses through TFM's task, labels from TFM's labeler (stored for the test).
    labeler = anchor.AnchorLabeler(0.5, 0.4)
    labels = {"cls_targets": {}, "box_targets": {}, "attribute_targets": {"depth": {}}}
    per_image = []
    for i in range(2):
        per_image.append(labeler.label_anchors(
            anchors_of("b").multilevel_boxes, tf.constant(data["loss_gt_boxes"][i]),
            tf.constant(data["loss_gt_labels"][i]),
            gt_attributes={"depth": tf.constant(data["loss_gt_attributes"][i])}))
    min_level, max_level = ANCHOR_CONFIGS["b"][:2]
    outputs = {"cls_outputs": {}, "box_outputs": {}, "attribute_outputs": {"depth": {}}}
    for level in map(str, range(min_level, max_level + 1)):
        labels["cls_targets"][level] = tf.stack([p[0][level] for p in per_image])
        labels["box_targets"][level] = tf.stack([p[1][level] for p in per_image])
        labels["attribute_targets"]["depth"][level] = tf.stack([p[2]["depth"][level]
                                                                for p in per_image])
        outputs["cls_outputs"][level] = tf.constant(data[f"loss_cls_{level}"])
        outputs["box_outputs"][level] = tf.constant(data[f"loss_box_{level}"])
        outputs["attribute_outputs"]["depth"][level] = tf.constant(data[f"loss_att_{level}"])
        for key in ("cls_targets", "box_targets"):
            ref[f"loss_label_{key}_{level}"] = labels[key][level].numpy()
        ref[f"loss_label_depth_{level}"] = labels["attribute_targets"]["depth"][level].numpy()
    labels["cls_weights"] = tf.stack([p[3] for p in per_image])
    labels["box_weights"] = tf.stack([p[4] for p in per_image])
    ref["loss_label_cls_weights"] = labels["cls_weights"].numpy()
    ref["loss_label_box_weights"] = labels["box_weights"].numpy()
    for with_attributes in (False, True):
        config = exp_factory.get_exp_config("retinanet").task
        config.model.num_classes = LOSS_PARAMS["num_classes"]
        for key in ("focal_loss_alpha", "focal_loss_gamma", "huber_loss_delta",
                    "box_loss_weight", "loss_weight"):
            setattr(config.losses, key, LOSS_PARAMS[key])
        if with_attributes:
            config.model.head.attribute_heads = [
                retinanet_cfg.AttributeHead(name="depth", type="regression", size=1)]
        task = retinanet_task.RetinaNetTask(config)
        total, cls_loss, box_loss, model_loss = task.build_losses(
            outputs, labels, aux_losses=[tf.constant(v) for v in AUX_LOSSES])
        suffix = "_attributes" if with_attributes else ""
        for key, value in (("total_loss", total), ("cls_loss", cls_loss),
                           ("box_loss", box_loss), ("model_loss", model_loss)):
            ref[f"loss{suffix}_{key}"] = value.numpy()
    focal = focal_loss.FocalLoss(0.25, 1.5, reduction=tf_keras.losses.Reduction.SUM)
    ref["focal_sum"] = focal(data["focal_true"], data["focal_pred"]).numpy()
    ref["focal_sum_weighted"] = focal(data["focal_true"], data["focal_pred"],
                                      sample_weight=np.arange(14.0).reshape(2, 7) / 7).numpy()

    min_level, max_level, num_scales, ratios, size, image = GENERATOR_ANCHOR
    gen_anchors = anchor.Anchor(min_level, max_level, num_scales, ratios, size,
                                image).multilevel_boxes
    levels = list(map(str, range(min_level, max_level + 1)))
    raw_boxes = {lv: tf.constant(data[f"gen_boxes_{lv}"]) for lv in levels}
    raw_scores = {lv: tf.constant(data[f"gen_scores_{lv}"]) for lv in levels}
    raw_attributes = {"att": {lv: tf.constant(data[f"gen_att_{lv}"]) for lv in levels}}
    batched_anchors = {lv: tf.tile(gen_anchors[lv][None], [2, 1, 1, 1]) for lv in levels}
    image_shape = tf.constant(GENERATOR_IMAGE_SHAPE, tf.float32)
    for case, kwargs in GENERATOR_CASES.items():
        layer = detection_generator.MultilevelDetectionGenerator(return_decoded=True, **kwargs)
        result = layer(raw_boxes, raw_scores, batched_anchors, image_shape,
                       raw_attributes=raw_attributes if case == "v1_attributes" else None)
        for key, value in result.items():
            if isinstance(value, dict):
                for name, tensor in value.items():
                    ref[f"gen_{case}_{key}_{name}"] = tensor.numpy()
            elif value is not None:
                ref[f"gen_{case}_{key}"] = value.numpy()

    ref["versions"] = np.array([f"tensorflow {tf.__version__}", f"tf_keras {tf_keras.__version__}"])
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "tfm_detection_ops_reference.npz")
    np.savez_compressed(path, **ref)
    print("wrote", path, len(ref), "arrays")


if __name__ == "__main__":
    main()
