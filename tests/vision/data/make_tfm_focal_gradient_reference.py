"""Writes tfm_focal_gradient_reference.npz: TFM 2.20's focal loss (`official.vision.losses.
focal_loss.FocalLoss`, reduction SUM) and its gradient with respect to the logits, by
TensorFlow's autodiff, for several gammas. Run in TFM's venv (`bash benchmarks/setup_tfm_env.sh`):

    .tfm_venv/bin/python tests/vision/data/make_tfm_focal_gradient_reference.py

`inputs()` and GAMMAS use NumPy only: tests/vision/test_focal_loss.py imports them to rebuild
the inputs.
"""

import os

import numpy as np

ALPHA = 0.25
GAMMAS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5)


def inputs():
    """Logits [3, 40, 6] (row 0: saturated sigmoids at |x| up to 30), 0/1 targets, and a
    per-element weight (a non-uniform upstream gradient)."""
    rng = np.random.default_rng(11)
    logits = (rng.normal(size=(3, 40, 6)) * 4.0).astype(np.float32)
    logits[0, :6, :] = [[-30.0, -17.0, -5.0, 5.0, 17.0, 30.0]] * 6
    targets = (rng.uniform(size=logits.shape) > 0.8).astype(np.float32)
    targets[0, :6, :] = np.eye(6)
    weights = (np.arange(logits.size).reshape(logits.shape) % 7).astype(np.float32)
    return targets, logits, weights


def main():
    import tensorflow as tf
    import tf_keras
    from official.vision.losses import focal_loss

    targets, logits, weights = inputs()
    out = {}
    for gamma in GAMMAS:
        loss_fn = focal_loss.FocalLoss(ALPHA, gamma, reduction=tf_keras.losses.Reduction.SUM)
        y_pred = tf.constant(logits)
        with tf.GradientTape() as tape:
            tape.watch(y_pred)
            loss = loss_fn(tf.constant(targets), y_pred, sample_weight=tf.constant(weights))
        out[f"loss_{gamma}"] = loss.numpy()
        out[f"grad_{gamma}"] = tape.gradient(loss, y_pred).numpy()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "tfm_focal_gradient_reference.npz")
    np.savez(path, **out)
    print(f"wrote {path}: {sorted(out)}")


if __name__ == "__main__":
    main()
