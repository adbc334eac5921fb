"""lite's focal loss against TFM's, forward + backward, at a RetinaNet training step's size.

RetinaNet's classification loss runs over every anchor and class: for the 256x256, batch-2
`step_vs_tfm.py` rows (levels 3-7, 9 anchors a cell, 91 classes) 2 x 12,276 x 91 elements. In
TFM's venv (both libraries in one process) each side's element-wise loss (`FocalLoss.call`:
TFM's `official.vision.losses.focal_loss`, lite's `vision/losses/focal_loss`) is weighted per
anchor, summed and differentiated with respect to the logits in one tf.function, on the same
inputs; then the two are called in alternating rounds (`rounds.py`). Writes a results file
(ms per call of each side per round, both losses, the largest gradient difference, the
machine) and prints its summary.

    .tfm_venv/bin/python benchmarks/focal_loss_ab.py --rounds 10
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

SHAPE = (2, 12276, 91)  # batch, anchors of levels 3-7 at 256x256 (9 a cell), COCO's classes
ALPHA, GAMMA = 0.25, 1.5  # TFM's RetinaNet `Losses` defaults


def _step(elementwise, targets, weights):
    import tensorflow as tf

    @tf.function
    def step(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            y_true = tf.one_hot(targets, SHAPE[-1])
            loss = tf.reduce_sum(elementwise(y_true, logits) * weights[..., None])
        return loss, tape.gradient(loss, logits)

    return step


def measure_ab(rounds, calls_per_round):
    import numpy as np
    import tensorflow as tf
    from official.vision.losses import focal_loss as tfm_focal_loss

    from lite_launcher.vision.losses import focal_loss

    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(size=SHAPE).astype(np.float32) * 3.0)
    targets = tf.constant(rng.integers(-1, SHAPE[-1], size=SHAPE[:2]).astype(np.int32))
    weights = tf.constant(rng.uniform(size=SHAPE[:2]).astype(np.float32))
    steps = {"lite": _step(focal_loss.FocalLoss(ALPHA, GAMMA).call, targets, weights),
             "tfm": _step(tfm_focal_loss.FocalLoss(ALPHA, GAMMA).call, targets, weights)}
    values = {side: step(logits) for side, step in steps.items()}  # traced, run once
    calls = {side: {"loss_and_gradient": (
        lambda step=step: [step(logits) for _ in range(calls_per_round)][-1])}
        for side, step in steps.items()}
    per_round = rounds_lib.alternate_calls(calls, ("lite", "tfm"), rounds,
                                           {"loss_and_gradient": calls_per_round},
                                           label="focal loss")
    ratios = [r["ms_per_step"]["tfm"]["loss_and_gradient"]
              / r["ms_per_step"]["lite"]["loss_and_gradient"] for r in per_round]
    return {"row": "focal_loss_ab", "shape": list(SHAPE), "alpha": ALPHA, "gamma": GAMMA,
            "calls_per_round": calls_per_round, "rounds": per_round,
            "tfm_over_lite_ms": rounds_lib.spread(ratios),
            "loss": {side: float(v[0]) for side, v in values.items()},
            "max_abs_gradient_difference": float(
                tf.reduce_max(tf.abs(values["lite"][1] - values["tfm"][1]))),
            "max_abs_gradient": float(tf.reduce_max(tf.abs(values["tfm"][1]))),
            "versions": {"lite": vision_rows._versions("lite"),
                         "tfm": vision_rows._versions("tfm")},
            **vision_rows.machine_state()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10, help="calls per side per round")
    parser.add_argument("--out", default=None, help="results JSON (default benchmarks/results/"
                        "<UTC date>-<commit>-focal-loss-ab.json)")
    args = parser.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    record = measure_ab(args.rounds, args.calls)
    out = rounds_lib.write_results("focal_loss_ab", "focal-loss-ab", [record], started, args.out)
    print(json.dumps({"file": out, "tfm_over_lite_ms": record["tfm_over_lite_ms"],
                      "loss": record["loss"],
                      "max_abs_gradient_difference": record["max_abs_gradient_difference"]}))


if __name__ == "__main__":
    main()
