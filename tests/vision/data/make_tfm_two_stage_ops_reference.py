"""Writes tfm_two_stage_ops_reference.npz: TFM 2.20's two-stage detection layers on fixed
inputs (ROI generator, ROI sampler, ROI aligner / multilevel crop-and-resize, mask sampler /
crop-mask-in-target-box, the two-stage detection generator). Run in TFM's venv:

    /work/tfm_venv/bin/python tests/vision/data/make_tfm_two_stage_ops_reference.py

`inputs()` and the case tables use NumPy only: the test imports them to rebuild the inputs.

The ROI sampler draws a random permutation per image (`tf.random.shuffle` in TFM's static
sampler). The `*_permuted` cases replace it by the fixed permutations of `inputs()` (in the
order TFM asks for them: image 0, then image 1), so the sampled ROIs are exact; the
`all_fit` case keeps TFM's own randomness on inputs where every candidate fits in the sample,
so no draw can change the result.
"""

import os

import numpy as np

BATCH = 2
# ROI generator: anchors (min_level, max_level, num_scales, aspect_ratios, anchor_size, image).
RPN_ANCHOR = (2, 4, 1, [0.5, 1.0, 2.0], 3.0, [64, 64])
IMAGE_SHAPE = [[64, 64], [48, 56]]
ROI_GENERATOR_CASES = {
    # name: (layer kwargs, training)
    "train": (dict(pre_nms_top_k=150, pre_nms_score_threshold=0.97,
                   pre_nms_min_size_threshold=2.0, nms_iou_threshold=0.7, num_proposals=60),
              True),
    "test": (dict(test_pre_nms_top_k=80, test_pre_nms_score_threshold=0.0,
                  test_pre_nms_min_size_threshold=0.0, test_nms_iou_threshold=0.5,
                  test_num_proposals=40), False),
    "batched": (dict(test_pre_nms_top_k=80, test_nms_iou_threshold=0.6, test_num_proposals=50,
                     test_pre_nms_score_threshold=0.1, use_batched_nms=True), False),
    "no_nms": (dict(test_pre_nms_top_k=80, test_nms_iou_threshold=0.0, test_num_proposals=30),
               False),
}
NUM_PROPOSALS = 40  # ROI sampler input: proposals per image (plus 6 ground-truth rows)
ROI_SAMPLER_CASES = {
    "default_permuted": dict(mix_gt_boxes=True, num_sampled_rois=16, foreground_fraction=0.25,
                             foreground_iou_threshold=0.5, background_iou_high_threshold=0.5,
                             background_iou_low_threshold=0.0),
    "band_outer_permuted": dict(mix_gt_boxes=True, num_sampled_rois=24,
                                foreground_fraction=0.5, foreground_iou_threshold=0.6,
                                background_iou_high_threshold=0.4,
                                background_iou_low_threshold=0.1),
    "all_fit": dict(mix_gt_boxes=True, num_sampled_rois=46, foreground_fraction=0.5,
                    foreground_iou_threshold=0.5, background_iou_high_threshold=0.5,
                    background_iou_low_threshold=0.0),
    "cascade": dict(mix_gt_boxes=False, num_sampled_rois=16, foreground_iou_threshold=0.6,
                    background_iou_high_threshold=0.6, background_iou_low_threshold=0.0,
                    skip_subsampling=True),
}
# ROI aligner on levels 2-5 of a 256 x 256 image (boxes of every level, and off the map).
ALIGNER_LEVELS = (2, 5)
ALIGNER_IMAGE = 256
ALIGNER_CASES = {"crop7": (7, 0.5), "crop4_offset0": (4, 0.0)}
MASK_SAMPLER = dict(mask_target_size=8, num_sampled_masks=6)
CROP_MASK = dict(output_size=5, sample_offset=0.0)  # rectangular masks, TFM's default offset
GENERATOR_CLASSES = 5  # class 0 is the background
GENERATOR_CASES = {
    # name: (layer kwargs, call kwargs)
    "v2": (dict(nms_version="v2", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
                nms_iou_threshold=0.5, max_num_detections=20), {}),
    "v1": (dict(nms_version="v1", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
                nms_iou_threshold=0.5, max_num_detections=20), {}),
    "v1_soft": (dict(nms_version="v1", pre_nms_top_k=100, pre_nms_score_threshold=0.05,
                     nms_iou_threshold=0.5, max_num_detections=20, soft_nms_sigma=0.5), {}),
    "batched": (dict(nms_version="batched", pre_nms_score_threshold=0.05,
                     nms_iou_threshold=0.5, max_num_detections=20), {}),
    "sigmoid": (dict(nms_version="v2", pre_nms_top_k=50, pre_nms_score_threshold=0.9,
                     nms_iou_threshold=0.6, max_num_detections=15,
                     use_sigmoid_probability=True), {}),
    "agnostic_cascade": (dict(nms_version="v2", pre_nms_top_k=100,
                              pre_nms_score_threshold=0.05, nms_iou_threshold=0.5,
                              max_num_detections=20),
                         dict(regression_weights=[20.0, 20.0, 10.0, 10.0],
                              bbox_per_class=False)),
    "decoded": (dict(apply_nms=False), dict(regression_weights=[10.0, 10.0, 5.0, 5.0])),
    "decoded_agnostic": (dict(apply_nms=False), dict(bbox_per_class=False)),
}


