"""The focal loss's hand-written gradient against TFM 2.20's own (a committed generator run in
TFM's venv) and against autodiff of TFM's formula in float64, and its fast modulator (no `Pow`
op for the usual gammas). Its values on the detection-ops batch are in test_detection_ops.py
(`test_focal_loss_equals_tfm_with_sum_reduction`)."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from lite_launcher.vision.losses import focal_loss

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfm_compare import DATA_DIR, load_generator  # noqa: E402


def _tfm_formula(y_true, y_pred, alpha, gamma):
    """TFM's element-wise focal loss as TFM writes it (float64 here), left to autodiff."""
    positive = tf.equal(y_true, 1.0)
    cross_entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    probs = tf.sigmoid(y_pred)
    probs_of_target = tf.where(positive, probs, 1.0 - probs)
    loss = tf.pow(1.0 - probs_of_target, gamma) * cross_entropy
    return tf.where(positive, alpha * loss, (1.0 - alpha) * loss)


def _batch(soft_targets=False):
    rng = np.random.default_rng(7)
    logits = rng.normal(size=(3, 40, 6)) * 4.0
    logits[0, :6, :] = [[-30.0, -17.0, -5.0, 5.0, 17.0, 30.0]] * 6  # saturated sigmoids
    targets = (rng.uniform(size=logits.shape) > 0.8).astype(np.float64)
    targets[0, :6, :] = np.eye(6)
    if soft_targets:
        targets[1] = rng.uniform(size=targets[1].shape)
    return targets, logits


def _value_and_grad(fn, targets, logits, dtype, *args):
    y_pred = tf.constant(logits, dtype)
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        # A non-uniform upstream gradient, so the per-element factor is checked.
        weights = tf.cast(tf.reshape(tf.range(tf.size(y_pred)) % 7, y_pred.shape), dtype)
        loss = tf.reduce_sum(fn(tf.constant(targets, dtype), y_pred, *args) * weights)
    return loss.numpy(), tape.gradient(loss, y_pred).numpy()


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
@pytest.mark.parametrize("soft_targets", [False, True])
def test_gradient_equals_autodiff_of_tfm_formula(gamma, soft_targets):
    targets, logits = _batch(soft_targets)
    loss, grad = _value_and_grad(focal_loss.sigmoid_focal_loss, targets, logits, tf.float32,
                                 0.25, gamma)
    ref_loss, ref_grad = _value_and_grad(_tfm_formula, targets, logits, tf.float64, 0.25, gamma)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-6)
    assert np.abs(ref_grad).max() > 0.1  # the check compares real gradients, not zeros


def test_gradient_is_finite_where_the_target_probability_rounds_to_one():
    # At |logit| 30, float32's 1 - q is 0: autodiff of TFM's formula multiplies 0^(g-1) by 0,
    # NaN for g < 1; the closed form has no (1 - q)^(g - 1).
    targets, logits = _batch()
    _, grad = _value_and_grad(focal_loss.sigmoid_focal_loss, targets, logits, tf.float32,
                              0.25, 0.5)
    _, tfm_grad = _value_and_grad(_tfm_formula, targets, logits, tf.float32, 0.25, 0.5)
    assert np.isnan(tfm_grad).any() and np.isfinite(grad).all()


def test_gradient_with_a_tensor_gamma():
    targets, logits = _batch()
    loss, grad = _value_and_grad(focal_loss.sigmoid_focal_loss, targets, logits, tf.float32,
                                 0.25, tf.constant(1.5))
    ref_loss, ref_grad = _value_and_grad(_tfm_formula, targets, logits, tf.float64, 0.25, 1.5)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-4, atol=1e-6)


def _graph_op_types(gamma):
    @tf.function
    def step(targets, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = tf.reduce_sum(focal_loss.sigmoid_focal_loss(targets, logits, 0.25, gamma))
        return tape.gradient(loss, logits)

    spec = tf.TensorSpec([2, 5, 3], tf.float32)
    graph = step.get_concrete_function(spec, spec).graph
    types = {op.type for op in graph.get_operations()}
    for function in graph.as_graph_def().library.function:  # the custom gradient's body
        types |= {node.op for node in function.node_def}
    return types


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0, 1.5, 2.0])
def test_common_gammas_need_no_pow(gamma):
    assert "Pow" not in _graph_op_types(gamma)


def test_other_gammas_use_pow():
    # The op-type check above can see a Pow: it finds the one a general gamma needs.
    assert "Pow" in _graph_op_types(2.5)


TFM_GEN = load_generator("make_tfm_focal_gradient_reference")
TFM_REF = dict(np.load(os.path.join(DATA_DIR, "tfm_focal_gradient_reference.npz")))


@pytest.mark.parametrize("gamma", TFM_GEN.GAMMAS)
def test_loss_and_gradient_equal_tfms_own(gamma):
    """Against TFM 2.20's FocalLoss and its autodiff gradient, written by TFM in its venv
    (make_tfm_focal_gradient_reference.py). TFM's gradient is NaN where float32's 1 - q is 0
    and gamma < 1 (0^(gamma-1) * 0); there lite's is finite and the rest must agree."""
    targets, logits, weights = TFM_GEN.inputs()
    loss_fn = focal_loss.FocalLoss(TFM_GEN.ALPHA, gamma, reduction="sum")
    y_pred = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(y_pred)
        loss = loss_fn(tf.constant(targets), y_pred, sample_weight=tf.constant(weights))
    grad = tape.gradient(loss, y_pred).numpy()
    np.testing.assert_allclose(loss.numpy(), TFM_REF[f"loss_{gamma}"], rtol=1e-6)
    tfm_grad = TFM_REF[f"grad_{gamma}"]
    finite = np.isfinite(tfm_grad)
    assert np.isfinite(grad).all() and finite.all() == (gamma >= 1)
    np.testing.assert_allclose(grad[finite], tfm_grad[finite], rtol=1e-5, atol=1e-6)
