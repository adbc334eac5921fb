"""lite's RetinaNet detection generator (decoding + NMS) against TFM's, at the eval rows' size.

The `step_vs_tfm.py` RetinaNet eval rows (256x256, batch 2, levels 3-7, 9 anchors a cell, 91
classes: 2 x 12,276 x 91 scores) decode every anchor's box and run `nms_version: v2`, the
tiled, padded NMS of TFM's `ops/nms.py`, once per (image, class) over the class's top 5,000
anchors. How long that takes depends on how many scores pass `pre_nms_score_threshold`
(0.05): an initialised model's sigmoids sit near the focal-loss prior 0.01 and none passes,
a trained model passes a few per class. So each regime is its own row: the share of
(anchor, class) scores above the threshold is set (`--above`), the rest stay near the prior.

In TFM's venv (both libraries in one process) each side's `MultilevelDetectionGenerator`
runs in a tf.function on the same inputs, the two called in alternating rounds
(`rounds.py`); the record holds ms per call of each side per round, whether the two sides'
detections are equal (boxes, scores, classes, counts), and the machine.

    .tfm_venv/bin/python benchmarks/nms_ab.py --rounds 8 --above 0 0.001 0.01
"""

import argparse
import datetime
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(1, os.path.dirname(_HERE))

import rounds as rounds_lib  # noqa: E402
import vision_rows  # noqa: E402

IMAGE_SIZE = 256
BATCH = 2
LEVELS = (3, 4, 5, 6, 7)
NUM_SCALES, ASPECT_RATIOS, ANCHOR_SIZE = 3, (0.5, 1.0, 2.0), 4.0
NUM_CLASSES = 91  # class 0 is the background, dropped by both generators
# TFM's RetinaNet `DetectionGenerator` defaults, as the eval rows run them.
GENERATOR = dict(apply_nms=True, pre_nms_top_k=5000, pre_nms_score_threshold=0.05,
                 nms_iou_threshold=0.5, max_num_detections=100, nms_version="v2")
PRIOR_LOGIT = -4.595  # log(0.01 / 0.99): the classification bias RetinaNet initialises with


def generator_inputs(above, seed=0):
    """Raw head outputs, anchors and image shapes (NumPy) at the rows' size, with the share
    `above` of the (anchor, foreground class) scores above the score threshold."""
    import numpy as np

    from lite_launcher.vision.ops import anchor

    rng = np.random.default_rng(seed)
    anchors = anchor.Anchor(LEVELS[0], LEVELS[-1], NUM_SCALES, list(ASPECT_RATIOS),
                            ANCHOR_SIZE, (IMAGE_SIZE, IMAGE_SIZE)).multilevel_boxes
    per_cell = NUM_SCALES * len(ASPECT_RATIOS)
    raw_boxes, raw_scores, anchor_boxes = {}, {}, {}
    for level in LEVELS:
        cells = IMAGE_SIZE // 2**level
        shape = (BATCH, cells, cells, per_cell)
        raw_boxes[str(level)] = (rng.normal(size=shape + (4,)) * 0.2).astype(
            np.float32).reshape(BATCH, cells, cells, per_cell * 4)
        logits = PRIOR_LOGIT + rng.normal(size=shape + (NUM_CLASSES,)) * 0.3
        lifted = rng.uniform(size=logits.shape) < above
        lifted[..., 0] = False  # the background column is dropped anyway
        logits[lifted] = rng.uniform(-2.9, 4.0, size=int(lifted.sum()))  # sigmoid > 0.052
        raw_scores[str(level)] = logits.astype(np.float32).reshape(
            BATCH, cells, cells, per_cell * NUM_CLASSES)
        anchor_boxes[str(level)] = np.tile(np.asarray(anchors[str(level)])[None],
                                           [BATCH, 1, 1, 1])
    image_shape = np.full((BATCH, 2), IMAGE_SIZE, np.float32)
    return raw_boxes, raw_scores, anchor_boxes, image_shape


def _generator_fn(layer):
    import tensorflow as tf

    @tf.function(jit_compile=False)
    def run(raw_boxes, raw_scores, anchor_boxes, image_shape):
        out = layer(raw_boxes, raw_scores, anchor_boxes, image_shape)
        return {key: out[key] for key in ("detection_boxes", "detection_scores",
                                          "detection_classes", "num_detections")}

    return run


def measure_ab(above, rounds, calls_per_round):
    """One regime: both generators traced on the same inputs, outputs compared, then timed
    in alternating rounds."""
    import numpy as np
    import tensorflow as tf
    from official.vision.modeling.layers import detection_generator as tfm_generator

    from lite_launcher.vision.modeling.layers import detection_generator

    arrays = generator_inputs(above)
    inputs = tf.nest.map_structure(tf.constant, arrays)
    runs = {"lite": _generator_fn(detection_generator.MultilevelDetectionGenerator(**GENERATOR)),
            "tfm": _generator_fn(tfm_generator.MultilevelDetectionGenerator(**GENERATOR))}
    outputs = {side: {k: v.numpy() for k, v in run(*inputs).items()}
               for side, run in runs.items()}
    lite, tfm = outputs["lite"], outputs["tfm"]
    equal = {key: bool(np.array_equal(lite[key], tfm[key])) for key in lite}
    calls = {side: {"generator": (lambda run=run: [run(*inputs) for _ in range(
        calls_per_round)][-1]["num_detections"].numpy())} for side, run in runs.items()}
    per_round = rounds_lib.alternate_calls(calls, ("lite", "tfm"), rounds,
                                           {"generator": calls_per_round},
                                           label=f"generator above={above}")
    ratios = [r["ms_per_step"]["tfm"]["generator"] / r["ms_per_step"]["lite"]["generator"]
              for r in per_round]
    scores = 1.0 / (1.0 + np.exp(-np.concatenate(
        [s.reshape(BATCH, -1, NUM_CLASSES)[..., 1:] for s in arrays[1].values()], 1)))
    return {"row": "nms_ab", "above": above, "calls_per_round": calls_per_round,
            "scores_above_threshold_per_image": float(
                (scores > GENERATOR["pre_nms_score_threshold"]).sum() / BATCH),
            "num_detections": tfm["num_detections"].tolist(),
            "outputs_equal": equal,
            "max_abs_score_difference": float(np.max(np.abs(
                lite["detection_scores"] - tfm["detection_scores"]))),
            "rounds": per_round, "tfm_over_lite_ms": rounds_lib.spread(ratios),
            "generator": GENERATOR, "shape": [BATCH, int(scores.shape[1]), NUM_CLASSES],
            "versions": {"lite": vision_rows._versions("lite"),
                         "tfm": vision_rows._versions("tfm")},
            **vision_rows.machine_state()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=3, help="calls per side per round")
    parser.add_argument("--above", type=float, nargs="+", default=[0.0, 0.001, 0.01],
                        help="shares of (anchor, class) scores above the threshold, a row each")
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/"
                        "<UTC date>-<commit>-nms-ab.json)")
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    records = [measure_ab(above, args.rounds, args.calls) for above in args.above]
    out = rounds_lib.write_results("nms_ab", "nms-ab", records, started, args.out)
    print(json.dumps({"file": out, "rows": [
        {"above": r["above"], "tfm_over_lite_ms": r["tfm_over_lite_ms"],
         "outputs_equal": r["outputs_equal"]} for r in records]}))


if __name__ == "__main__":
    main()