def _boxes(rng, count, low, high, min_side, max_side):
    """[count, 4] yxyx boxes centred in [low, high] with sides in [min_side, max_side]."""
    size = rng.uniform(min_side, max_side, size=(count, 2))
    start = rng.uniform(low, high, size=(count, 2)) - size / 2
    return np.concatenate([start, start + size], -1).astype(np.float32)


def inputs():
    """The fixed NumPy inputs (seed 0); the test rebuilds them from here."""
    rng = np.random.default_rng(0)
    out = {}
    # RPN outputs: rounded logits (score ties), duplicated cells (box and score ties).
    min_level, max_level, num_scales, ratios, _, (height, width) = RPN_ANCHOR
    per_cell = num_scales * len(ratios)
    for level in range(min_level, max_level + 1):
        h, w = height // 2**level, width // 2**level
        boxes = (rng.normal(size=(BATCH, h, w, per_cell * 4)) * 0.3).astype(np.float32)
        logits = (rng.normal(size=(BATCH, h, w, per_cell)) * 2.0).round(1).astype(np.float32)
        boxes[:, 1, 1] = boxes[:, 1, 2]
        logits[:, 1, 1] = logits[:, 1, 2]
        out[f"rpn_boxes_{level}"] = boxes
        out[f"rpn_scores_{level}"] = logits

    # ROI sampler: ground truths padded with -1 rows (image 1 has 4), proposals around them
    # (exact copies, jittered copies), random boxes, and empty boxes as the generator pads.
    gt = np.full((BATCH, 6, 4), -1.0, np.float32)
    gt[0] = [[4, 4, 30, 30], [20, 30, 60, 62], [40, 2, 60, 20], [10, 40, 24, 54],
             [4, 4, 30, 30], [30, 30, 50, 50]]
    gt[1, :4] = [[8, 8, 40, 24], [2, 30, 20, 54], [24, 24, 46, 52], [30, 4, 46, 20]]
    out["gt_boxes"] = gt
    out["gt_outer_boxes"] = np.where(gt >= 0, gt + np.array([-2, -2, 2, 2], np.float32), -1.0)
    out["gt_classes"] = np.array([[1, 3, 2, 4, 2, 1], [2, 2, 4, 1, -1, -1]], np.int32)
    proposals = np.zeros((BATCH, NUM_PROPOSALS, 4), np.float32)
    for b, valid in enumerate((6, 4)):
        jitter = rng.uniform(-4, 4, size=(valid * 3, 4)).round(0).astype(np.float32)
        near = np.tile(gt[b, :valid], (3, 1)) + jitter
        near[:, 2:] = np.maximum(near[:, 2:], near[:, :2] + 2)
        count = len(near)
        proposals[b, :2] = gt[b, :2]
        proposals[b, 2:2 + count] = near
        proposals[b, 2 + count:NUM_PROPOSALS - 3] = _boxes(
            rng, NUM_PROPOSALS - 5 - count, 0, 64, 4, 30).round(0)
    out["proposals"] = proposals
    total = NUM_PROPOSALS + gt.shape[1]
    for case in ROI_SAMPLER_CASES:
        if case.endswith("_permuted"):
            out[f"permutation_{case}"] = np.stack(
                [rng.permutation(total) for _ in range(BATCH)]).astype(np.int32)

    # ROI aligner: features of levels 2-5, boxes of all sizes (one empty, some off the map).
    low, high = ALIGNER_LEVELS
    for level in range(low, high + 1):
        side = ALIGNER_IMAGE // 2**level
        out[f"features_{level}"] = rng.normal(size=(BATCH, side, side, 3)).astype(np.float32)
    align_boxes = np.stack([np.concatenate([
        _boxes(rng, 3, 20, 236, 3, 20), _boxes(rng, 2, 20, 236, 120, 200),
        _boxes(rng, 2, 60, 200, 230, 400), _boxes(rng, 2, 60, 200, 460, 600),
        np.array([[10, 10, 10, 30], [-20, -30, 40, 50], [240, 250, 300, 320]], np.float32),
    ]) for _ in range(BATCH)])
    out["align_boxes"] = align_boxes

    # Mask sampler: the sampler's outputs for 12 candidates (image 1 has 3 foreground ones).
    out["mask_gt_boxes"] = np.stack([_boxes(rng, 12, 8, 56, 6, 30) for _ in range(BATCH)])
    out["mask_rois"] = out["mask_gt_boxes"] + rng.uniform(-5, 5, size=(BATCH, 12, 4)).astype(
        np.float32)
    out["mask_gt_classes"] = np.array([[1, 0, 3, 2, 2, 0, 4, 1, 0, 3, 1, 2],
                                       [0, 0, 2, 0, 0, 1, 0, 0, 0, 3, 0, 0]], np.int32)
    indices = rng.integers(0, 5, size=(BATCH, 12)).astype(np.int32)
    out["mask_gt_indices"] = np.where(out["mask_gt_classes"] > 0, indices, -1).astype(np.int32)
    out["gt_masks"] = (rng.uniform(size=(BATCH, 5, 14, 14)) > 0.5).astype(np.float32)
    out["crop_masks"] = rng.uniform(size=(1, 3, 10, 16)).astype(np.float32)
    out["crop_boxes"] = np.array([[[5, 5, 25, 45], [0, 0, 30, 20], [12, 8, 20, 40]]], np.float32)
    out["crop_targets"] = np.array([[[3, 8, 28, 40], [2, 2, 12, 30], [10, 0, 30, 50]]],
                                   np.float32)

    # Two-stage detection generator: 30 ROIs, per-class boxes, rounded logits with ties.
    num_rois = 30
    out["gen_rois"] = np.stack([_boxes(rng, num_rois, 4, 60, 6, 30) for _ in range(BATCH)])
    boxes = (rng.normal(size=(BATCH, num_rois, GENERATOR_CLASSES * 4)) * 0.2).astype(np.float32)
    boxes[:, :3, :8] *= 15  # decoded far off the image: clipped, and dh / dw past the clip
    logits = (rng.normal(size=(BATCH, num_rois, GENERATOR_CLASSES)) * 2).round(1)
    boxes[:, 7], logits[:, 7] = boxes[:, 6], logits[:, 6]  # identical detections
    logits[:, :, 2] = np.where(rng.uniform(size=(BATCH, num_rois)) > 0.7, logits[:, :, 3],
                               logits[:, :, 2])  # equal scores across classes
    out["gen_boxes"] = boxes
    out["gen_agnostic_boxes"] = boxes[:, :, 4:8].copy()
    out["gen_scores"] = logits.astype(np.float32)
    return out


def main():
    # Imported here: the test imports inputs() without TensorFlow's tf_keras.
    import tensorflow as tf
    import tf_keras
    from official.vision.modeling.layers import detection_generator
    from official.vision.modeling.layers import mask_sampler
    from official.vision.modeling.layers import roi_aligner
    from official.vision.modeling.layers import roi_generator
    from official.vision.modeling.layers import roi_sampler
    from official.vision.ops import anchor
    from official.vision.ops import spatial_transform_ops

    data = inputs()
    ref = {}
    min_level, max_level, num_scales, ratios, size, image = RPN_ANCHOR
    levels = [str(level) for level in range(min_level, max_level + 1)]
    anchors = anchor.Anchor(min_level, max_level, num_scales, ratios, size, image)
    anchors = {lv: tf.tile(anchors.multilevel_boxes[lv][None], [BATCH, 1, 1, 1]) for lv in levels}
    raw_boxes = {lv: tf.constant(data[f"rpn_boxes_{lv}"]) for lv in levels}
    raw_scores = {lv: tf.constant(data[f"rpn_scores_{lv}"]) for lv in levels}
    image_shape = tf.constant(IMAGE_SHAPE, tf.float32)
    for case, (kwargs, training) in ROI_GENERATOR_CASES.items():
        layer = roi_generator.MultilevelROIGenerator(**kwargs)
        rois, scores = layer(raw_boxes, raw_scores, anchors, image_shape, training=training)
        ref[f"roi_generator_{case}_boxes"] = rois.numpy()
        ref[f"roi_generator_{case}_scores"] = scores.numpy()

    real_shuffle = tf.random.shuffle
    for case, kwargs in ROI_SAMPLER_CASES.items():
        queue = list(data.get(f"permutation_{case}", []))
        if queue:  # TFM's static sampler shuffles tf.range(N) once per image, in order
            tf.random.shuffle = lambda value, seed=None, name=None: tf.constant(queue.pop(0))
        layer = roi_sampler.ROISampler(**kwargs)
        outer = case.startswith("band_outer")
        args = [tf.constant(data["proposals"]), tf.constant(data["gt_boxes"]),
                tf.constant(data["gt_classes"])]
        if outer:
            args.append(tf.constant(data["gt_outer_boxes"]))
        result = layer(*args)
        tf.random.shuffle = real_shuffle
        assert not queue, case
        names = ["rois", "gt_boxes"] + (["gt_outer_boxes"] if outer else []) + ["gt_classes",
                                                                              "gt_indices"]
        for name, value in zip(names, result):
            ref[f"roi_sampler_{case}_{name}"] = value.numpy()

    low, high = ALIGNER_LEVELS
    features = {str(lv): tf.constant(data[f"features_{lv}"]) for lv in range(low, high + 1)}
    for case, (crop_size, offset) in ALIGNER_CASES.items():
        layer = roi_aligner.MultilevelROIAligner(crop_size=crop_size, sample_offset=offset)
        ref[f"aligner_{case}"] = layer(features, tf.constant(data["align_boxes"])).numpy()
    ref["crop_and_resize_3_levels"] = spatial_transform_ops.multilevel_crop_and_resize(
        {str(lv): features[str(lv)] for lv in range(low, high)},
        tf.constant(data["align_boxes"]), output_size=5, sample_offset=0.25).numpy()

    layer = mask_sampler.MaskSampler(**MASK_SAMPLER)
    result = layer(*(tf.constant(data[key]) for key in (
        "mask_rois", "mask_gt_boxes", "mask_gt_classes", "mask_gt_indices", "gt_masks")))
    for name, value in zip(("rois", "classes", "masks"), result):
        ref[f"mask_sampler_{name}"] = value.numpy()
    ref["crop_mask"] = spatial_transform_ops.crop_mask_in_target_box(
        tf.constant(data["crop_masks"]), tf.constant(data["crop_boxes"]),
        tf.constant(data["crop_targets"]), **CROP_MASK).numpy()

    for case, (kwargs, call_kwargs) in GENERATOR_CASES.items():
        layer = detection_generator.DetectionGenerator(**kwargs)
        agnostic = call_kwargs.get("bbox_per_class") is False
        result = layer(tf.constant(data["gen_agnostic_boxes" if agnostic else "gen_boxes"]),
                       tf.constant(data["gen_scores"]), tf.constant(data["gen_rois"]),
                       image_shape, **call_kwargs)
        for key, value in result.items():
            ref[f"generator_{case}.{key}"] = value.numpy()

    ref["versions"] = np.array([f"tensorflow {tf.__version__}", f"tf_keras {tf_keras.__version__}"])
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "tfm_two_stage_ops_reference.npz")
    np.savez_compressed(path, **ref)
    print("wrote", path, len(ref), "arrays", os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
